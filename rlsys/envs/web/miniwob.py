"""MiniWoB++ tasks (HTML shipped by the `miniwob` package) in headless Chromium.

The page computes the reward itself (`WOB_RAW_REWARD_GLOBAL`); the env reads it with every
observation.

What the agent sees is the task area only (`#wrap`, 160x210 pixels at the top left of every task page,
where the official MiniWoB++ environment crops its screenshots too), drawn `env.task_area_scale` times
as large. The page's own harness is hidden: the reward panel beside the task area (last reward, average
of the last 10, time left, episodes done), the trace of past clicks, and the START cover that is shown
over the task once an episode is done; they would tell the agent about earlier episodes' rewards.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from functools import cache
from pathlib import Path

from rlsys.config import EnvConfig
from rlsys.core.env import EnvBrokenError, EnvSetupError
from rlsys.core.evaluator import Verdict
from rlsys.core.types import Observation, Task
from rlsys.envs.web.confinement import Policy
from rlsys.envs.web.webenv import BROKEN, WebEnv


@cache
def html_dir() -> Path:
    try:
        import miniwob
    except ImportError:
        raise EnvSetupError("MiniWoB++ tasks need the `miniwob` package: pip install 'rlsys[web]'") from None
    return Path(miniwob.__file__).parent / "html" / "miniwob"


def available_tasks() -> list[str]:
    return sorted(p.stem for p in html_dir().glob("*.html"))


TASK_AREA = (0, 0, 160, 210)  # #wrap in the package's core.css: left, top, width, height
# Hidden on every task page (the env adds this stylesheet; the task itself is untouched).
HARNESS_CSS = "#reward-display, #click-canvas, #sync-task-cover { display: none !important; }"
_HIDE_HARNESS = """
if (!document.getElementById("rlsys-hide-harness")) {
  const style = document.createElement("style");
  style.id = "rlsys-hide-harness";
  style.textContent = arguments[1];
  document.head.appendChild(style);
}
"""


def check_settings(cfg: EnvConfig) -> None:
    """What MiniWoB++ needs of the config besides the web env's (`webenv.check_settings`), as an EnvSetupError;
    also run before Ray starts (rlsys.envs.settings)."""
    scale = cfg.task_area_scale
    if not isinstance(scale, int) or scale < 1:
        raise EnvSetupError(f"env.task_area_scale must be a whole number >= 1, got {scale!r}")
    width, height = TASK_AREA[0] + TASK_AREA[2], TASK_AREA[1] + TASK_AREA[3]
    if cfg.viewport[0] < width or cfg.viewport[1] < height:
        raise EnvSetupError(f"env.viewport {cfg.viewport} must hold MiniWoB++'s {width}x{height} task area")


class MiniWoBEnv(WebEnv):
    skip_ids = ("reward-display", "query", "sync-task-cover", "episode-id")
    page_state_script = (
        "return {state: [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON], utterance: core.getUtterance()};"
    )
    # jQuery UI's widgets (accordions, date pickers, menus) animate with jQuery's timer ticks, which a busy machine
    # spaces further apart than the quiet window; an animation's timer leaves jQuery.timers when it is done
    busy_script = "return window.jQuery !== undefined && jQuery.timers.length > 0;"

    def __init__(self, cfg: EnvConfig, env_id: str = "miniwob"):
        check_settings(cfg)
        super().__init__(cfg, env_id)
        self.area, self.scale = TASK_AREA, cfg.task_area_scale
        self._pages: OrderedDict[str, str] = OrderedDict()  # task page -> its tab
        self._page = None
        self._utterance = ""

    def _forget_tabs(self) -> None:
        self._pages.clear()
        self._page = None

    def _reset(self, task: Task) -> Observation:
        path = html_dir() / f"{task.start or task.id}.html"
        if not path.is_file():
            raise EnvSetupError(f"MiniWoB++ has no task {path.stem!r}; see envs.web.miniwob.available_tasks()")
        self.task = task
        self._steps = 0
        self._history.clear()
        self._confine(path.as_uri(), Policy())  # file:// pages only: the proxy refuses every request
        try:
            self._open(path.as_uri())
            seed = task.meta.get("seed")
            if seed is not None:
                self.driver.execute_script(f"Math.seedrandom({int(seed)});")
            ready = self.driver.execute_script(
                _HIDE_HARNESS + "core.EPISODE_MAX_TIME = arguments[0]; core.startEpisodeReal(); return WOB_TASK_READY;",
                int(self.cfg.episode_time_limit_s * 1000),
                HARNESS_CSS,
            )
            deadline = time.monotonic() + self.cfg.step_timeout_s
            while not ready:
                if time.monotonic() > deadline:
                    raise EnvBrokenError(f"{task.id}: page never became ready")
                time.sleep(0.02)
                ready = self.driver.execute_script("return WOB_TASK_READY;")
            self._acted_at = time.monotonic()  # the episode was started by script, just now
            self._utterance = None  # read with the first observation
            return self._observe({})[0]
        except BROKEN as e:
            raise EnvBrokenError(f"browser failed during reset: {type(e).__name__}: {e}") from None

    def _open(self, url: str) -> None:
        """Show `url`, keeping one tab per task page: switching tabs costs one round trip,
        loading a page several hundred milliseconds."""
        if url == self._page:
            return
        if url in self._pages:
            self.browser.switch_to(self._pages[url])
            self._pages.move_to_end(url)
        else:
            if self._pages:
                if len(self._pages) >= self.cfg.max_tabs:
                    _, oldest = self._pages.popitem(last=False)
                    self.browser.switch_to(oldest)
                    self.driver.close()
                    self._tabs.discard(oldest)
                    # a new tab can only be opened from a tab that is still open
                    self.browser.switch_to(next(iter(self._pages.values())))
                self.browser.new_tab()
            self.driver.get(url)
            self._pages[url] = self.driver.current_window_handle
            self._tabs.add(self.driver.current_window_handle)
        self._page = url

    def _may_visit(self, url: str) -> bool:
        return url == "about:blank" or url.startswith(html_dir().as_uri())

    def _observe(self, events: dict, feedback: str | None = None):
        obs, page_state = super()._observe(events, feedback)
        if self._utterance is None:
            self._utterance = obs.task = page_state["utterance"]
        return obs, page_state

    def _instruction(self) -> str:
        return self._utterance or ""

    def _finish(self, action, page_state, info: dict) -> tuple[bool, float]:
        done, raw_reward, reason = page_state["state"]
        success = bool(done) and raw_reward > 0
        if done:
            info["outcome"] = "success" if success else ("timeout" if reason == "timed out" else "failure")
            info["verdict"] = Verdict(success, "miniwob", f"page reward {raw_reward:g} ({reason or 'done'})").to_dict()
        elif self._steps >= self.cfg.max_steps:
            done, info["outcome"] = True, "timeout"
        return bool(done), 1.0 if success else 0.0
