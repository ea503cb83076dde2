"""What the driver's tests share: a headless Chromium that logs every request the page makes."""

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.conftest import _chromium_paths


@pytest.fixture(scope="module")
def browser():
    chromium, chromedriver = _chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--disable-background-networking",
        "--disable-component-update",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    driver.network_log = []  # every performance entry, kept across tests (reading the log drains it)
    yield driver
    driver.quit()


def load(driver, path):
    driver.get(path.as_uri())
    driver.network_log += driver.get_log("performance")
    return driver
