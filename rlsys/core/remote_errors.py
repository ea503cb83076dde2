"""What a runner's or a learner's failure says on the driver's console.

Actors' own output stays in Ray's session logs (the driver does not stream it: browsers and model loading
are noisy), so the driver shows what failed itself: the exception a remote call or an actor's constructor
raised, or what Ray says killed the actor, with the actor's name; at most a few times a minute per actor,
so that a slot failing in a loop cannot flood the console.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

from rlsys.core.failures import headline

MAX_CHARS = 1000  # of one error's text on the console
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def cause_text(error: BaseException) -> str:
    """`TypeName: message` of the exception behind a Ray error (a remote method's, or an actor constructor's),
    or Ray's account of why an actor died (its process exited, its node was lost); the error's own
    `TypeName: message` for anything else."""
    from ray.exceptions import RayActorError, RayTaskError

    if isinstance(error, RayTaskError) and error.cause is not None and not isinstance(error.cause, RayTaskError):
        return _clip(f"{type(error.cause).__name__}: {error.cause}")
    text = _ANSI.sub("", str(error))
    if isinstance(error, RayActorError):
        if getattr(error, "actor_init_failed", False):  # Ray's text ends with the constructor's traceback
            return _clip(_after_traceback(text) or headline(error))
        # a process or node that died: Ray's explanation follows the actor's tab-indented particulars
        lines = [line for line in text.splitlines() if line.strip() and not line.startswith("\t")]
        return _clip(" ".join(lines[1:]) or lines[0] if lines else type(error).__name__)
    return _clip(f"{type(error).__name__}: {text}" if text else type(error).__name__)


def remote_traceback(error: BaseException) -> str | None:
    """The traceback Ray brought back from the actor (of a remote method, or of the constructor), if any."""
    from ray.exceptions import RayActorError, RayTaskError

    if isinstance(error, RayTaskError) or (isinstance(error, RayActorError) and error.actor_init_failed):
        text = _ANSI.sub("", str(error))
        return text if '  File "' in text else None
    return None


def _after_traceback(text: str) -> str:
    """The exception lines that close a formatted traceback (everything after its last frame)."""
    lines = text.splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    if not frames:
        return ""
    tail = lines[frames[-1] + 1 :]
    return "\n".join(line for line in tail if line.strip() and not line.startswith(" "))


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 3] + "..."


class FailureLog:
    """Warnings about actors' failures, at most `per_minute` a minute per actor; what is held back is counted
    and the count is given with the next warning shown for that actor."""

    def __init__(self, logger: logging.Logger, per_minute: int = 3, clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.per_minute = per_minute
        self.clock = clock
        self._shown: dict[str, list[float]] = {}
        self._held: dict[str, int] = {}

    def warn(self, key: str, message: str) -> bool:
        """Log `message` (which names the actor) unless `key`'s actor already had `per_minute` shown in the
        last minute. Returns whether it was shown."""
        now = self.clock()
        recent = [t for t in self._shown.get(key, []) if now - t < 60.0]
        if len(recent) >= self.per_minute:
            self._shown[key] = recent
            self._held[key] = self._held.get(key, 0) + 1
            return False
        held = self._held.pop(key, 0)
        if held:
            message += f" ({held} more from {key} not shown in the last minute)"
        self._shown[key] = [*recent, now]
        self.logger.warning("%s", message)
        return True
