"""The one error a bad configuration raises, and how values appear in its message."""

from __future__ import annotations

import reprlib
from typing import Any

MAX_MESSAGE = 2000  # characters: a message quoting a huge value must not become huge itself

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 80
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 10
_repr.maxlevel = 3


class ConfigError(ValueError):
    """A configuration that cannot run; the message says which key or file and why (at most MAX_MESSAGE
    characters: anything longer ends with an ellipsis)."""

    def __init__(self, message: str):
        message = str(message)
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 1] + "…"
        super().__init__(message)


def shown(value: Any) -> str:
    """`repr(value)`, shortened: long strings and big or deep lists and mappings end in `...`."""
    return _repr.repr(value)
