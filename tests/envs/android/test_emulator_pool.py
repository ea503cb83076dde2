"""EmulatorPool (envs/android/emulator.py) against a real adb server and fake `emulator` processes (no Ray).

Every test uses its own console ports (inside the emulator's 5554..5682 range) and shuts its pool down in a
`finally`, then checks that no fake emulator process it caused to start is still running.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import adbutils
import psutil
import pytest

from rlsys.config import AndroidConfig, ConfigError, load_config
from rlsys.core.env import EnvSetupError
from rlsys.envs.android.device import run_shell
from rlsys.envs.android.emulator import (
    ConsoleError,
    EmulatorPool,
    Lease,
    check_local_setup,
    console_command,
    find_emulator_binary,
    load_snapshot,
)

FLAGS = ("-read-only", "-no-window", "-no-audio", "-no-boot-anim", "-no-snapshot-save")


def events(fake_sdk) -> list[dict]:
    path = Path(fake_sdk["emulator_env"]["FAKE_EMULATOR_LOG"])
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def shutdown_and_check(pool: EmulatorPool, fake_sdk, extra_pids=()) -> None:
    """Shut the pool down; every fake emulator this test started (its pool's processes, and every pid the fake
    logged) must be gone. Survivors are killed (this test started them) before the assertion fails."""
    pool.shutdown()
    pids = {e.pid for e in pool.emulators if e.pid is not None} | {e["pid"] for e in events(fake_sdk)}
    pids |= set(extra_pids)
    wait_for(lambda: not any(alive(p) for p in pids), 5.0)
    survivors = sorted(p for p in pids if alive(p))
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert not survivors, f"fake emulators outlived pool.shutdown(): {survivors}"


def make_pool(fake_sdk, log_dir=None, **overrides) -> tuple[AndroidConfig, EmulatorPool]:
    cfg = AndroidConfig(**{**fake_sdk, **overrides})
    return cfg, EmulatorPool(cfg, log_dir=log_dir)


def adb(fake_sdk) -> adbutils.AdbClient:
    return adbutils.AdbClient(host="127.0.0.1", port=fake_sdk["adb_server_port"], socket_timeout=10)


def test_emulators_start_in_parallel_on_consecutive_port_pairs(fake_sdk):
    env = {**fake_sdk["emulator_env"], "FAKE_EMULATOR_BOOT_S": "2.5"}
    cfg, pool = make_pool(fake_sdk, first_console_port=5630, emulator_env=env)
    try:
        pool.check()  # the SDK/AVD check (one `emulator -list-avds`) is not part of the timing
        t0 = time.monotonic()
        started = pool.start(3)
        elapsed = time.monotonic() - t0
        # one after the other would take at least 7.5 s
        assert elapsed < 5.0, f"3 emulators booting 2.5 s each took {elapsed:.1f} s: not started in parallel"

        assert [e.console_port for e in started] == [5630, 5632, 5634]
        assert [e.adb_port for e in started] == [5631, 5633, 5635]
        assert [e.serial for e in started] == ["emulator-5630", "emulator-5632", "emulator-5634"]
        assert pool.emulators == started
        assert [e.starts for e in started] == [1, 1, 1]
        assert len({e.pid for e in started}) == 3

        log = events(fake_sdk)
        kinds = [e["event"] for e in log]
        assert sorted(kinds) == ["booted"] * 3 + ["start"] * 3
        assert kinds.index("booted") == 3, f"a start came after the first boot finished: {kinds}"
        assert max(e["t"] for e in log if e["event"] == "start") < min(e["t"] for e in log if e["event"] == "booted")
        starts = [e for e in log if e["event"] == "start"]
        assert sorted(e["port"] for e in starts) == [5630, 5632, 5634]
        assert {e["pid"] for e in starts} == {e.pid for e in started}
        for event in starts:
            argv = event["argv"]
            assert argv[argv.index("-avd") + 1] == "rlsys_pixel_28"
            assert argv[argv.index("-port") + 1] == str(event["port"])
            assert argv[argv.index("-snapshot") + 1] == "rlsys_home"
            assert all(flag in argv for flag in FLAGS), argv
            assert argv[-2:] == ["-gpu", "swiftshader_indirect"]  # the default emulator_args, last

        # they registered with the pool's adb server (ANDROID_ADB_SERVER_PORT) and answer there
        serials = {d.serial for d in adb(fake_sdk).device_list()}
        assert {"emulator-5630", "emulator-5632", "emulator-5634"} <= serials
        assert all(pool.healthy(e) for e in started)
        assert [s["alive"] for s in pool.status()] == [True, True, True]
    finally:
        shutdown_and_check(pool, fake_sdk)
    assert [s["alive"] for s in pool.status()] == [False, False, False]


def test_reset_loads_the_snapshot_through_the_console(fake_sdk, tmp_path):
    cfg, pool = make_pool(fake_sdk, first_console_port=5640)
    try:
        lease = pool.acquire()
        assert lease == Lease("emulator-5640", 5640, "rlsys_home", fake_sdk["console_token_file"])
        assert pool.emulators[0].leased
        assert console_command(5640, "ping", lease.token_file) == "I am alive!"

        client = adb(fake_sdk)

        def screen() -> bytes:
            return run_shell(client, lease.serial, ["screencap"], 10.0)

        before = screen()
        assert len(before) == 12 + 1080 * 2280 * 4
        client.device(lease.serial).shell(["input", "text", "hello"])
        typed = screen()
        assert typed != before
        assert screen() != before  # the typed text itself, not just the transition frame

        load_snapshot(lease, 5)
        assert screen() == before
        loads = [e for e in events(fake_sdk) if e["event"] == "snapshot_load"]
        assert [(e["name"], e["found"]) for e in loads] == [("rlsys_home", True)]

        unknown = dataclasses.replace(lease, snapshot="no_such_snapshot")
        with pytest.raises(ConsoleError, match="no_such_snapshot"):
            load_snapshot(unknown, 5)
        loads = [e for e in events(fake_sdk) if e["event"] == "snapshot_load"]
        assert [(e["name"], e["found"]) for e in loads][-1] == ("no_such_snapshot", False)

        wrong = tmp_path / "wrong_token"
        wrong.write_text("0123456789abcdef\n")
        with pytest.raises(ConsoleError, match="authentication token does not match"):
            load_snapshot(dataclasses.replace(lease, token_file=str(wrong)), 5)
        with pytest.raises(ConsoleError, match="cannot be read"):
            load_snapshot(dataclasses.replace(lease, token_file=str(tmp_path / "missing_token")), 5)
        assert len([e for e in events(fake_sdk) if e["event"] == "snapshot_load"]) == 2  # neither was run

        with pytest.raises(ValueError, match="not started by the pool"):
            load_snapshot(Lease("emulator-5554"), 5)
        assert pool.healthy(pool.emulators[0])  # the refused commands did not break the emulator
    finally:
        shutdown_and_check(pool, fake_sdk)


def test_a_crashed_emulator_restarts_on_the_same_ports(fake_sdk):
    cfg, pool = make_pool(fake_sdk, first_console_port=5644)
    try:
        lease = pool.acquire()
        emulator = pool.emulators[0]
        old_pid = emulator.pid
        assert (lease.serial, emulator.console_port, emulator.starts, pool.restarts) == ("emulator-5644", 5644, 1, 0)

        os.kill(old_pid, signal.SIGKILL)
        assert wait_for(lambda: not alive(old_pid), 5.0)
        assert not pool.healthy(emulator)

        pool.release(lease.serial, broken=True)
        assert emulator.console_port == 5644 and emulator.serial == "emulator-5644"
        assert emulator.pid != old_pid and alive(emulator.pid)
        assert emulator.starts == 2
        assert pool.restarts == 1
        assert not emulator.leased
        assert pool.healthy(emulator)
        assert len(pool.emulators) == 1
        starts = [(e["port"], e["pid"]) for e in events(fake_sdk) if e["event"] == "start"]
        assert starts == [(5644, old_pid), (5644, emulator.pid)]

        # the new process serves the console and the device
        assert console_command(5644, "ping", fake_sdk["console_token_file"]) == "I am alive!"
        again = pool.acquire()
        assert again == lease and pool.restarts == 1  # a healthy free emulator is handed out as it is
    finally:
        shutdown_and_check(pool, fake_sdk)


def test_a_hung_emulator_is_detected_and_restarted(fake_sdk):
    cfg, pool = make_pool(fake_sdk, first_console_port=5648)
    stopped = None
    try:
        (emulator,) = pool.start(1)
        stopped = emulator.pid
        os.kill(stopped, signal.SIGSTOP)
        assert wait_for(lambda: psutil.Process(stopped).status() == psutil.STATUS_STOPPED, 5.0)

        t0 = time.monotonic()
        assert not pool.healthy(emulator)
        took = time.monotonic() - t0
        assert took < 8.0, f"healthy() took {took:.1f} s on a hung emulator (health_timeout_s=3)"

        lease = pool.acquire()  # the only emulator is free but hung: restarted, not handed out hung
        assert lease.serial == "emulator-5648"
        assert emulator.pid != stopped
        assert not alive(stopped), "the hung process the pool started was not killed"
        assert (emulator.starts, pool.restarts, emulator.leased) == (2, 1, True)
        assert pool.healthy(emulator)
    finally:
        if stopped is not None and alive(stopped):
            os.kill(stopped, signal.SIGCONT)
        shutdown_and_check(pool, fake_sdk, extra_pids=[stopped] if stopped else [])


def test_the_pool_never_touches_what_it_did_not_start(fake_sdk):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 5652))
    listener.listen()
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    cfg, pool = make_pool(fake_sdk, first_console_port=5652)
    try:
        (emulator,) = pool.start(1)
        assert (emulator.console_port, emulator.serial) == (5654, "emulator-5654")  # the next pair
        pool.shutdown()
        assert not alive(emulator.pid)

        assert bystander.poll() is None and alive(bystander.pid)
        with socket.create_connection(("127.0.0.1", 5652), timeout=5):
            pass  # still listening
        conn, _ = listener.accept()
        conn.close()
    finally:
        try:
            shutdown_and_check(pool, fake_sdk)
        finally:
            bystander.kill()
            bystander.wait(timeout=10)
            listener.close()


# ---------------------------------------------------------------------------------- setup errors


def android_config_data(fake_sdk, tmp_path, **android) -> dict:
    tasks = tmp_path / "aitw_train.txt"
    tasks.write_text("open the settings\nsearch for pizza\n")
    return {
        "env": {"kind": "android", "action_space": "autoui", "android": {**fake_sdk, **android}},
        "tasks": {"suite": "aitw-general", "file": str(tasks)},
        "policy": {"kind": "autoui"},
    }


def test_setup_errors_name_what_to_fix(fake_sdk, tmp_path, monkeypatch):
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.delenv("ANDROID_SDK_ROOT", raising=False)
    monkeypatch.delenv("ANDROID_HOME", raising=False)
    monkeypatch.delenv("FAKE_EMULATOR_AVDS", raising=False)
    monkeypatch.setenv("PATH", str(empty))

    # no SDK anywhere
    with pytest.raises(EnvSetupError, match="ANDROID_SDK_ROOT") as no_sdk:
        find_emulator_binary(AndroidConfig(**{**fake_sdk, "sdk_root": None}))
    assert "env.android.sdk_root" in str(no_sdk.value)
    with pytest.raises(EnvSetupError, match="ANDROID_SDK_ROOT"):
        EmulatorPool(AndroidConfig(**{**fake_sdk, "sdk_root": None})).check()

    # ... but an `emulator` on PATH is used, and ANDROID_SDK_ROOT is honoured
    on_path = tmp_path / "path_bin"
    on_path.mkdir()
    (on_path / "emulator").symlink_to(Path(fake_sdk["sdk_root"]) / "emulator" / "emulator")
    monkeypatch.setenv("PATH", str(on_path))
    assert find_emulator_binary(AndroidConfig(**{**fake_sdk, "sdk_root": None})) == str(on_path / "emulator")
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("ANDROID_SDK_ROOT", fake_sdk["sdk_root"])
    expected = str(Path(fake_sdk["sdk_root"]) / "emulator" / "emulator")
    assert find_emulator_binary(AndroidConfig(**{**fake_sdk, "sdk_root": None})) == expected
    monkeypatch.delenv("ANDROID_SDK_ROOT")

    # an SDK folder without the emulator package
    bare = tmp_path / "bare_sdk"
    bare.mkdir()
    with pytest.raises(EnvSetupError, match="has no emulator/emulator") as no_emulator:
        EmulatorPool(AndroidConfig(**{**fake_sdk, "sdk_root": str(bare)})).check()
    assert str(bare) in str(no_emulator.value)

    # an explicit emulator that is not executable
    with pytest.raises(EnvSetupError, match="env.android.emulator"):
        find_emulator_binary(AndroidConfig(**{**fake_sdk, "emulator": str(tmp_path / "nothing")}))

    # no KVM
    no_kvm = tmp_path / "dev_kvm_missing"
    with pytest.raises(EnvSetupError, match="KVM") as kvm:
        EmulatorPool(AndroidConfig(**{**fake_sdk, "kvm_device": str(no_kvm)})).check()
    assert str(no_kvm) in str(kvm.value)

    # an AVD the emulator does not know; `-list-avds` runs with this process's environment
    EmulatorPool(AndroidConfig(**fake_sdk)).check()  # the default rlsys_pixel_28 is known
    monkeypatch.setenv("FAKE_EMULATOR_AVDS", "pixel_a,pixel_b")
    with pytest.raises(EnvSetupError, match="env.android.avd") as avd:
        EmulatorPool(AndroidConfig(**fake_sdk)).check()
    assert "'rlsys_pixel_28'" in str(avd.value)
    assert "['pixel_a', 'pixel_b']" in str(avd.value)

    # a pool of running devices checks nothing (sdk_root points nowhere)
    EmulatorPool(AndroidConfig(**{**fake_sdk, "sdk_root": str(bare), "devices": ["emulator-5554"]})).check()


def test_check_local_setup_turns_setup_errors_into_config_errors(fake_sdk, tmp_path, monkeypatch):
    monkeypatch.delenv("FAKE_EMULATOR_AVDS", raising=False)
    cfg = load_config(None, data=android_config_data(fake_sdk, tmp_path))
    assert cfg.runners.resource == "android"
    check_local_setup(cfg)  # everything is there

    bad_avd = load_config(None, data=android_config_data(fake_sdk, tmp_path, avd="no_such_avd"))
    with pytest.raises(ConfigError, match="env.android.avd") as e:
        check_local_setup(bad_avd)
    assert "'no_such_avd'" in str(e.value) and "['rlsys_pixel_28']" in str(e.value)
    assert not isinstance(e.value, EnvSetupError)

    no_kvm = load_config(None, data=android_config_data(fake_sdk, tmp_path, kvm_device=str(tmp_path / "kvm")))
    with pytest.raises(ConfigError, match="KVM"):
        check_local_setup(no_kvm)

    # a cluster run (its nodes check themselves) and a run on running devices check nothing here
    nowhere = {"avd": "no_such_avd", "sdk_root": str(tmp_path / "no_sdk"), "kvm_device": str(tmp_path / "kvm")}
    on_cluster = android_config_data(fake_sdk, tmp_path, **nowhere)
    on_cluster["ray"] = {"address": "auto"}
    check_local_setup(load_config(None, data=on_cluster))
    check_local_setup(
        load_config(None, data=android_config_data(fake_sdk, tmp_path, devices=["emulator-5554"], **nowhere))
    )


def test_an_emulator_that_exits_while_booting_is_a_setup_error_with_its_log(fake_sdk, tmp_path):
    logs = tmp_path / "logs"
    cfg, pool = make_pool(fake_sdk, log_dir=logs, first_console_port=5660, avd="no_such_avd")
    pool._binary = find_emulator_binary(cfg)  # skip check(), which would refuse the unknown AVD
    try:
        t0 = time.monotonic()
        with pytest.raises(EnvSetupError, match="exited with code 1 while booting") as e:
            pool.start(1)
        assert time.monotonic() - t0 < 10.0  # not the 30 s boot timeout
        log_path = logs / "emulator-5660.log"
        assert str(e.value) == f"emulator-5660 exited with code 1 while booting; its log: {log_path}"
        assert "Unknown AVD name [no_such_avd]" in log_path.read_text()
        assert pool.emulators[0].process.returncode == 1
        assert [ev for ev in events(fake_sdk) if ev["event"] == "start"] == []
    finally:
        shutdown_and_check(pool, fake_sdk)

    # without a log_dir the message has no log path
    cfg, pool = make_pool(fake_sdk, first_console_port=5660, avd="no_such_avd")
    pool._binary = find_emulator_binary(cfg)
    try:
        with pytest.raises(EnvSetupError) as e:
            pool.start(1)
        assert str(e.value) == "emulator-5660 exited with code 1 while booting"
    finally:
        shutdown_and_check(pool, fake_sdk)
