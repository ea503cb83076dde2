"""`rlsys-train` in a process of its own, as a user runs it: `python -m rlsys.cli.train ARGS`."""

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

TRAIN = [sys.executable, "-m", "rlsys.cli.train"]


def run_train(*args: str, timeout: float, env: dict | None = None, log: Path | None = None):
    """Run it to the end; a CompletedProcess. `env` is the child's whole environment (default: this process's), so
    a test can also leave variables out. Its output is captured as text (`.stdout`, `.stderr`), or, given `log`,
    written to that file with stderr into stdout, in the order it was printed."""
    command = [*TRAIN, *args]
    if log is None:
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    with open(log, "w") as out:
        return subprocess.run(command, env=_unbuffered(env), stdout=out, stderr=subprocess.STDOUT, timeout=timeout)


def start_train(*args: str, log: Path) -> subprocess.Popen:
    """Start it in a process group of its own, as a terminal's foreground job is (so a test can signal the group
    as Ctrl-C does); stdout and stderr go to `log`, unbuffered, so the test can read it while it runs."""
    with open(log, "w") as out:
        return subprocess.Popen(
            [*TRAIN, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=_unbuffered(None),
        )


def wait_for(condition, proc: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    """Wait until `condition()` holds while the started run is alive; fails with its log if it ends or time is up."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)


def kill_session(sid: int) -> None:
    """SIGKILL every process of a session, as a machine losing power would (Ray workers sit in
    process groups of their own, so killing the driver's group is not enough)."""
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid:
                p.kill()
        except (ProcessLookupError, psutil.Error, PermissionError):
            pass


def _unbuffered(env: dict | None) -> dict:
    return {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
