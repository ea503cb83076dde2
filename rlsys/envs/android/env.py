"""AndroidEnv: one leased Android device played through adb, in the AutoUI or CogAgent action format.

reset: the emulator's snapshot is loaded through its console (a device the pool did not start gets
the home key instead), then the suite's start state: the home screen, or the browser at a URL.
step: the model's text is parsed; text that is not an action is a no-op with the parse error
recorded. After every action the env waits until two screenshots in a row are equal (bounded by
env.settle_timeout_s), never a fixed sleep. The env cannot tell whether a task succeeded: an episode
the agent ends is `unknown` until the evaluator (a judge, or a function check) decides.
"""

from __future__ import annotations

import io
import logging
import time
from typing import Callable

import numpy as np

from rlsys.config import EnvConfig
from rlsys.core.env import EnvBrokenError
from rlsys.core.types import Observation, StepResult, Task
from rlsys.envs.android.actions import ActionParseError, AndroidAction, parse_action, to_pixels
from rlsys.envs.android.device import (
    KEY_BACK,
    KEY_ENTER,
    KEY_HOME,
    AndroidDevice,
    DeviceLostError,
    Screen,
    UnicodeInputError,
)
from rlsys.envs.android.emulator import ConsoleError, Lease, Leases, load_snapshot

_KEY_ACTIONS = {"home": KEY_HOME, "back": KEY_BACK, "enter": KEY_ENTER}
TERMINAL = frozenset({"complete", "impossible"})
log = logging.getLogger(__name__)


class AndroidEnv:
    def __init__(self, cfg: EnvConfig, env_id: str, lease: Lease, release: Callable[[bool], None] | None = None):
        if cfg.action_space not in ("autoui", "cogagent"):
            raise ValueError(f"env.action_space must be autoui or cogagent for Android, got {cfg.action_space!r}")
        self.cfg = cfg
        self.android = cfg.android
        self.env_id = env_id
        self.lease = lease
        self._release = release
        self.broken = False
        self.task: Task | None = None
        self.history: list[dict] = []  # the episode's steps so far, as the agent's prompt shows them
        self.device = self._guard(
            lambda: AndroidDevice(
                lease.serial,
                cfg.android.adb_server_port,
                cfg.step_timeout_s,
                unicode_ime=cfg.android.unicode_input == "adbkeyboard",
            )
        )

    @property
    def screen_size(self) -> tuple[int, int]:
        return self.device.width, self.device.height

    def _guard(self, fn):
        """Run `fn`; a lost device or console marks the env broken (the runner then gets a fresh one)."""
        try:
            return fn()
        except (DeviceLostError, ConsoleError) as e:
            self.broken = True
            raise EnvBrokenError(f"{self.env_id} ({self.lease.serial}): {e}") from e

    # ------------------------------------------------------------------ episode

    def reset(self, task: Task) -> Observation:
        self.task = task
        return self._guard(lambda: self._reset(task))

    def _reset(self, task: Task) -> Observation:
        t0, adb0 = time.perf_counter(), self.device.adb_seconds
        self.history = []
        if self.lease.console_port is not None:
            load_snapshot(self.lease, self.android.snapshot_timeout_s)
        else:
            self.device.key(KEY_HOME)
        start = self.android.browser_url if task.start == "browser" else task.start
        if start.startswith(("http://", "https://")):
            self.device.open_url(start)
        elif start not in ("", "home"):
            self.device.shell(["am", "start", "-n", start])
        obs = self._observe(self._settled_screen(), location=self.device.foreground())
        obs.extras["timing"] = _timing(t0, adb0, self.device.adb_seconds)
        return obs

    def step(self, action_text: str) -> StepResult:
        if self.task is None:
            raise RuntimeError("step() before reset()")
        return self._guard(lambda: self._step(action_text))

    def _step(self, action_text: str) -> StepResult:
        t0, adb0 = time.perf_counter(), self.device.adb_seconds
        info: dict = {}
        action: AndroidAction | None = None
        try:
            action = parse_action(action_text, self.cfg.action_space, self.screen_size)
            info["action"] = action.to_dict()
        except ActionParseError as e:  # a no-op: the step counts, the screen stays
            info["parse_error"] = str(e)
        done = action is not None and action.kind in TERMINAL
        if action is not None and not done:
            try:
                self._act(action)
            except (ValueError, UnicodeInputError) as e:
                info["action_error"] = str(e)
        screen = self._settled_screen() if not done else self.device.screen()
        location = self.device.foreground() if done else ""
        if done:  # the env cannot score an AitW task: the evaluator decides
            info["outcome"] = "unknown"
        self.history.append({"step": len(self.history) + 1, "action": action_text.strip()})
        obs = self._observe(screen, location)
        obs.extras["feedback"] = info.get("parse_error") or info.get("action_error")
        info["timing"] = _timing(t0, adb0, self.device.adb_seconds)
        return StepResult(obs, 0.0, done, info)

    def _act(self, action: AndroidAction) -> None:
        size = self.screen_size
        if action.kind == "tap":
            self.device.tap(*to_pixels(action.point, size))
        elif action.kind == "swipe":
            self.device.swipe(*to_pixels(action.point, size), *to_pixels(action.end, size), self.android.swipe_ms)
        elif action.kind == "type":
            self.device.type_text(action.text)
        else:
            self.device.key(_KEY_ACTIONS[action.kind])

    # ------------------------------------------------------------------ screen

    def _settled_screen(self) -> Screen:
        """The first screenshot equal to the one before it, or the last one taken by the deadline."""
        deadline = time.monotonic() + self.cfg.settle_timeout_s
        previous = self.device.screen()
        while time.monotonic() < deadline:
            time.sleep(self.android.settle_interval_s)
            current = self.device.screen()
            if current.same_as(previous):
                return current
            previous = current
        return previous

    def _observe(self, screen: Screen, location: str = "") -> Observation:
        return Observation(
            screenshot_png=encode_png(screen.rgba, self.android.screenshot_scale),
            ui_text="",
            location=location,
            task=self.task.instruction if self.task else "",
            extras={
                "screen_size": list(self.screen_size),
                "history": self.history[max(0, len(self.history) - self.cfg.history) :],
            },
        )

    def pids(self) -> dict:
        return {}

    def close(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release(self.broken)


def leased_env(cfg: EnvConfig, env_id: str, emulators: Leases) -> AndroidEnv:
    """An AndroidEnv on a device leased from `emulators`; closing the env hands the lease back."""
    lease = emulators.acquire()

    def release(broken: bool) -> None:
        try:
            emulators.release(lease.serial, broken)
        except Exception as e:  # the next acquire starts or restarts an emulator anyway
            log.warning("%s: releasing %s failed: %s", env_id, lease.serial, e)

    try:
        return AndroidEnv(cfg, env_id, lease, release)
    except Exception:
        release(True)
        raise


def encode_png(pixels: np.ndarray, scale: float) -> bytes:
    """RGB or RGBA pixels as an RGB PNG, downscaled by `scale` (a box filter; 0.5 halves each side)."""
    from PIL import Image

    image = Image.fromarray(pixels)
    if scale != 1.0:
        factor = 1.0 / scale
        if factor.is_integer():
            image = image.reduce(int(factor))
        else:
            image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))))
    out = io.BytesIO()
    image.convert("RGB").save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _timing(t0: float, adb0: float, adb1: float) -> dict:
    total = time.perf_counter() - t0
    return {"env_s": round(total, 5), "adb_s": round(adb1 - adb0, 5)}
