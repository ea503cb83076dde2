"""rlsys's environments as Gymnasium environments, for people who bring their own trainer.

    import gymnasium as gym
    import rlsys.gym  # registers rlsys/MiniWoB-v0, rlsys/Web-v0 and rlsys/Android-v0

    env = gym.make("rlsys/MiniWoB-v0", tasks=["click-button", "click-link"])
    obs, info = env.reset(seed=0)                                  # one of `tasks`, drawn with the seed
    obs, info = env.reset(options={"task": "click-checkboxes"})    # or the one named
    obs, reward, terminated, truncated, info = env.step('Thought: ...\\nAction: Click [2]')

Actions are the texts of the configured action space (`env.action_space`: by default `element` on MiniWoB++
(`click [3]`), `pae` on the web, `autoui` on Android), exactly as rlsys's own policies write them. An observation
is a dict: `screenshot` (H x W x 3 uint8), `ui_text` (the element list), `location` (URL or app) and
`instruction`; `info` holds what rlsys's env reports (the elements, feedback, outcome, verdict...). An episode is
`terminated` when the task ended it (success, failure, an answer) and `truncated` when it ran out of steps or
time (outcome "timeout").

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

# Every character of the Basic Multilingual Plane but the surrogates: page text is any language.
_TEXT = spaces.Text(
    max_length=1 << 20, min_length=0, charset="".join(chr(c) for c in range(1, 0x10000) if not 0xD800 <= c < 0xE000)
)
_DEFAULTS = {
    "rlsys/MiniWoB-v0": {"kind": "miniwob", "viewport": [400, 400]},  # tasks draw in 160x210
    "rlsys/Web-v0": {"kind": "web", "action_space": "pae"},
    "rlsys/Android-v0": {"kind": "android", "action_space": "autoui"},
}


class RlsysEnv(gymnasium.Env):
    """One rlsys env behind Gymnasium's API. `env` is an `env:` config section (a dict or an `EnvConfig`; its keys
    are in docs/environments.md), `tasks` what `reset` draws from when it is not told a task."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 1}  # render() shows the last observation

    def __init__(self, env: dict | EnvConfig, tasks: list | None = None, serial: str = "", render_mode=None):
        self.cfg = env if isinstance(env, EnvConfig) else build(EnvConfig, dict(env), "env")
        self.tasks = [self._task(t) for t in tasks or ()]
        self.render_mode = render_mode
        self._env = _make(self.cfg, serial)
        width, height = self._image_size()
        self.observation_space = spaces.Dict(
            {
                "screenshot": spaces.Box(0, 255, (height, width, 3), np.uint8),
                "ui_text": _TEXT,
                "location": _TEXT,
                "instruction": _TEXT,
            }
        )
        self.action_space = _TEXT
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
        if seed is not None and task.suite == "miniwob" and "seed" not in task.meta:
            task = dataclasses.replace(task, meta={**task.meta, "seed": seed})
        self._last = self._env.reset(task)
        return self._observation(self._last), {"task": task.id, **self._last.extras}

    def step(self, action: str):
        result = self._env.step(action)
        self._last = result.observation
        outcome = result.info.get("outcome")
        truncated = result.done and outcome == "timeout"
        info = {**result.observation.extras, **result.info}
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


def _make(cfg: EnvConfig, serial: str):
    if cfg.kind == "android":
        if not serial:
            raise ValueError("an Android env needs serial=, the adb serial of a running device or emulator")
        from rlsys.envs.android.emulator import Lease
        from rlsys.envs.android.env import AndroidEnv

        return AndroidEnv(cfg, "gym", Lease(serial))
    from rlsys.envs import make_env

    return make_env(cfg, "gym")


def _register() -> None:
    for env_id, defaults in _DEFAULTS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point=_factory(defaults), disable_env_checker=False)


def _factory(defaults: dict):
    def make(env: dict | None = None, **kwargs) -> RlsysEnv:
        return RlsysEnv({**defaults, **(env or {})}, **kwargs)

    return make


_register()
