"""A simulated env (`env.kind: sim`) for scaling tests: the latency of a phone or a browser, none of its cost.

`SimEnv` keeps the Env contract but only sleeps, so hundreds of runners fit on one machine; it is what
benchmarks of collection (sync against async, many runners, hangs) run against. Every random draw comes
from one stream seeded by `env.sim.seed` and the env's id, in a fixed order per step, so an env replays
exactly.

- `reset` sleeps a lognormal latency (`env.sim.reset_median_s`, `reset_sigma`).
- `step` sleeps a lognormal latency (`step_median_s`, `step_sigma`): `median * exp(sigma * N(0, 1))`, a
  heavy right tail (sigma 0.5: p99 ~3.2x the median; sigma 1: ~10x). With probability `hang_prob`, or
  when the drawn latency exceeds `env.step_timeout_s`, the step hangs: it waits `env.step_timeout_s` and
  raises `EnvBrokenError`, as a WebDriver or adb call that timed out does, and the runner starts a new env.
- A step whose action parses succeeds with probability `success_prob` (reward 1, `done`, `info["outcome"]
  = "success"`); the `env.max_steps`-th step without success ends the episode as `timeout`. An action that
  does not parse is reported in `info["parse_error"]` and the step counts, as in the web envs.
- Observations: an 8x8 grey PNG and `ui_text` listing `env.sim.num_elements` numbered elements in the
  web envs' format (`[0] button "Item 0"`), with the element list and, for the element space, its grammar
  in `extras`, so policies that read either work unchanged.
"""

from __future__ import annotations

import io
import math
import random
import threading
from functools import cache

import numpy as np

from rlsys.config import EnvConfig
from rlsys.core.env import EnvBrokenError
from rlsys.core.types import Observation, StepResult, Task
from rlsys.envs.web import spaces

SCREEN = 8  # pixels per side of the simulated screenshot


def lognormal(rng: random.Random, median_s: float, sigma: float) -> float:
    """A latency with the given median and log-space spread (sigma 0: exactly the median)."""
    if median_s <= 0:
        return 0.0
    return median_s * math.exp(sigma * rng.gauss(0.0, 1.0))


@cache
def _png(value: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((SCREEN, SCREEN), value, dtype=np.uint8), mode="L").save(buf, format="PNG")
    return buf.getvalue()


class SimEnv:
    def __init__(self, cfg: EnvConfig, env_id: str = "sim", sleep=None):
        self.cfg = cfg
        self.sim = cfg.sim
        self.env_id = env_id
        self.rng = random.Random(f"{self.sim.seed}/{env_id}")
        self.space = spaces.get(cfg.action_space)
        self._closed = threading.Event()
        # the one place time passes; close() wakes a sleeping step (tests may swap in a recorder)
        self.sleep = sleep if sleep is not None else self._closed.wait
        self.task: Task | None = None
        self.steps = 0
        self.episodes = 0
        self.elements = [
            {"tag": "button", "type": "", "text": f"Item {i}", "editable": False} for i in range(self.sim.num_elements)
        ]
        self.ui_text = "\n".join(f'[{i}] {e["tag"]} "{e["text"]}"' for i, e in enumerate(self.elements))
        grammar = getattr(self.space, "grammar", None)
        built = grammar(self.elements) if grammar is not None else None
        self.grammar = built.to_dict() if built is not None else None

    def _wait(self, seconds: float) -> None:
        if self._closed.is_set():
            raise EnvBrokenError(f"sim env {self.env_id} was closed")
        self.sleep(seconds)
        if self._closed.is_set():
            raise EnvBrokenError(f"sim env {self.env_id} was closed mid-call")

    def _observe(self, feedback: str | None = None) -> Observation:
        extras = {"elements": self.elements, "feedback": feedback, "step": self.steps}
        if self.grammar is not None:
            extras["grammar"] = self.grammar
        instruction = (self.task.instruction or f"simulated task {self.task.id}") if self.task else ""
        return Observation(_png(16 * (self.steps % 16)), self.ui_text, f"sim://{self.env_id}", instruction, extras)

    def reset(self, task: Task) -> Observation:
        self.task = task
        self.steps = 0
        self.episodes += 1
        self._wait(lognormal(self.rng, self.sim.reset_median_s, self.sim.reset_sigma))
        return self._observe()

    def step(self, action_text: str) -> StepResult:
        if self.task is None:
            raise RuntimeError("step() before reset()")
        self.steps += 1
        # drawn every step in this order, whatever happens, so the stream stays aligned
        hang = self.rng.random() < self.sim.hang_prob
        latency = lognormal(self.rng, self.sim.step_median_s, self.sim.step_sigma)
        lucky = self.rng.random() < self.sim.success_prob
        timeout = self.cfg.step_timeout_s
        if hang or latency > timeout:
            self._wait(timeout)
            why = "hung (simulated)" if hang else f"would have taken {latency:.2f}s (simulated tail)"
            raise EnvBrokenError(
                f"sim env {self.env_id}: step {self.steps} got no answer within env.step_timeout_s={timeout:g}s: {why}"
            )
        self._wait(latency)
        action, parse_error = spaces.try_parse(self.space, action_text, len(self.elements))
        info: dict = {"action": action.to_dict() if action else None, "parse_error": parse_error, "latency_s": latency}
        if action is not None and lucky:
            info["outcome"] = "success"
            return StepResult(self._observe(), 1.0, True, info)
        if self.steps >= self.cfg.max_steps:
            info["outcome"] = "timeout"
            return StepResult(self._observe(parse_error), 0.0, True, info)
        return StepResult(self._observe(parse_error), 0.0, False, info)

    def pids(self) -> dict:
        return {}  # no browser or device process behind it

    def close(self) -> None:
        self._closed.set()
