"""A browser dies with the process that started it, whatever kills that process, and its profile goes with it; a
start removes the profiles whose owner is gone. Real Chromium, real signals: a whole training run killed with
SIGKILL to its process group, and a lone owner killed alone."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import yaml

from rlsys.config import to_dict
from rlsys.envs.web.browser import PROFILE_PREFIX, Browser
from tests.conftest import _chromium_paths, assert_no_browsers_left, browsers_started_after, make_config, started_here
from tests.support.train_command import kill_session, start_train


def profiles_of(procs: list[psutil.Process]) -> set[str]:
    found = set()
    for p in procs:
        try:
            found |= {a.split("=", 1)[1] for a in p.cmdline() if a.startswith("--user-data-dir=")}
        except psutil.Error:
            pass
    return found


def browser_processes_beneath(root: int) -> list[psutil.Process]:
    """Chromium, chromedriver and what watches them, started beneath `root`."""
    found = []
    for p in psutil.Process(root).children(recursive=True):
        try:
            if "chrom" in p.name() or "browser_guard" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:
            pass
    return found


def exited(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def left_behind(procs: list[psutil.Process], profiles: set[str]) -> list[str]:
    """What still runs of `procs`, or uses one of `profiles` (a renderer started after `procs` were listed), and
    the profiles still on disk. Other browsers on the machine are not counted."""
    left = [f"{p.pid} {p.name()}" for p in procs if not exited(p)]
    for p in psutil.process_iter(["cmdline", "status"]):
        arguments = p.info["cmdline"] or ()
        if p.info["status"] != psutil.STATUS_ZOMBIE and any(
            a.removeprefix("--user-data-dir=") in profiles for a in arguments
        ):
            left.append(f"{p.pid} using the profile")
    return sorted(set(left)) + [f"profile {path}" for path in profiles if os.path.exists(path)]


def wait_until_gone(procs, profiles, seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    while (left := left_behind(procs, profiles)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_sigkill_to_a_training_runs_process_group_leaves_no_browser(tmp_path):
    # element_pointer: no transformers to import before the runner's browser starts
    cfg = make_config(tmp_path, run__iterations=1000, runners__num=1, tasks__train=["click-test-2"],
                      policy__kind="element_pointer")  # fmt: skip
    config_file = tmp_path / "cfg.yaml"
    config_file.write_text(yaml.safe_dump(to_dict(cfg)))
    run = start_train("--config", str(config_file), log=tmp_path / "run.log")
    try:
        deadline = time.monotonic() + 240
        while not any("--type=renderer" in " ".join(p.cmdline()) for p in browser_processes_beneath(run.pid)):
            assert run.poll() is None, (tmp_path / "run.log").read_text()
            assert time.monotonic() < deadline, "no browser within 240 s"
            time.sleep(0.5)
        procs = browser_processes_beneath(run.pid)
        profiles = profiles_of(procs)
        assert profiles and all(Path(p).name.startswith(PROFILE_PREFIX) for p in profiles)

        os.killpg(run.pid, signal.SIGKILL)  # the driver, the raylet and Ray's own processes; its workers follow
        run.wait()
        left = wait_until_gone(procs, profiles, seconds=10)
        assert not left, f"left behind after the run was killed: {left}"
    finally:
        kill_session(run.pid)


OWNER = """
import sys, time
from rlsys.envs.web.browser import Browser
browser = Browser({chromium!r}, {chromedriver!r}, [400, 300], True, 30)
print(browser._profile, flush=True)
time.sleep(600)
"""


def test_an_owner_killed_alone_takes_its_browser_and_profile_along(tmp_path):
    chromium, chromedriver = _chromium_paths()
    owner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(OWNER.format(chromium=chromium, chromedriver=chromedriver))],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        profile = owner.stdout.readline().strip()
        procs = browser_processes_beneath(owner.pid)
        assert profile and any("--user-data-dir" in " ".join(p.cmdline()) for p in procs)
        owner.kill()  # the owner alone: its browser's processes are not in its process group, nor its children
        owner.wait()
        left = wait_until_gone(procs, {profile}, seconds=5)
        assert not left, f"left behind after the owner was killed: {left}"
    finally:
        kill_session(owner.pid)


def test_in_a_ray_worker_the_browser_goes_with_the_raylet_though_the_worker_lingers(tmp_path):
    """A killed run's Ray worker outlives its raylet until it notices; its browser does not. The stand-in raylet
    is killed and left unreaped (a zombie, as a killed raylet is until something reaps it)."""
    chromium, chromedriver = _chromium_paths()
    raylet = subprocess.Popen(["sleep", "600"])
    owner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(OWNER.format(chromium=chromium, chromedriver=chromedriver))],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "RAY_RAYLET_PID": str(raylet.pid)},
    )
    try:
        profile = owner.stdout.readline().strip()
        procs = browser_processes_beneath(owner.pid)
        assert profile and any("--user-data-dir" in " ".join(p.cmdline()) for p in procs)
        raylet.kill()
        left = wait_until_gone(procs, {profile}, seconds=5)
        assert not left, f"left behind after the raylet was killed: {left}"
        assert owner.poll() is None and psutil.Process(raylet.pid).status() == psutil.STATUS_ZOMBIE
    finally:
        kill_session(owner.pid)
        raylet.wait()


def test_a_start_removes_the_profiles_whose_owner_is_gone(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    started = int(psutil.Process(gone.pid).create_time() * 100)
    gone.wait()
    me = psutil.Process()
    mine = tmp_path / f"{PROFILE_PREFIX}{me.pid}-{int(me.create_time() * 100)}-live"
    stale = tmp_path / f"{PROFILE_PREFIX}{gone.pid}-{started}-dead"
    reused = tmp_path / f"{PROFILE_PREFIX}{me.pid}-{int(me.create_time() * 100) - 1}-reused"  # my pid, not me
    unnamed = tmp_path / f"{PROFILE_PREFIX}abcdefgh"  # an earlier version's: owner unknown
    other = tmp_path / "something-else"
    for folder in (mine, stale, reused, unnamed, other):
        (folder / "Default").mkdir(parents=True)
    chromium, chromedriver = _chromium_paths()
    browser = Browser(chromium, chromedriver, [400, 300], True, 30, None, str(tmp_path))
    try:
        assert mine.exists() and unnamed.exists() and other.exists()
        assert not stale.exists() and not reused.exists()
    finally:
        browser.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (mine, unnamed, other))


def test_the_suites_count_of_browsers_left_sees_one_started_here(tmp_path):
    """What the whole-run tests assert empty after a run (browsers_started_after) counts a browser this test
    started, renderers included, also on a pytest-xdist worker, where other workers' are told apart by TMPDIR."""
    chromium, chromedriver = _chromium_paths()
    browser = Browser(chromium, chromedriver, [400, 300], True, 30, None, str(tmp_path))
    try:
        # a child that has exited (Chromium's crashpad handler does early) is a zombie until reaped: not counted
        procs = [p for p in browser_processes_beneath(os.getpid()) if "chrom" in p.name() and not exited(p)]
        assert any("--type=renderer" in p.cmdline() for p in procs)
        assert all(started_here(p) for p in procs)
        # from the browser's own start, on psutil's clock (whole seconds from boot: time.time() taken just before
        # the start may read later than the start times of the processes)
        t0 = min(p.create_time() for p in procs)
        assert {p.pid for p in procs} <= set(browsers_started_after(t0))
    finally:
        browser.close()
    assert_no_browsers_left(t0)
