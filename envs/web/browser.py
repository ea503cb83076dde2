"""Headless Chromium through Selenium, with the driver path always given explicitly."""

from __future__ import annotations

import os
import shutil
import tempfile

import psutil
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service

from rlsys.env import EnvSetupError

# Without the background-networking flags Chromium keeps dialing out on every start; on a
# machine with no network that costs time and floods the logs.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-quic",
    "--mute-audio",
    # pages in background tabs keep their timers running at full speed
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
)


class Browser:
    """One Chromium process and its chromedriver; `pids()` lists both so they can be watched."""

    def __init__(self, chromium: str, chromedriver: str, window: list[int], headless: bool, timeout_s: float):
        for name, path in (("env.chromium", chromium), ("env.chromedriver", chromedriver)):
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise EnvSetupError(
                    f"{name} = {path!r} is not an executable file; install Chromium "
                    "(Debian: apt-get install chromium chromium-driver) or set the path in the config"
                )
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        flags = CHROMIUM_FLAGS if headless else CHROMIUM_FLAGS[1:]
        for flag in flags:
            options.add_argument(flag)
        self._profile = tempfile.mkdtemp(prefix="rlsys-chromium-")
        options.add_argument(f"--user-data-dir={self._profile}")
        options.add_argument(f"--window-size={window[0]},{window[1]}")
        try:
            self.driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
        except WebDriverException as e:
            shutil.rmtree(self._profile, ignore_errors=True)
            raise EnvSetupError(f"Chromium failed to start: {e.msg}") from None
        self.driver.command_executor.client_config.timeout = timeout_s
        self.driver.set_page_load_timeout(timeout_s)
        self.driver.set_script_timeout(timeout_s)

    def pids(self) -> dict[str, list[int]]:
        driver_proc = self.driver.service.process
        try:
            children = psutil.Process(driver_proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        return {"chromedriver": [driver_proc.pid], "chromium": [p.pid for p in children]}

    def close(self) -> None:
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
