"""Where a browser's throwaway profile lives: the configured folder, else RAM (/dev/shm) when it has room,
else the system's temp folder; and nothing of it is left after the browser closes."""

import os
import shutil
from pathlib import Path

import pytest

from rlsys.core.env import EnvSetupError
from rlsys.envs.web import browser
from rlsys.envs.web.browser import Browser, profile_parent


def test_a_configured_folder_is_used_and_a_bad_one_named(tmp_path):
    assert profile_parent(str(tmp_path)) == str(tmp_path)
    with pytest.raises(EnvSetupError, match="env.browser_profile_dir"):
        profile_parent(str(tmp_path / "missing"))


def test_ram_is_used_only_with_room_to_spare(tmp_path, monkeypatch):
    monkeypatch.setattr(browser, "RAM_FOLDER", str(tmp_path))
    assert profile_parent("") == str(tmp_path)
    monkeypatch.setattr(browser, "RAM_FOLDER_MIN_FREE", shutil.disk_usage(tmp_path).free * 2)
    assert profile_parent("") is None  # the system's temp folder
    monkeypatch.setattr(browser, "RAM_FOLDER", str(tmp_path / "missing"))
    assert profile_parent("") is None


def test_the_profile_is_made_in_the_folder_and_removed_on_close(tmp_path):
    chrome = Browser(shutil.which("chromium"), shutil.which("chromedriver"), [400, 300], True, 30, None, str(tmp_path))
    try:
        profile = Path(chrome._profile)
        assert profile.parent == tmp_path and any(profile.iterdir())  # Chromium writes its profile there
    finally:
        chrome.close()
    assert not profile.exists() and os.listdir(tmp_path) == []
