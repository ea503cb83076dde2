"""A web env for any site: set-of-marks observations, pluggable action spaces, waiting by page
events instead of sleeps, and guards (web confinement by origin, dialogs, new tabs, downloads, PDFs).

Every request of the browser goes through the env's filtering proxy and is allowed or refused by origin
before it is sent (confinement.py); the page's URL is also checked before every action and after going
back, and the refusals since the last observation are in each step's info["blocked_requests"].

One browser serves many episodes; cookies and storage are cleared between episodes. The runner relaunches
a browser that breaks (EnvBrokenError); the env itself relaunches one before an episode once it has served
`env.browser_max_episodes` episodes or holds more than `env.browser_memory_mb` (checked every few episodes).
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections import deque
from functools import cache
from pathlib import Path
from urllib.parse import unquote

from selenium.common.exceptions import TimeoutException, UnexpectedAlertPresentException, WebDriverException
from urllib3.exceptions import HTTPError

from rlsys.config import EnvConfig
from rlsys.core.env import EnvBrokenError, EnvSetupError
from rlsys.core.types import Observation, StepResult, Task
from rlsys.envs.web import spaces
from rlsys.envs.web.browser import Browser, PageGoneError, PageScriptError
from rlsys.envs.web.confinement import ConfinementProxy, Policy, browser_split, origin_of, parse_origin
from rlsys.envs.web.devtools import DevToolsError
from rlsys.envs.web.element_list import render_pae, render_roles
from rlsys.envs.web.marks import draw_marks
from rlsys.envs.web.spaces import TERMINAL, WebAction
from rlsys.envs.web.webarena import evaluate


class ScreenshotMissed(Exception):
    """Chromium did not photograph the page, which most likely navigated meanwhile (Browser.screenshot_png)."""


# Errors that mean the browser is gone or hung rather than that the action was bad (a screenshot missed as often
# as _OBSERVE_ATTEMPTS allows among them).
BROKEN = (WebDriverException, HTTPError, ConnectionError, TimeoutError, DevToolsError, ScreenshotMissed)
_DIALOG_RETRIES = 5
_QUICK_REPLY_S = 2.0  # a page script's reply over DevTools, beyond its own waiting: longer means a load holds it
_SETTLE_ATTEMPTS = 5
_CAPTURE_S = 3.0  # a screenshot takes 20-400 ms; one asked for as the page navigates may never be answered
_OBSERVE_ATTEMPTS = 3  # an observation whose screenshot was missed is made again, on the page the tab is at then


@cache
def _observe_script(page_state: str, busy: str) -> str:
    here = Path(__file__).parent
    observe = (here / "observe.js").read_text().replace("/*EXTRA*/", page_state).replace("/*BUSY*/", busy)
    return (here / "elements.js").read_text() + "\n" + observe


def page_allowed(url: str, policy: Policy, start: str, schemes: frozenset[str] = frozenset()) -> bool:
    """Whether a page may be on `url`, read as the browser reads it: an http(s) origin the policy allows;
    a file:// page beneath the folder of a task that starts on one; a scheme that `env.allowed_origins`
    names (`scheme:`); about:blank always."""
    if url == "about:blank":
        return True
    scheme = browser_split(url).scheme.lower()
    if scheme in ("http", "https"):
        return policy.allows_url(url)
    if scheme == "file" and start.startswith("file://"):
        folder = unquote(browser_split(start).path).rsplit("/", 1)[0] + "/"
        path = unquote(browser_split(url).path)
        return path.startswith(folder) and "/../" not in path and not path.endswith("/..")
    return scheme in schemes


def episode_policy(cfg: EnvConfig, start: str) -> Policy:
    """The origins one episode may reach: the task's start, env.allowed_origins and env.allowed_domains (see
    confinement.py), and the search engine's origin only while neither lists an origin or a domain: a default
    never widens an allowlist the config sets. An empty or unparseable start adds nothing."""
    implicit = (start,) if sets_allowlist(cfg) else (start, cfg.search_engine)
    origins = {o for url in implicit if url and (o := origin_of(url)) is not None}
    origins |= {parse_origin(text) for text in cfg.allowed_origins if not _is_scheme_entry(text)}
    domains = tuple(d.lower() for d in cfg.allowed_domains if d and d.strip("."))
    return Policy(frozenset(origins), domains, public=cfg.allow_all_domains)


def sets_allowlist(cfg: EnvConfig) -> bool:
    """Whether env.allowed_origins names an origin or env.allowed_domains a domain (`scheme:` entries do not)."""
    return any(not _is_scheme_entry(text) for text in cfg.allowed_origins) or any(cfg.allowed_domains)


def _is_scheme_entry(text: str) -> bool:
    return text.endswith(":") and "/" not in text


def check_settings(cfg: EnvConfig) -> None:
    """What a web env reads from its config when it is built, as an EnvSetupError naming the key. Also run before
    Ray starts (rlsys.envs.settings): a bad value there is one config error, not every runner failing to start."""
    try:
        episode_policy(cfg, "")
    except ValueError as e:
        raise EnvSetupError(f"env.allowed_origins: {e}") from None
    if cfg.search_engine and origin_of(cfg.search_engine) is None:
        raise EnvSetupError(f'env.search_engine: {cfg.search_engine!r} is not an http(s) URL ("" for none)')


class WebEnv:
    """Observations show `self.area` of the viewport (left, top, width, height in viewport pixels; all of it
    unless a suite narrows it) drawn `self.scale` times as large. Everything in an observation is in the
    image's pixels: the element boxes and click points, and the points of `tap` and `swipe` (fractions of
    the image); the env maps them back to the page to act."""

    # What subclasses for particular suites change.
    root_selector = "body"
    skip_ids: tuple[str, ...] = ()
    page_state_script = "return null;"
    busy_script = "return false;"  # whether the page still animates by script: not settled until it is done

    def __init__(self, cfg: EnvConfig, env_id: str = "web", fuzzy_judge=None):
        self.cfg = cfg
        self.env_id = env_id
        self.space = spaces.get(cfg.action_space)
        self.fuzzy_judge = fuzzy_judge
        check_settings(cfg)
        self._schemes = frozenset(t[:-1].lower() for t in cfg.allowed_origins if _is_scheme_entry(t))
        self.proxy = ConfinementProxy()
        try:
            self.browser = self._launch()
        except BaseException:
            self.proxy.close()
            raise
        self.browser_episodes = 0  # episodes the current browser has served
        self.browser_relaunches = 0
        self.area: tuple[int, int, int, int] = (0, 0, *self.browser.viewport)
        self.scale = 1
        self.task: Task | None = None
        self.url = ""
        self._tabs = {self.driver.current_window_handle}  # tabs this env opened itself
        self._elements: list[dict] = []
        self._history: deque[dict] = deque(maxlen=max(cfg.history, 0))
        self._steps = 0
        self._acted_at: float | None = None  # when the env last acted on the page (monotonic), for settling
        self._policy = Policy()
        self._start_url = "about:blank"  # where the env falls back to, after the last allowed URL
        self._last_allowed_url = "about:blank"
        self._downloads: dict[str, int] = {}
        self.episodes_since_instance_reset = 0

    @property
    def driver(self):
        return self.browser.driver

    def _launch(self) -> Browser:
        cfg = self.cfg
        return Browser(
            cfg.chromium,
            cfg.chromedriver,
            cfg.viewport,
            cfg.headless,
            cfg.step_timeout_s,
            self.proxy.address,
            cfg.browser_profile_dir,
            cfg.download_max_mb,
        )

    # the browser's memory is read every this many episodes: reading every process's unique memory costs ~30 ms
    memory_check_every = 10

    def _recycle_browser_if_due(self) -> str | None:
        """Relaunch the browser before an episode once it has served `env.browser_max_episodes` episodes or
        its processes hold more than `env.browser_memory_mb` of unique memory. Returns why, if it did."""
        cfg, reason = self.cfg, None
        if cfg.browser_max_episodes and self.browser_episodes >= cfg.browser_max_episodes:
            reason = f"it served env.browser_max_episodes={cfg.browser_max_episodes} episodes"
        elif cfg.browser_memory_mb and self.browser_episodes and self.browser_episodes % self.memory_check_every == 0:
            held = self.browser.memory_mb()
            if held > cfg.browser_memory_mb:
                reason = f"it held {held:.0f} MiB, over env.browser_memory_mb={cfg.browser_memory_mb}"
        if reason:
            try:
                self.browser.close()
                self.browser = self._launch()
            except BROKEN as e:
                raise EnvBrokenError(f"relaunching the browser failed: {type(e).__name__}: {e}") from None
            self._tabs = {self.driver.current_window_handle}
            self._forget_tabs()
            self.browser_episodes = 0
            self.browser_relaunches += 1
        self.browser_episodes += 1
        return reason

    def _forget_tabs(self) -> None:
        """What a subclass keeps about the old browser's tabs (none here)."""

    def pids(self) -> dict[str, list[int]]:
        return self.browser.pids()

    # -- episodes ---------------------------------------------------------------------------

    def reset(self, task: Task) -> Observation:
        relaunched = self._recycle_browser_if_due()
        obs = self._reset(task)
        if relaunched:
            obs.extras["browser_relaunched"] = relaunched
        return obs

    def _reset(self, task: Task) -> Observation:
        if not task.start:
            raise EnvSetupError(f"task {task.id!r} has no start URL")
        try:
            with self.browser.page_loads_cut_at(self.cfg.settle_timeout_s):
                self._begin_episode(task)
                events: dict = {}
                self._navigate(lambda: self.driver.get(task.start), events)
                self.browser.cdp("Page.resetNavigationHistory")  # GoBack never reaches the last episode's pages
                return self._observe(events)[0]
        except BROKEN as e:
            raise EnvBrokenError(f"browser failed during reset: {type(e).__name__}: {e}") from None

    def _begin_episode(self, task: Task) -> None:
        self.task = task
        self._steps = 0
        self._acted_at = None  # the start page is a new document: its own changes are what settling waits out
        self._history.clear()
        self._confine(task.start, episode_policy(self.cfg, task.start))
        self._keep_one_tab(self.driver.current_window_handle)
        self._end_pending_load({})  # the last episode's page may have started one since
        # leave the last page before clearing, so that nothing it still runs writes into the next episode; over
        # chromedriver's CDP (see Browser.clear_state), where WebDriver's get() waits on about twice as long
        self.driver.execute_cdp_cmd("Page.navigate", {"url": "about:blank"})
        self.browser.clear_state(http_cache=self.cfg.clear_http_cache)
        self.browser.download_cap.clear()
        self._downloads = {}
        self.proxy.drain()  # what the last episode's page asked for on its way out
        self.episodes_since_instance_reset += 1

    def _confine(self, start: str, policy: Policy) -> None:
        """Begin an episode's confinement: its policy in the proxy before anything of it loads, and nothing
        remembered of the last episode's pages."""
        self.proxy.policy = self._policy = policy
        self._start_url = start
        self._last_allowed_url = "about:blank"

    def step(self, action_text: str) -> StepResult:
        self._steps += 1
        action, parse_error = spaces.try_parse(self.space, action_text, len(self._elements))
        info: dict = {"parse_error": parse_error, "action": action.to_dict() if action else None}
        events: dict = {}
        try:
            with self.browser.page_loads_cut_at(self.cfg.settle_timeout_s):
                if action is not None and action.kind not in TERMINAL:
                    url = self._end_pending_load(events)
                    if url is not None and not self._may_visit(url):  # it went there while the policy thought
                        events.setdefault("blocked", []).append(url)
                        info["action_error"] = f"the page went to {url}, which is not allowed; nothing was done"
                    else:
                        info["action_error"] = self._navigate(lambda: self._perform(action, events), events)
                        self._acted_at = time.monotonic()
                obs, page_state = self._observe(events, feedback=parse_error or info.get("action_error"))
        except BROKEN as e:
            raise EnvBrokenError(f"browser failed during step: {type(e).__name__}: {e}") from None
        info.update(events)
        info["blocked_requests"], dropped = self.proxy.drain()
        if dropped:
            info["blocked_requests_dropped"] = dropped
        self._history.append(
            {"step": self._steps, "action": action_text[:200], "url": self.url, "error": obs.extras["feedback"]}
        )
        done, reward = self._finish(action, page_state, info)
        return StepResult(obs, reward, done, info)

    def _finish(self, action: WebAction | None, page_state, info: dict) -> tuple[bool, float]:
        """Whether the episode is over and its reward; sets info["outcome"] when it is."""
        terminal = action is not None and action.kind in TERMINAL
        if not terminal and self._steps < self.cfg.max_steps:
            return False, 0.0
        answer = action.text if terminal and action.kind == "answer" else ""
        info["answer"] = answer
        if self.task.checks:
            verdict = evaluate(self.task.checks, answer, self.url, self.driver, self.fuzzy_judge)
            info["verdict"] = verdict.to_dict()
            if verdict.success is None:
                info["outcome"] = "unknown"
                return True, 0.0
            info["outcome"] = "success" if verdict.success else ("failure" if terminal else "timeout")
            return True, float(verdict.reward)
        # No programmatic check: an answer waits for a judge; running out of steps earns nothing.
        info["outcome"] = "unknown" if terminal else "timeout"
        return True, 0.0

    # -- acting -----------------------------------------------------------------------------

    def _perform(self, action: WebAction, events: dict) -> str | None:
        """Carry out one action; a mistake of the agent's, or a page that undid what the action needs, is returned
        as a message, never raised."""
        try:
            return self._carry_out(action, events)
        except PageScriptError as e:
            return f"the page would not take the action: {e.args[0][:200]}"

    def _carry_out(self, action: WebAction, events: dict) -> str | None:
        kind = action.kind
        if problem := _not_typeable(action.url if kind == "goto" else action.text):
            return problem
        if kind == "click":
            self.browser.click_at(*self._centre(action.element))
        elif kind == "tap":
            self.browser.click_at(*self._page_point(action.point))
        elif kind == "type":
            if action.element is not None:
                self.browser.click_at(*self._centre(action.element))
                if not self.browser.call_in_page(_SELECT_FOR_TYPING, action.element):
                    return f"element [{action.element}] does not take text"
            self.browser.insert_text(action.text)
            if action.submit:
                self.browser.press_enter()
        elif kind == "key":
            if action.text != "Enter":
                return f"key {action.text!r} is not supported"
            self.browser.press_enter()
        elif kind == "scroll":
            sign = -1 if action.direction in ("up", "left") else 1
            vertical = action.direction in ("up", "down")
            self.browser.call_in_page(_SCROLL, action.element, sign, vertical)
        elif kind == "swipe":
            (x0, y0), (x1, y1) = self._page_point(action.point), self._page_point(action.end)
            # a finger moving up drags the content up: the page scrolls down
            self.browser.wheel_at(x0, y0, x0 - x1, y0 - y1)
        elif kind == "wait":
            time.sleep(self.cfg.wait_action_s)
        elif kind == "back":
            self.driver.back()
        elif kind in ("goto", "google", "home"):
            url = {"goto": action.url, "google": self.cfg.search_engine, "home": self.task.start}[kind]
            if not self._may_visit(url):
                events.setdefault("blocked", []).append(url)
                return f"navigation to {url} is not allowed"
            self.driver.get(url)
        return None

    def _centre(self, index: int) -> tuple[float, float]:
        return viewport_point(self._elements[index], self.area, self.scale)

    def _page_point(self, fraction: tuple[float, float]) -> tuple[float, float]:
        """The viewport point at `fraction` (x, y) of the observed image."""
        left, top, width, height = self.area
        return left + fraction[0] * width, top + fraction[1] * height

    def _may_visit(self, url: str) -> bool:
        return page_allowed(url, self._policy, self._start_url, self._schemes)

    def _navigate(self, call, events: dict):
        """Make a WebDriver call that may start a page load (an action, a `get`). During a step
        chromedriver stops a load that outlasts env.settle_timeout_s and raises TimeoutException: the
        call has been made all the same, and the page observed next is what had arrived."""
        try:
            return self._with_dialogs(call, events)
        except TimeoutException as e:
            if not _stopped_a_load(e):
                raise
            events["stopped_loading"] = True
            return None

    def _end_pending_load(self, events: dict) -> str | None:
        """Let a load that the page started on its own since the last observation (a timer, a redirect)
        finish, or have it stopped: a command that waits on it and runs into the timeout is not carried out.
        The tab's URL then, or None where the load had to be stopped. A page that is loaded and not navigating
        only says where it is (one round trip over DevTools); any other is left to chromedriver's waiting."""
        if not self.browser.loading():
            try:
                url, idle = self.browser.call_in_page(_WHERE_AND_WHETHER_IDLE, timeout_s=_QUICK_REPLY_S)
                if idle:
                    return url
            except (PageScriptError, TimeoutError):  # a load began before its events came: chromedriver waits
                pass
        url = self._navigate(lambda: self.driver.current_url, events)
        self.browser.loaded()
        return url

    def _with_dialogs(self, call, events: dict):
        """Run a WebDriver call; a JS dialog in the way is accepted (by the driver) and its text
        reported, and the call is made again."""
        for _ in range(_DIALOG_RETRIES):
            try:
                return call()
            except UnexpectedAlertPresentException as e:
                events.setdefault("dialogs", []).append(e.alert_text or "")
        return call()

    # -- observing --------------------------------------------------------------------------

    def _observe(self, events: dict, feedback: str | None = None) -> tuple[Observation, object]:
        for _ in range(_OBSERVE_ATTEMPTS - 1):
            try:
                return self._observe_once(events, feedback)
            except TimeoutException as e:  # the page began a load while being observed, and chromedriver stopped it
                if not _stopped_a_load(e):
                    raise
                events["stopped_loading"] = True
            except ScreenshotMissed:  # the page navigated while photographed: observe where it went
                _count_missed_screenshot(events)
        return self._observe_once(events, feedback)

    def _observe_once(self, events: dict, feedback: str | None) -> tuple[Observation, object]:
        page = self._settle_and_read(events)
        if self._follow_or_close_new_tabs(page["opened"], events):
            page = self._settle_and_read(events)
        if not self._may_visit(page["url"]):
            feedback = feedback or f"navigation to {page['url']} is not allowed; went back"
            page = self._go_back_somewhere_allowed(page, events)
        self._last_allowed_url = self.url = page["url"]
        self._check_downloads(page, events)
        if not feedback and events.get("dialogs"):
            feedback = "the page showed a dialog, which was accepted: " + events["dialogs"][-1][:200]
        if not feedback and events.get("stopped_loading"):
            feedback = f"the page did not finish loading within {self.cfg.settle_timeout_s:g} s; loading was stopped"
        self._elements = [self._in_image(e) for e in page["elements"][: self.cfg.max_elements]]
        png = page.get("png") or self._screenshot(page["scroll"])
        if self.cfg.set_of_marks:
            png = draw_marks(png, self._elements)
        extras = {
            "elements": self._elements,
            "history": list(self._history),
            "feedback": feedback,
            "settled": page["settled"] and not events.get("stopped_loading"),
            "settle_ms": round(page["settle_ms"], 1),
            "early_scan": page["early_scan"],  # the element scan ran while the quiet window was waited out
            "early_screenshot": "png" in page,  # so did the screenshot
        }
        grammar = getattr(self.space, "grammar", None)
        if grammar is not None and (built := grammar(self._elements)) is not None:
            extras["grammar"] = built.to_dict()
        obs = Observation(png, self._ui_text(), self.url, self._instruction(), extras)
        return obs, page["extra"]

    def _go_back_somewhere_allowed(self, page: dict, events: dict) -> dict:
        """Leave a page that is not allowed for the last allowed URL, else the task's start, else about:blank;
        each is checked again once there (a site may redirect the second time)."""
        for url in dict.fromkeys((self._last_allowed_url, self._start_url, "about:blank")):
            if not self._may_visit(page["url"]):
                events.setdefault("blocked", []).append(page["url"])
                self._navigate(lambda url=url: self.driver.get(url), events)
                page = self._settle_and_read(events)
        return page

    def _whole_viewport(self) -> bool:
        return self.area == (0, 0, *self.browser.viewport) and self.scale == 1

    def _screenshot(self, scroll: list[float]) -> bytes:
        left, top, width, height = self.area
        # the capture's clip is in document coordinates
        clip = None if self._whole_viewport() else (left + scroll[0], top + scroll[1], width, height)
        try:
            return self.browser.screenshot_png(clip, self.scale, timeout_s=_CAPTURE_S)
        except (PageGoneError, TimeoutError) as e:
            raise ScreenshotMissed(f"{type(e).__name__}: {e}") from None

    def _in_image(self, element: dict) -> dict:
        """`element` with its box and click point moved from the viewport into the image's pixels."""
        if self._whole_viewport():
            return element
        left, top, scale = self.area[0], self.area[1], self.scale
        x, y, width, height = element["box"]
        moved = {**element, "box": [(x - left) * scale, (y - top) * scale, width * scale, height * scale]}
        if element.get("point"):
            moved["point"] = [(element["point"][0] - left) * scale, (element["point"][1] - top) * scale]
        return moved

    def _settle_and_read(self, events: dict) -> dict:
        """Wait for the current tab's page to settle and describe it (observe.js); the dialogs the page
        answered go to events, the URLs it asked window.open for to page["opened"].

        A page found idle before its quiet window is over is photographed while it is scanned and the rest of the
        window is waited out (a screenshot takes about three frames); page["png"] is that screenshot if nothing
        changed on the page since, and absent otherwise."""
        key = "__rlsysSettling" + secrets.token_hex(8)
        page = self._run_observe_script(events, key)
        if page.get("provisional"):
            try:
                png = self._screenshot(page["scroll"])  # over DevTools, where dialogs are answered as they open
            except ScreenshotMissed:
                _count_missed_screenshot(events)
                png = None  # taken again once the page has settled
            finished = self._finish_settling(key)
            if finished is None:  # the page went away meanwhile: settle on the next one
                page = self._run_observe_script(events, None)
            else:
                page = finished
                if page["screenshot_holds"] and png is not None:
                    page["png"] = png
        if dialogs := page["events"]["dialogs"] + self.browser.take_dialogs():
            events.setdefault("dialogs", []).extend(dialogs)
        page["opened"] = page["events"]["opened"]
        return page

    def _run_observe_script(self, events: dict, provisional_key: str | None) -> dict:
        """observe.js in the page: over DevTools where the document is loaded and not navigating away (one round
        trip), else through chromedriver, which waits for the load and stops one that outlasts env.settle_timeout_s."""
        script = _observe_script(self.page_state_script, self.busy_script)
        where = (self.root_selector, list(self.skip_ids))
        settle = (self.cfg.settle_quiet_ms, self.cfg.settle_timeout_s * 1000)

        def arguments(leave_if_loading: bool) -> tuple:
            since_action_ms = None if self._acted_at is None else (time.monotonic() - self._acted_at) * 1000
            return *where, *settle, list(self.area), since_action_ms, provisional_key, leave_if_loading

        if not self.browser.loading():
            try:
                page = self.browser.await_in_page(script, *arguments(True), timeout_s=self._settle_bound_s())
                if not page.get("loading"):
                    return page
            # the document went away meanwhile, broke the script, or began a load before its events came: as below
            except (PageScriptError, TimeoutError):
                pass
        for attempt in range(1, _SETTLE_ATTEMPTS + 1):
            started = time.monotonic()
            try:
                page = self._with_dialogs(lambda: self.driver.execute_async_script(script, *arguments(False)), events)
                self.browser.loaded()
                return page
            except WebDriverException as e:  # if the page went away under the script, settle on the next one
                gone = _document_went_away(e.msg or "", time.monotonic() - started, self.cfg.step_timeout_s)
                if attempt == _SETTLE_ATTEMPTS or not gone:
                    raise

    def _finish_settling(self, key: str) -> dict | None:
        """The description of a page that answered provisionally (observe.js); None if its document went away."""
        try:
            return self.browser.await_in_page(_FINISH_SETTLING, key, timeout_s=self._settle_bound_s())
        except (PageScriptError, TimeoutError):
            return None

    def _settle_bound_s(self) -> float:
        """How long a settling script may take over DevTools before the page is taken to be held by a load."""
        return self.cfg.settle_timeout_s + _QUICK_REPLY_S

    def _follow_or_close_new_tabs(self, requested: list[str], events: dict) -> bool:
        """Close the tabs opened since the last observation, or follow the last one (env.new_tabs);
        a tab on a URL that is not allowed is closed either way, since following it would only lead
        back to the page that opened it. Closing never waits for a tab's page. Whether it switched."""
        new = [h for h in self.driver.window_handles if h not in self._tabs]
        if not new:
            return False
        committed = self.browser.tab_urls()
        # a tab's URL is empty until its server answers (for some, never); the page noted where it opened tabs to
        unanswered = iter([url for url in requested if url not in committed.values()])
        urls = [committed.get(handle) or next(unanswered, "about:blank") for handle in new]
        events["new_tabs"] = {"policy": self.cfg.new_tabs, "urls": urls}
        allowed = [handle for handle, url in zip(new, urls) if self._may_visit(url)]
        if blocked := [url for url in urls if not self._may_visit(url)]:
            events.setdefault("blocked", []).extend(blocked)
        follow = allowed[-1] if self.cfg.new_tabs == "follow" and allowed else None
        if follow and not self._switch_to_new_tab(follow, events):
            follow = None
        for handle in new:
            if handle != follow:
                self.browser.close_tab(handle)
        if follow:
            self._keep_one_tab(follow)
        return follow is not None

    def _switch_to_new_tab(self, handle: str, events: dict) -> bool:
        """Switch to a new tab and prepare it; or, where not even the start of its page arrived within
        env.settle_timeout_s, stay: chromedriver stops the load, leaving a tab that never painted,
        which a screenshot then waits on for good."""
        came_from = self.driver.current_window_handle
        self.browser.switch_to(handle)
        try:
            self.browser.prepare_tab()
            return True
        except TimeoutException as e:
            if not _stopped_a_load(e):
                raise
            events["stopped_loading"] = True
        if self.browser.tab_urls().get(handle):
            self.browser.prepare_tab()  # now that its load is stopped the tab answers
            return True
        self.browser.switch_to(came_from)
        return False

    def _keep_one_tab(self, keep: str) -> None:
        for handle in self.driver.window_handles:
            if handle != keep:
                self.browser.close_tab(handle)
        self.browser.switch_to(keep)
        self._tabs = {keep}

    def _check_downloads(self, page: dict, events: dict) -> None:
        """The downloads since the last observation, those cancelled over the cap while arriving included
        (downloads.py); and the PDFs among them or shown."""
        for entry in self.browser.download_cap.report(self._downloads):
            events.setdefault("downloads", []).append(entry)
            if entry["name"].lower().removesuffix(".crdownload").endswith(".pdf"):
                events.setdefault("pdf", []).append(entry["name"])
        if page["content_type"] == "application/pdf":
            events.setdefault("pdf", []).append(page["url"])

    def _ui_text(self) -> str:
        render = render_roles if self.cfg.element_list == "roles" else render_pae
        return "\n".join(render(i, e) for i, e in enumerate(self._elements))

    def _instruction(self) -> str:
        return self.task.instruction if self.task else ""

    # -- self-hosted sites ------------------------------------------------------------------

    def instance_reset_due(self) -> bool:
        every = self.cfg.instance_reset_every
        return bool(self.cfg.instance_reset_command) and every > 0 and self.episodes_since_instance_reset >= every

    def reset_instance(self) -> dict:
        """Run the configured site-reset command (between episodes, never inside a step)."""
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                self.cfg.instance_reset_command,
                capture_output=True,
                text=True,
                timeout=self.cfg.instance_reset_timeout_s,
            )
            ok, detail = proc.returncode == 0, (proc.stderr or proc.stdout)[-500:]
        except (OSError, subprocess.TimeoutExpired) as e:
            ok, detail = False, f"{type(e).__name__}: {e}"
        self.episodes_since_instance_reset = 0
        return {"ok": ok, "seconds": round(time.monotonic() - t0, 3), "detail": detail}

    def close(self) -> None:
        try:
            self.browser.close()
        finally:
            self.proxy.close()


