"""Text files a user writes (configs, task files) are UTF-8; one that is not is named with the line and the byte
offset of its first undecodable byte, instead of a UnicodeDecodeError traceback."""

from __future__ import annotations

import os
from pathlib import Path


class NotUTF8Error(ValueError):
    pass


def read_utf8(path: str | os.PathLike) -> str:
    """The text of `path`; NotUTF8Error ("PATH:LINE: not UTF-8 text: byte N is 0x..") when it is not UTF-8."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise NotUTF8Error(
            f"{path}:{line}: not UTF-8 text: byte {e.start} is {data[e.start]:#04x} ({e.reason}); save it as UTF-8"
        ) from None
