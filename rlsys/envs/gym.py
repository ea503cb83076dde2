"""rlsys's environments as Gymnasium environments, for people who bring their own trainer.

    import gymnasium as gym
    import rlsys.envs.gym  # registers rlsys/MiniWoB-v0, rlsys/Web-v0, rlsys/Android-v0 and rlsys/MiniWoB-<task>-v0

    env = gym.make("rlsys/MiniWoB-v0", tasks=["click-button", "click-link"])
    obs, info = env.reset(seed=0)                                  # one of `tasks`, drawn with the seed
    obs, info = env.reset(options={"task": "click-checkboxes"})    # or the one named
    obs, reward, terminated, truncated, info = env.step("click [2]")
    env = gym.make("rlsys/MiniWoB-click-button-v0")                # one MiniWoB++ task per id

Actions are the texts of the configured env action space (`env.action_space` in rlsys's config: by default
`element` on MiniWoB++ (`click [3]`), `pae` on the web, `autoui` on Android), exactly as rlsys's own policies
write them. Gymnasium's `env.action_space` is printable ASCII and newlines, at most 1024 characters: its
`sample()` is text, rarely an action; `info["valid_actions"]` lists texts the env carries out in the current
observation (a click on every element, typing into every field, the element-free actions of the space), so
`random.choice(info["valid_actions"])` is a random agent. An observation is a dict: `screenshot` (H x W x 3
uint8), `ui_text` (the element list), `location` (URL or app) and `instruction`; `info` holds what rlsys's env
reports (the elements, feedback, outcome, verdict...) but its time measurements. An episode is `terminated`
when the task ended it (success, failure, an answer) and `truncated` when it ran out of steps or time (outcome
"timeout").

`reset(seed=N)` seeds the env's generator, which draws the task among `tasks` and, for a MiniWoB++ task, the
page's seed (N itself when given; a draw from the generator on a reset without a seed), so a run of resets
after a seeded one repeats.

A task is a `Task`, a dict of its fields, or a string: a MiniWoB++ task name, or on the web a start URL (with
`options["instruction"]`). On Android, `serial` names a running device or emulator that rlsys did not start (it is
reset with the home key); rlsys's emulator pool is for training runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from rlsys.config import EnvConfig, build
from rlsys.core.types import Observation, Task
from rlsys.envs import make_env


class PageText(spaces.Text):
    """Page text, which is any language: every character of the Basic Multilingual Plane but the surrogates.
    Shown without its 63k characters."""

    def __init__(self):
        super().__init__(
            max_length=1 << 20,
            min_length=0,
            charset="".join(chr(c) for c in range(1, 0x10000) if not 0xD800 <= c < 0xE000),
        )

    def __repr__(self) -> str:
        return f"PageText({self.min_length}, {self.max_length}, charset=<the Basic Multilingual Plane>)"


def action_space() -> spaces.Text:
    """What the action spaces write: printable ASCII and newlines (PAE's `Thought: ...\nAction: ...`); a thought
    of 200 characters, the action and a typed text fit."""
    return spaces.Text(max_length=1024, charset="".join(chr(c) for c in range(32, 127)) + "\n")


_MINIWOB = {"kind": "miniwob", "viewport": [400, 400]}  # tasks draw in 160x210
_DEFAULTS = {
    "rlsys/MiniWoB-v0": _MINIWOB,
    "rlsys/Web-v0": {"kind": "web", "action_space": "pae"},
    "rlsys/Android-v0": {"kind": "android", "action_space": "autoui"},
}
PAGE_SEEDS = 1 << 31  # a MiniWoB++ page's seed, drawn by a reset without one
# Time measurements the envs report, left out of `info`: Gymnasium asks for the same info from the same seed and
# actions (tests/envs/test_gym.py runs its checker)
MEASURED = ("settle_ms", "timing")


class RlsysEnv(gymnasium.Env):
    """One rlsys env behind Gymnasium's API. `env` is an `env:` config section (a dict or an `EnvConfig`; its keys
    are in docs/environments.md), `tasks` what `reset` draws from when it is not told a task."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 1}  # render() shows the last observation

    def __init__(self, env: dict | EnvConfig, tasks: list | None = None, serial: str = "", render_mode=None):
        self.cfg = env if isinstance(env, EnvConfig) else build(EnvConfig, dict(env), "env")
        self.tasks = [self._task(t) for t in tasks or ()]
        self.render_mode = render_mode
        self._env = make_env(self.cfg, "gym", emulators=_device(self.cfg, serial))
        width, height = self._image_size()
        self.observation_space = spaces.Dict(
            {
                "screenshot": spaces.Box(0, 255, (height, width, 3), np.uint8),
                "ui_text": PageText(),
                "location": PageText(),
                "instruction": PageText(),
            }
        )
        self.action_space = action_space()  # each env its own: a space's generator is seeded per env
        self._last: Observation | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "task" in options:
            task = self._task(options["task"], options.get("instruction", ""))
        elif self.tasks:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        else:
            raise ValueError("reset needs options={'task': ...}, or tasks given when the env was made")
        if task.suite == "miniwob" and "seed" not in task.meta:
            page_seed = seed if seed is not None else int(self.np_random.integers(PAGE_SEEDS))
            task = dataclasses.replace(task, meta={**task.meta, "seed": page_seed})
        self._last = self._env.reset(task)
        return self._observation(self._last), _info({"task": task.id, **self._last.extras}, self._valid(self._last))

    def step(self, action: str):
        result = self._env.step(action)
        self._last = result.observation
        outcome = result.info.get("outcome")
        truncated = result.done and outcome == "timeout"
        info = _info({**result.observation.extras, **result.info}, self._valid(result.observation))
        return (
            self._observation(result.observation),
            float(result.reward),
            result.done and not truncated,
            truncated,
            info,
        )

    def render(self):
        return None if self._last is None else self._last.screenshot

    def close(self):
        self._env.close()

    def _valid(self, obs: Observation) -> dict[str, list[str]]:
        """`valid_actions`: texts the env carries out in `obs`."""
        if self.cfg.kind == "android":
            from rlsys.envs.android.actions import examples

            return {"valid_actions": examples(self.cfg.action_space, self._env.screen_size)}
        from rlsys.envs.web.spaces import examples

        return {"valid_actions": examples(self._env.space, obs.extras.get("elements") or [])}

    def _observation(self, obs: Observation) -> dict[str, Any]:
        return {"screenshot": obs.screenshot, "ui_text": obs.ui_text, "location": obs.location, "instruction": obs.task}

    def _image_size(self) -> tuple[int, int]:
        """(width, height) of every screenshot, as the env makes them."""
        if self.cfg.kind == "android":  # the device's screen, shrunk by env.android.screenshot_scale
            (width, height), scale = self._env.screen_size, self.cfg.android.screenshot_scale
            if (1 / scale).is_integer():
                factor = int(1 / scale)
                return -(-width // factor), -(-height // factor)
            return max(1, round(width * scale)), max(1, round(height * scale))
        if self.cfg.kind == "sim":
            from rlsys.envs.sim import SCREEN

            return SCREEN, SCREEN
        if self.cfg.kind == "synthweb":
            return self._env.image_size
        return self._env.area[2] * self._env.scale, self._env.area[3] * self._env.scale

    def _task(self, task, instruction: str = "") -> Task:
        if isinstance(task, Task):
            return task
        if isinstance(task, dict):
            return Task(**task)
        if not isinstance(task, str) or not task:
            raise ValueError(f"a task is a Task, a dict of its fields or a non-empty string, got {task!r}")
        if self.cfg.kind == "miniwob":
            return Task(id=task, instruction="", suite="miniwob", start=task)
        if self.cfg.kind == "web":
            return Task(id=task, instruction=instruction, suite="web", start=task)
        return Task(id=task, instruction=instruction or task, suite="android", start="home")


def _info(reported: dict, valid: dict) -> dict:
    return {**{k: v for k, v in reported.items() if k not in MEASURED}, **valid}


def _device(cfg: EnvConfig, serial: str):
    """What an Android env leases its device from: a pool that lends the device `serial` names and starts none."""
    if cfg.kind != "android":
        return None
    if not serial:
        raise ValueError("an Android env needs serial=, the adb serial of a running device or emulator")
    from rlsys.envs.android.emulator import EmulatorPool

    return EmulatorPool(dataclasses.replace(cfg.android, devices=[serial]))


def _register() -> None:
    ids = {env_id: (defaults, None) for env_id, defaults in _DEFAULTS.items()}
    ids |= {f"rlsys/MiniWoB-{name}-v0": (_MINIWOB, name) for name in _miniwob_tasks()}
    for env_id, (defaults, task) in ids.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point=_factory(defaults, task), disable_env_checker=False)


def _miniwob_tasks() -> list[str]:
    """The MiniWoB++ tasks the installed `miniwob` package ships (none without it)."""
    from rlsys.core.env import EnvSetupError
    from rlsys.envs.web.miniwob import available_tasks

    try:
        return available_tasks()
    except EnvSetupError:
        return []


def _factory(defaults: dict, task: str | None):
    def make(env: dict | None = None, **kwargs) -> RlsysEnv:
        if task is not None:
            kwargs.setdefault("tasks", [task])
        return RlsysEnv({**defaults, **(env or {})}, **kwargs)

    return make


_register()
