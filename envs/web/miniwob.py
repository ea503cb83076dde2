"""MiniWoB++ tasks (HTML shipped by the `miniwob` package) in headless Chromium.

The page computes the reward itself (`WOB_RAW_REWARD_GLOBAL`); the env reads it after each action.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from functools import cache
from pathlib import Path

from selenium.common.exceptions import (
    ElementClickInterceptedException,
    ElementNotInteractableException,
    JavascriptException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.common.action_chains import ActionChains
from urllib3.exceptions import HTTPError

from envs.web import actions
from envs.web.browser import Browser
from rlsys.config import EnvConfig
from rlsys.env import EnvBrokenError, EnvSetupError
from rlsys.types import Observation, StepResult, Task

# Errors that mean the browser is gone or hung rather than that the action was bad.
_BROKEN = (WebDriverException, HTTPError, ConnectionError, TimeoutError)
_ACTION_FAILED = (
    ElementClickInterceptedException,
    ElementNotInteractableException,
    StaleElementReferenceException,
    JavascriptException,
)
_CHROME = ("reward-display", "query", "sync-task-cover", "episode-id")


@cache
def html_dir() -> Path:
    try:
        import miniwob
    except ImportError:
        raise EnvSetupError("MiniWoB++ tasks need the `miniwob` package: pip install 'rlsys[web]'") from None
    return Path(miniwob.__file__).parent / "html" / "miniwob"


def available_tasks() -> list[str]:
    return sorted(p.stem for p in html_dir().glob("*.html"))


_OBSERVE_SCRIPT = """
const elements = (function() { %s }).apply(null, arguments);
return {elements: elements, utterance: core.getUtterance(),
        state: [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON]};
"""


@cache
def _elements_script() -> str:
    return (Path(__file__).parent / "elements.js").read_text()


class MiniWoBEnv:
    def __init__(self, cfg: EnvConfig, env_id: str = "miniwob"):
        self.cfg = cfg
        self.env_id = env_id
        self.browser = Browser(cfg.chromium, cfg.chromedriver, cfg.window, cfg.headless, cfg.step_timeout_s)
        self._url = None
        self._tabs: OrderedDict[str, str] = OrderedDict()  # task page -> window handle
        self._elements: list[dict] = []
        self._utterance = ""
        self._steps = 0

    @property
    def driver(self):
        return self.browser.driver

    def pids(self) -> dict[str, list[int]]:
        return self.browser.pids()

    def reset(self, task: Task) -> Observation:
        path = html_dir() / f"{task.start or task.id}.html"
        if not path.is_file():
            raise EnvSetupError(f"MiniWoB++ has no task {path.stem!r}; see envs.web.miniwob.available_tasks()")
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
            self._steps = 0
            return self._observe()[0]
        except _BROKEN as e:
            raise EnvBrokenError(f"browser failed during reset: {type(e).__name__}: {e}") from None

    def _open(self, url: str) -> None:
        """Show `url`, keeping one tab per task page: switching tabs costs one round trip,
        loading a page several hundred milliseconds."""
        if url == self._url:
            return
        if url in self._tabs:
            self.driver.switch_to.window(self._tabs[url])
            self._tabs.move_to_end(url)
        else:
            if self._tabs:
                if len(self._tabs) >= self.cfg.max_tabs:
                    _, oldest = self._tabs.popitem(last=False)
                    self.driver.switch_to.window(oldest)
                    self.driver.close()
                self.driver.switch_to.new_window("tab")
            self.driver.get(url)
            self._tabs[url] = self.driver.current_window_handle
        self._url = url

    def step(self, action_text: str) -> StepResult:
        self._steps += 1
        action, parse_error = actions.try_parse(action_text, len(self._elements))
        info: dict = {"parse_error": parse_error, "action": action.to_dict() if action else None}
        try:
            if action is not None:
                info["action_error"] = self._perform(action)
            obs, (done, raw_reward, reason) = self._observe()
        except _BROKEN as e:
            raise EnvBrokenError(f"browser failed during step: {type(e).__name__}: {e}") from None
        success = bool(done) and raw_reward > 0
        if done:
            info["outcome"] = "success" if success else ("timeout" if reason == "timed out" else "failure")
        elif self._steps >= self.cfg.max_steps:
            done, info["outcome"] = True, "timeout"
        return StepResult(obs, 1.0 if success else 0.0, bool(done), info)

    def _perform(self, action: actions.ElementAction) -> str | None:
        """Run the action; a click the page refuses is the agent's mistake, not a crash."""
        element = self.driver.execute_script("return window.__rlsysElements[arguments[0]];", action.element)
        try:
            if action.kind == "click":
                # duration=0: Selenium otherwise animates every pointer move over 250 ms
                ActionChains(self.driver, duration=0).move_to_element(element).click().perform()
            else:
                element.clear()
                element.send_keys(action.text)
        except _ACTION_FAILED as e:
            return f"{type(e).__name__}: {e.msg}"
        return None

    def _observe(self) -> tuple[Observation, list]:
        """The observation and the page's episode state [done, raw reward, reason], in one script call."""
        page = self.driver.execute_script(_OBSERVE_SCRIPT % _elements_script(), "body", list(_CHROME))
        self._elements = page["elements"][: self.cfg.max_elements]
        if self._utterance is None:
            self._utterance = page["utterance"]
        ui_text = "\n".join(
            f'[{i}] {e["tag"]}{(" " + e["type"]) if e["type"] else ""} "{e["text"]}"'
            for i, e in enumerate(self._elements)
        )
        obs = Observation(
            screenshot_png=self.driver.get_screenshot_as_png(),
            ui_text=ui_text,
            location=self._url or "",
            task=self._utterance,
            extras={"grammar": actions.grammar(self._elements).to_dict(), "elements": self._elements},
        )
        return obs, page["state"]

    def close(self) -> None:
        self.browser.close()
