"""MiniWoB++ tasks (HTML shipped by the `miniwob` package) in headless Chromium.

The page computes the reward itself (`WOB_RAW_REWARD_GLOBAL`); the env reads it with every
observation.
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


class MiniWoBEnv(WebEnv):
    skip_ids = ("reward-display", "query", "sync-task-cover", "episode-id")
    page_state_script = (
        "return {state: [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON], utterance: core.getUtterance()};"
    )

    def __init__(self, cfg: EnvConfig, env_id: str = "miniwob"):
        super().__init__(cfg, env_id)
        self._pages: OrderedDict[str, str] = OrderedDict()  # task page -> its tab
        self._page = None
        self._utterance = ""

    def reset(self, task: Task) -> Observation:
        path = html_dir() / f"{task.start or task.id}.html"
        if not path.is_file():
            raise EnvSetupError(f"MiniWoB++ has no task {path.stem!r}; see envs.web.miniwob.available_tasks()")
        self.task = task
        self._steps = 0
        self._history.clear()
        try:
            self._open(path.as_uri())
            seed = task.meta.get("seed")
            if seed is not None:
                self.driver.execute_script(f"Math.seedrandom({int(seed)});")
            ready = self.driver.execute_script(
                "core.EPISODE_MAX_TIME = arguments[0]; core.startEpisodeReal(); return WOB_TASK_READY;",
                int(self.cfg.episode_time_limit_s * 1000),
            )
            deadline = time.monotonic() + self.cfg.step_timeout_s
            while not ready:
                if time.monotonic() > deadline:
                    raise EnvBrokenError(f"{task.id}: page never became ready")
                time.sleep(0.02)
                ready = self.driver.execute_script("return WOB_TASK_READY;")
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
            self.driver.switch_to.window(self._pages[url])
            self._pages.move_to_end(url)
        else:
            if self._pages:
                if len(self._pages) >= self.cfg.max_tabs:
                    _, oldest = self._pages.popitem(last=False)
                    self.driver.switch_to.window(oldest)
                    self.driver.close()
                    self._tabs.discard(oldest)
                    # a new tab can only be opened from a tab that is still open
                    self.driver.switch_to.window(next(iter(self._pages.values())))
                self.driver.switch_to.new_window("tab")
                self.browser.prepare_tab()
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
