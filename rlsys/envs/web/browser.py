"""Headless Chromium through Selenium, with the driver path always given explicitly."""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service

from rlsys.core.env import EnvSetupError
from rlsys.envs.web.devtools import CONNECTION_ERRORS, DevTools, DevToolsError, TabSessions
from rlsys.envs.web.downloads import DownloadCap

# Hosts Chromium calls at every start whatever the flags and preferences say: Google's account list and the
# default search engine's start page. They resolve to nothing inside Chromium and skip the proxy, so no request
# for them is made at all (tests/envs/web/test_confinement.py records what a start sends).
STARTUP_HOSTS = ("accounts.google.com", "start.duckduckgo.com")
# Chromium's background services off: no time, optimization-guide, translation, safe browsing, metrics,
# sync, media-router or component-update requests. No back/forward cache: a page left behind is not kept running
# (into the next episode, where GoBack could bring it back with what it held), and keeping the page it leaves
# made every reset ~70 ms slower on a 2-core machine (benchmarks/README.md).
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--no-pings",
    "--disable-background-networking",
    "--disable-component-update",
    "--component-updater=url-source=about:blank",  # an on-demand component's update check still ran without it
    "--host-resolver-rules=" + ", ".join(f"MAP {host} ~NOTFOUND" for host in STARTUP_HOSTS),
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-client-side-phishing-detection",
    "--disable-domain-reliability",
    "--disable-breakpad",
    "--disable-crash-reporter",
    "--disable-field-trial-config",
    "--disable-search-engine-choice-screen",
    "--metrics-recording-only",
    "--safebrowsing-disable-auto-update",
    "--password-store=basic",
    "--use-mock-keychain",
    "--disable-features=OptimizationHints,OptimizationGuideModelDownloading,OptimizationHintsFetching,"
    "MediaRouter,DialMediaRouteProvider,Translate,AutofillServerCommunication,CertificateTransparencyComponentUpdater,"
    "InterestFeedContentSuggestions,PrivacySandboxSettings4,NetworkTimeServiceQuerying,SpareRendererForSitePerProcess,"
    "BackForwardCache",
    "--disable-quic",
    "--disk-cache-size=134217728",  # 128 MiB: the profile, HTTP cache included, is kept in RAM where it can be
    "--mute-audio",
    # pages in background tabs keep their timers running at full speed
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
)
# The only variables chromedriver and Chromium get: no API key or token of the caller's reaches them.
# (The display ones matter only with env.headless false.)
ENV_KEPT = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
    "XDG_RUNTIME_DIR",
    "FONTCONFIG_PATH",
    "FONTCONFIG_FILE",
)


def browser_environment() -> dict[str, str]:
    return {name: os.environ[name] for name in ENV_KEPT if name in os.environ}


RAM_FOLDER = "/dev/shm"
RAM_FOLDER_MIN_FREE = 2**30  # a container's /dev/shm of 64 MiB is left to Chromium's own shared memory


PROFILE_PREFIX = "rlsys-chromium-"
# a profile's folder is named for its owner, the process that started the browser: its pid and start time
# (the pid alone could be another process's by now)
_PROFILE_NAME = re.compile(re.escape(PROFILE_PREFIX) + r"(\d+)-(\d+)-")
GUARD = str(Path(__file__).with_name("browser_guard.py"))


def profile_parent(configured: str) -> str | None:
    """The folder for a browser's throwaway profile: `configured` (env.browser_profile_dir), else a RAM-backed
    folder with room to spare, else the system's temp folder (None). On disk the profile's cookie database, HTTP
    cache and local storage are written and synced on page loads and on every clearing between episodes: a reset
    took about a fifth longer on a 2-core machine with its temp folder on disk (benchmarks/README.md)."""
    if configured:
        if not (os.path.isdir(configured) and os.access(configured, os.W_OK)):
            raise EnvSetupError(f"env.browser_profile_dir = {configured!r} is not a writable folder")
        return configured
    try:
        if os.access(RAM_FOLDER, os.W_OK) and shutil.disk_usage(RAM_FOLDER).free >= RAM_FOLDER_MIN_FREE:
            return RAM_FOLDER
    except OSError:
        pass
    return None


def _started_at(process: psutil.Process) -> str:
    return str(int(process.create_time() * 100))


