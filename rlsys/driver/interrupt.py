"""Ctrl-C and SIGTERM during a run: the first stops it cleanly (raising `Interrupted` in the main thread, so the
driver keeps what finished and shuts down), a second one exits at once."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.name = signal.Signals(signum).name
        self.exit_code = 128 + signum  # what a shell reports for a process ended by that signal


class Stopping:
    """What the signal handler knows: once a stop is under way, another signal ends the process at once."""

    def __init__(self) -> None:
        self.under_way = False
        self.previous: dict = {}

    def install(self) -> None:
        """Take SIGINT and SIGTERM (again: starting Ray installs a C++ handler that dumps the stack on SIGTERM)."""
        for s in SIGNALS:
            previous = signal.signal(s, self.handle)
            self.previous.setdefault(s, previous)

    def handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.under_way:
            os.write(2, f"\n{name} again: exiting now\n".encode())
            os._exit(128 + signum)
        self.under_way = True
        os.write(2, f"\n{name}: stopping cleanly (send it again to exit at once)\n".encode())
        raise Interrupted(signum)


@contextmanager
def first_signal_stops() -> Iterator[Stopping]:
    """Within the block the first SIGINT/SIGTERM raises Interrupted; set `under_way` once cleanup starts, so
    that a signal arriving then exits at once instead of interrupting the cleanup. Call `install()` again
    after starting Ray."""
    stopping = Stopping()
    stopping.install()
    try:
        yield stopping
    finally:
        for s, handler in stopping.previous.items():
            signal.signal(s, handler)