def viewport_point(element: dict, area: tuple[int, ...], scale: int) -> tuple[float, float]:
    """Where in the viewport an element of an observation that shows `area` drawn `scale` times as large was seen
    to be reachable: its "point" (a wrapped link's box centre may be blank space), else its box's centre."""
    if element.get("point"):
        x, y = element["point"]
    else:
        left, top, width, height = element["box"]
        x, y = left + width / 2, top + height / 2
    return area[0] + x / scale, area[1] + y / scale


def _count_missed_screenshot(events: dict) -> None:
    events["screenshots_missed"] = events.get("screenshots_missed", 0) + 1


def _stopped_a_load(error: TimeoutException) -> bool:
    """Whether chromedriver gave up waiting on a page load (at the page-load timeout) and stopped it."""
    return "Timed out receiving message from renderer" in (error.msg or "")


def _document_went_away(message: str, seconds: float, script_timeout_s: float) -> bool:
    """Whether chromedriver's error means that the document an asynchronous script waited in went
    away (a form submitted, a link followed). What it says varies with its version and the timing,
    down to "script timeout" answered at once, where a real script timeout takes the whole of it."""
    if "script timeout" in message:
        return seconds < script_timeout_s
    return any(s in message for s in ("document unloaded", "aborted by navigation", "no such execution context"))


