"""Runs chromedriver, and through it Chromium, so that they die with the process that started them, whatever
kills that process: `python browser_guard.py OWNER_PID[,PID...] PROFILE CHROMEDRIVER [ARGS...]`.

Selenium starts this script in chromedriver's place (browser.py). It leaves the owner's session, so that a
signal to the owner's process group (Ctrl-C, or SIGKILL to a whole training run) does not reach it, and forks
a watchdog that starts chromedriver and becomes the subreaper of everything beneath it: Chromium's zygotes and
renderers, orphaned when their parent dies, are reparented to the watchdog rather than to PID 1, so it can
always find them. The process Selenium started only stands in for chromedriver (it passes a stop on and exits
with the watchdog), because a Ray worker that exits kills its own children, with SIGKILL: the watchdog is a
grandchild, and outlives that.

Once the owner is gone (or another process listed with it, or the stand-in, so Selenium's handle on the
browser), the watchdog kills every process beneath it and removes the browser's profile folder; it finds out
within POLL_S. It also kills what is left when chromedriver exits, and when it is told to stop (SIGTERM, from
Selenium after chromedriver's own shutdown); the owner then removes the profile itself. The parent-death signal
alone would not do: it fires when the parent *thread* exits, it reaches only chromedriver, and Chromium's zygotes
are not chromedriver's children.

Standard library only, and run with `-I -S`, so it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import signal
import sys
import time

POLL_S = 0.2
STOP_GRACE_S = 5.0  # chromedriver's time to end Chromium itself once asked to stop
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_STOP = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
_PYTHON_IGNORES = (signal.SIGPIPE, signal.SIGXFSZ)  # as subprocess restores them for the programs it starts
_WATCHED = {signal.SIGCHLD, signal.SIGUSR1, *_STOP}  # SIGUSR1: the parent-death signal, a hint to look


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: deaths are still found by polling
        pass


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        parent = int(stat[stat.rindex(b")") + 2 :].split()[1])  # the name in parentheses may hold spaces
        children.setdefault(parent, []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    children, found, todo = _children_by_parent(), [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _reap() -> dict[int, int]:
    """Collect every child that has exited (orphans reparented here included): {pid: exit code}."""
    ended = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended[pid] = os.waitstatus_to_exitcode(status)


def kill_everything_beneath() -> None:
    """SIGKILL every descendant until none is left (a zygote may fork while its siblings are killed)."""
    for _ in range(200):
        left = descendants(os.getpid())
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap()
        time.sleep(0.01)


def _wait_for(pid: int, seconds: float) -> int | None:
    """The exit code of child `pid` once it exits within `seconds`, else None."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pid in (ended := _reap()):
            return ended[pid]
        signal.sigtimedwait({signal.SIGCHLD}, POLL_S)
    return None


class _Owner:
    """Whether an owner still lives: through a pidfd where the system has them (no pid reuse possible, and a
    zombie not yet reaped counts as gone)."""

    def __init__(self, pid: int):
        self.pid = pid
        try:
            self._fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self._fd = -1  # already gone
        except (AttributeError, OSError):
            self._fd = None

    def alive(self) -> bool:
        if self._fd is None:
            try:
                os.kill(self.pid, 0)
                return True
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
        return self._fd >= 0 and not select.select([self._fd], [], [], 0)[0]


class _Owners:
    """The browser lives while every one of these lives."""

    def __init__(self, pids: str):
        self._owners = [_Owner(int(pid)) for pid in pids.split(",")]

    def alive(self) -> bool:
        return all(owner.alive() for owner in self._owners)


def watch(owner: _Owners, stand_in: int, profile: str, command: list[str]) -> int:
    """The watchdog: chromedriver beneath it until chromedriver exits, a stop is asked, or the owner or the
    stand-in is gone; then nothing beneath it, and in the last two cases no profile either."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGUSR1)
    code = 1
    if os.getppid() == stand_in and owner.alive():  # not gone before the parent-death signal was set
        driver = os.posix_spawn(command[0], command, os.environ, setsigmask=(), setsigdef=_PYTHON_IGNORES)
        while True:
            received = signal.sigtimedwait(_WATCHED, POLL_S)
            if driver in (ended := _reap()):
                code = ended[driver]
                break
            if not owner.alive() or os.getppid() != stand_in:
                break
            if received is not None and received.si_signo in _STOP:
                os.kill(driver, signal.SIGTERM)
                code = _wait_for(driver, STOP_GRACE_S) or 0
                break
    kill_everything_beneath()
    if not owner.alive() or os.getppid() != stand_in:  # else the owner's Browser.close() removes it
        shutil.rmtree(profile, ignore_errors=True)
    return code


def stand_in(watchdog: int) -> int:
    """Selenium's process: passes a stop on to the watchdog, and exits with it."""
    while True:
        if signal.sigwaitinfo(_WATCHED).si_signo in _STOP:
            os.kill(watchdog, signal.SIGTERM)
        if watchdog in (ended := _reap()):
            return ended[watchdog]


def main(argv: list[str]) -> int:
    owner, profile, command = _Owners(argv[1]), argv[2], argv[3:]
    os.setsid()
    # a Ray worker ignores SIGCHLD, and an ignored SIGCHLD is inherited: children would be reaped unseen
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)  # taken with sigtimedwait, never by handlers
    parent = os.getpid()
    watchdog = os.fork()
    if watchdog == 0:
        os._exit(watch(owner, parent, profile, command))
    return stand_in(watchdog)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