def _owner_lives(pid: int, started_at: str) -> bool:
    try:
        owner = psutil.Process(pid)
        return _started_at(owner) == started_at and owner.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def remove_stale_profiles(parent: str | None) -> list[str]:
    """Remove the profiles in `parent` (None: the system's temp folder) whose owner is gone: left by a process
    killed along with its browser guard (browser_guard.py removes the profile when it outlives the owner).
    Folders named without an owner (by earlier versions) are left alone. Returns the removed paths."""
    parent = parent or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        if (match := _PROFILE_NAME.match(name)) and not _owner_lives(int(match[1]), match[2]):
            path = os.path.join(parent, name)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def browser_owners() -> list[int]:
    """The processes a browser dies with: this one, and in a Ray worker its raylet too. A worker outlives a
    killed raylet until Ray's own check of RAY_RAYLET_PID (set for its workers) notices, about a second when
    all goes well; the worker is doomed from the raylet's death, and its browser need not wait."""
    raylet = os.environ.get("RAY_RAYLET_PID", "")
    return [os.getpid(), *([int(raylet)] if raylet.isdigit() else [])]


class _GuardedService(Service):
    """chromedriver started through browser_guard.py, which ends it, Chromium and everything Chromium started
    once this process is gone, whatever ended it."""

    def __init__(self, chromedriver: str, profile: str, env: dict[str, str]):
        super().__init__(executable_path=sys.executable, env=env)
        self._guard = ["-I", "-S", GUARD, ",".join(map(str, browser_owners())), profile, chromedriver]

    def command_line_args(self) -> list[str]:
        return [*self._guard, *super().command_line_args()]

    def env_path(self) -> None:  # SE_CHROMEDRIVER would replace the guard: the paths are the config's alone
        return None


# Runs in every document before the page's own scripts: counts the page's fetch/XHR requests
# in flight, so that waiting for a page to settle can include its network activity; answers the
# page's dialogs and notes window.open's URLs (see the file).
_PAGE_INIT_SCRIPT = (Path(__file__).parent / "page_init.js").read_text()


class PageScriptError(Exception):
    """A script the env ran in the page threw: the page changed what the script relies on, or went away."""


class PageGoneError(PageScriptError):
    """The document a script ran in, or a screenshot was asked of, went away before it answered (a link followed,
    a form submitted)."""


# what DevTools answers a script or screenshot whose document went away
PAGE_GONE = (
    "Inspected target navigated or closed",
    "Execution context was destroyed",
    "Cannot find context with",
    "Not attached to an active page",
)