def _not_typeable(text: str) -> str | None:
    """Why `text` cannot be sent to the browser, if it cannot: a lone surrogate (half of a UTF-16
    pair, as a cut-off escape like "\\ud83d" decodes to) is no character, and chromedriver rejects
    the whole command. An error rather than a replacement: `Type` presses Enter, and a query the
    agent did not write should not be submitted."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return (
            f"the text has a lone surrogate {text[e.start]!r} at position {e.start}, half of a UTF-16 pair "
            "and not a character; nothing was done"
        )
    return None


# Awaits the description a provisional answer of observe.js left at window[key]; null if the document is not the one.
_FINISH_SETTLING = """const [key] = arguments, reply = arguments[arguments.length - 1];
const described = window[key];
if (described) { delete window[key]; described.then(reply); } else { reply(null); }"""

_WHERE_AND_WHETHER_IDLE = """() => [location.href, document.readyState === "complete"
  && !(performance.now() - (window.__rlsysNavigating ?? -Infinity) < 1000)]"""

_SELECT_FOR_TYPING = """(index) => {
const el = window.__rlsysElements[index];
let focused = document.activeElement;  // inside a same-origin iframe or a shadow root: what has focus in there
while (focused && (focused.shadowRoot?.activeElement || focused.contentDocument?.activeElement)) {
  focused = focused.shadowRoot?.activeElement || focused.contentDocument.activeElement;
}
const target = focused && focused !== focused.ownerDocument.body ? focused : el;
const editable = target.isContentEditable || target.tagName === "TEXTAREA"
  || (target.tagName === "INPUT" && !["checkbox", "radio", "button", "submit", "file", "image", "reset"]
      .includes(target.type));
if (!editable) return false;
target.focus();
if (target.select) target.select();
else { const range = target.ownerDocument.createRange(); range.selectNodeContents(target);
       const selection = target.ownerDocument.getSelection();
       selection.removeAllRanges(); selection.addRange(range); }
return true;
}"""

_SCROLL = """(index, sign, vertical) => {
const target = index === null ? null : window.__rlsysElements[index];
const size = target ? (vertical ? target.clientHeight : target.clientWidth) : (vertical ? innerHeight : innerWidth);
const delta = sign * Math.round(size * 2 / 3);
(target || window).scrollBy(vertical ? 0 : delta, vertical ? delta : 0);
}"""