class Browser:
    """One Chromium process and its chromedriver; `pids()` lists them so they can be watched.

    They die with the process that made this object, whatever kills it (browser_guard.py), and the profile
    folder goes with them; a start removes the profiles of owners that died anyway (remove_stale_profiles).

    With `proxy` (host:port) every request, loopback included, goes through that proxy (confinement.py);
    nothing bypasses it and no UDP goes around it (WebRTC). The viewport is exactly `viewport` pixels (the
    window is larger by its frame), downloads go to a private folder, each cancelled once it is over
    `download_max_mb` (downloads.py), and a JS dialog that the init script
    did not answer in the page is accepted by the driver, which reports its text with the next command
    (`UnexpectedAlertPresentException.alert_text`). Chromium and chromedriver get only the variables in
    ENV_KEPT of the caller's environment.
    """

    def __init__(
        self,
        chromium: str,
        chromedriver: str,
        viewport: list[int],
        headless: bool,
        timeout_s: float,
        proxy: str | None = None,
        profile_dir: str = "",
        download_max_mb: float = math.inf,
    ):
        for name, path in (("env.chromium", chromium), ("env.chromedriver", chromedriver)):
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise EnvSetupError(
                    f"{name} = {path!r} is not an executable file; install Chromium "
                    "(Debian: apt-get install chromium chromium-driver) or set the path in the config"
                )
        self.viewport = (int(viewport[0]), int(viewport[1]))
        self._chromedriver = chromedriver
        parent = profile_parent(profile_dir)
        remove_stale_profiles(parent)
        owner = f"{PROFILE_PREFIX}{os.getpid()}-{_started_at(psutil.Process())}-"
        self._profile = tempfile.mkdtemp(prefix=owner, dir=parent)
        self.downloads = Path(self._profile) / "downloads"
        self.downloads.mkdir()
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in CHROMIUM_FLAGS if headless else CHROMIUM_FLAGS[1:]:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={self._profile}")
        options.add_argument(f"--window-size={self.viewport[0]},{self.viewport[1] + 200}")
        if proxy:
            options.add_argument(f"--proxy-server=http://{proxy}")
            # 127.0.0.1 and localhost go through it too; the start-up hosts fail inside Chromium instead
            options.add_argument("--proxy-bypass-list=" + ";".join(("<-loopback>", *STARTUP_HOSTS)))
            options.add_argument("--webrtc-ip-handling-policy=disable_non_proxied_udp")
        options.set_capability("unhandledPromptBehavior", "accept and notify")
        options.add_experimental_option(
            "prefs",
            {
                "download.default_directory": str(self.downloads),
                "download.prompt_for_download": False,
                "plugins.always_open_pdf_externally": True,  # a PDF becomes a download we can see
                "net.network_prediction_options": 2,  # no DNS prefetching or preconnecting on its own
                "webrtc.ip_handling_policy": "disable_non_proxied_udp",
                "search.suggest_enabled": False,
                "translate.enabled": False,
                "safebrowsing.enabled": False,
                "default_search_provider.enabled": False,
                "signin.allowed": False,
                "signin.allowed_on_next_startup": False,
                "browser.enable_spellchecking": False,
            },
        )
        try:
            self.driver = webdriver.Chrome(
                service=_GuardedService(chromedriver, self._profile, browser_environment()), options=options
            )
        except WebDriverException as e:
            shutil.rmtree(self._profile, ignore_errors=True)
            raise EnvSetupError(f"Chromium failed to start: {e.msg}") from None
        self.timeout_s = timeout_s
        self.driver.command_executor.client_config.timeout = timeout_s
        self.driver.set_page_load_timeout(timeout_s)
        self.driver.set_script_timeout(timeout_s)
        self.devtools = None
        try:
            self.devtools = DevTools(Path(self._profile))
            self.tabs = TabSessions(self.devtools)
            self.download_cap = DownloadCap(self.devtools, self.downloads, download_max_mb)
            self._tab = self.driver.current_window_handle
            self.prepare_tab()
        except (*CONNECTION_ERRORS, WebDriverException) as e:
            if self.devtools is not None:
                self.devtools.close()
            self.driver.quit()
            shutil.rmtree(self._profile, ignore_errors=True)
            raise EnvSetupError(f"Chromium started, but setting it up over DevTools failed: {e}") from None

    def cdp(self, command: str, timeout_s: float | None = None, **params) -> dict:
        """A DevTools command to the current tab, over the browser's own connection (devtools.py); TimeoutError
        after `timeout_s` (env.step_timeout_s unless given) without a reply."""
        return self.devtools.call(command, self.tabs.session(self._tab), timeout_s or self.timeout_s, **params)

    def loading(self) -> bool:
        """Whether the current tab's page is loading a document (TabSessions.loading)."""
        return self.tabs.loading(self._tab)

    def loaded(self) -> None:
        """Note that the current tab's load is over: chromedriver waited for it, or stopped it."""
        self.tabs.loaded(self._tab)

    def take_dialogs(self) -> list[str]:
        """The dialogs accepted over DevTools since the last call (TabSessions)."""
        return self.tabs.take_dialogs()

    def switch_to(self, handle: str) -> None:
        """Make the tab `handle` the current one, for chromedriver and for `cdp`."""
        self.driver.switch_to.window(handle)
        self._tab = handle

    def new_tab(self) -> None:
        """Open a tab, make it the current one and prepare it."""
        self.driver.switch_to.new_window("tab")
        self._tab = self.driver.current_window_handle
        self.prepare_tab()

    def call_in_page(self, function: str, *args, timeout_s: float | None = None):
        """Call `function` (the JavaScript source of one) with `args` in the current tab's page and return its
        result. Over CDP rather than chromedriver's execute_script, whose own checks of the page around the
        call cost about 10 ms more. Raises PageScriptError where the function throws, PageGoneError where the
        page went away meanwhile."""
        return self._evaluate(f"({function})(...{json.dumps(args)})", timeout_s)

    def await_in_page(self, script: str, *args, timeout_s: float | None = None):
        """Run `script`, written for WebDriver's execute_async_script (its last argument is the callback), in the
        current tab's page with `args`, and return what it passes to the callback; as call_in_page, over CDP."""
        call = f"new Promise((resolve) => (function () {{\n{script}\n}}).apply(null, [...{json.dumps(args)}, resolve]))"
        return self._evaluate(call, timeout_s, awaitPromise=True)

    def _evaluate(self, expression: str, timeout_s: float | None, **options):
        reply = self._page_command("Runtime.evaluate", timeout_s, expression=expression, returnByValue=True, **options)
        if "exceptionDetails" in reply:
            details = reply["exceptionDetails"]
            raise PageScriptError(details.get("exception", {}).get("description") or details.get("text", ""))
        return reply["result"].get("value")

    def _page_command(self, command: str, timeout_s: float | None, **params) -> dict:
        """`cdp`, raising PageGoneError where the document the command was for went away meanwhile."""
        try:
            return self.cdp(command, timeout_s, **params)
        except DevToolsError as e:
            if any(sign in str(e) for sign in PAGE_GONE):
                raise PageGoneError(str(e)) from None
            raise

    def prepare_tab(self) -> None:
        """Exact viewport and the init script for the current tab (each tab needs its own)."""
        # through chromedriver's session, which lasts as long as the tab: a session's overrides and scripts end with it
        width, height = self.viewport
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        self.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": _PAGE_INIT_SCRIPT})

    @contextmanager
    def page_loads_cut_at(self, seconds: float) -> Iterator[None]:
        """Within the block, a page load still going after `seconds` is stopped by chromedriver, which
        then raises TimeoutException from the command that waited on it; the tab works on, showing
        what had arrived. Outside it, loads may take the full `timeout_s`."""
        self.driver.set_page_load_timeout(seconds)
        try:
            yield
        finally:
            self.driver.set_page_load_timeout(self.timeout_s)

    def tab_urls(self) -> dict[str, str]:
        """Each tab's URL by window handle, without switching to it or waiting for it; "" while a
        tab's first page has not arrived. (chromedriver's window handles are DevTools target ids.)"""
        targets = self.devtools.call("Target.getTargets", timeout_s=self.timeout_s)["targetInfos"]
        return {t["targetId"]: t["url"] for t in targets if t["type"] == "page"}

    def close_tab(self, handle: str) -> None:
        """Close a tab without switching to it, so without waiting for its page to load."""
        self.devtools.call("Target.closeTarget", timeout_s=self.timeout_s, targetId=handle)

    def screenshot_png(
        self, area: tuple[int, int, int, int] | None = None, scale: int = 1, timeout_s: float | None = None
    ) -> bytes:
        """The viewport, or only `area` (left, top, width, height in viewport pixels) rendered `scale` times
        as large: the page is drawn at that resolution, not enlarged afterwards, and sees no resize.

        A capture asked for while the tab navigates is often lost: Chromium answers that the page is gone
        (PageGoneError) or never answers (TimeoutError after `timeout_s`), and one asked for after the new
        document is there is answered as usual."""
        params = {"format": "png", "optimizeForSpeed": True}
        if area is not None:
            left, top, width, height = area
            params["clip"] = {"x": left, "y": top, "width": width, "height": height, "scale": scale}
        return base64.b64decode(self._page_command("Page.captureScreenshot", timeout_s, **params)["data"])

    def click_at(self, x: float, y: float) -> None:
        """A trusted mouse click at viewport pixel (x, y), as a user's would be."""
        for kind in ("mousePressed", "mouseReleased"):
            self.cdp("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def wheel_at(self, x: float, y: float, dx: float, dy: float) -> None:
        self.cdp("Input.dispatchMouseEvent", type="mouseWheel", x=x, y=y, deltaX=dx, deltaY=dy)

    def insert_text(self, text: str) -> None:
        self.cdp("Input.insertText", text=text)

    def press_enter(self) -> None:
        for kind in ("keyDown", "keyUp"):
            self.cdp(
                "Input.dispatchKeyEvent",
                type=kind,
                key="Enter",
                code="Enter",
                windowsVirtualKeyCode=13,
                **({"text": "\r"} if kind == "keyDown" else {}),
            )

    def clear_state(self, http_cache: bool) -> None:
        """Forget cookies and storage, so one episode never sees another's session; and the HTTP cache if asked.

        The HTTP cache holds no session, only copies of resources under the sites' own caching rules, as any
        user's browser keeps them; clearing it made each reset load every script and stylesheet again
        (a documentation page: 520 ms cold against 60-135 ms warm)."""
        # through chromedriver, which first waits for the navigation away from the last page to end: sent over
        # DevTools right after it, the clearing came before that page's last writes (tests/envs/web: writer.html)
        self.driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
        if http_cache:
            self.driver.execute_cdp_cmd("Network.clearBrowserCache", {})
        self.driver.execute_cdp_cmd("Storage.clearDataForOrigin", {"origin": "*", "storageTypes": "all"})

    def pids(self) -> dict[str, list[int]]:
        """chromedriver, Chromium's processes, and the guard's two above them (browser_guard.py)."""
        stand_in = self.driver.service.process.pid
        found = {"chromedriver": [], "chromium": [], "guard": [stand_in]}
        try:
            beneath = psutil.Process(stand_in).children(recursive=True)
        except psutil.NoSuchProcess:
            return found
        for p in beneath:
            try:
                if p.ppid() == stand_in:
                    found["guard"].append(p.pid)
                else:
                    found["chromedriver" if p.cmdline()[:1] == [self._chromedriver] else "chromium"].append(p.pid)
            except psutil.Error:  # exited meanwhile
                continue
        return found

    def memory_mb(self) -> float:
        """Unique memory (USS) of chromedriver, every Chromium process and the guard, in MiB."""
        total = 0
        for pid in [pid for pids in self.pids().values() for pid in pids]:
            try:
                total += psutil.Process(pid).memory_full_info().uss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return total / 2**20

    def close(self) -> None:
        self.download_cap.close()
        self.devtools.close()
        try:
            self.driver.quit()
        except Exception:  # the browser may already be gone; make sure nothing is left behind
            for pids in self.pids().values():
                for pid in pids:
                    try:
                        psutil.Process(pid).kill()
                    except psutil.NoSuchProcess:
                        pass
        finally:
            shutil.rmtree(self._profile, ignore_errors=True)
