"""One Android device over adb (adbutils): screenshots, input, the app in front.

Every call goes through the adb server with a timeout; a device that stops answering or drops off
the server raises `DeviceLostError`, which the env turns into an `EnvBrokenError` (the runner then
gets a fresh device). `adb_seconds` accumulates the time spent inside adb calls, so the env can
report its own overhead on top of them.
"""

from __future__ import annotations

import base64
import re
import struct
import time
from dataclasses import dataclass

import numpy as np

from rlsys.core.env import EnvBrokenError

KEY_HOME, KEY_BACK, KEY_TAB, KEY_ENTER = 3, 4, 61, 66
_KEYS = {"\n": KEY_ENTER, "\t": KEY_TAB}
_FOCUS = re.compile(r"mCurrentFocus=Window\{\S+ \S+ ([^\s}]+)\}")
_READ_CHUNK = 1 << 20


class DeviceLostError(EnvBrokenError):
    """The device stopped answering or left the adb server."""


class UnicodeInputError(ValueError):
    """Text the device cannot type without an input method for it."""


def text_commands(text: str, unicode_ime: bool) -> list[list[str]]:
    """The shell commands that type `text` exactly.

    `input text` turns "%s" into a space and has key events for printable ASCII only. So spaces are
    sent as "%s", a literal "%s" is split across two calls, newlines and tabs are key events, and
    other characters go through ADBKeyBoard's base64 broadcast (when it is installed on the device).
    """
    commands: list[list[str]] = []
    run = ""  # the pending `input text` argument

    def flush():
        nonlocal run
        if run:
            commands.append(["input", "text", run])
            run = ""

    i = 0
    while i < len(text):
        char = text[i]
        if char in _KEYS:
            flush()
            commands.append(["input", "keyevent", str(_KEYS[char])])
        elif " " <= char <= "~":
            if char == "s" and run.endswith("%"):  # a typed "%" (an encoded space ends in "s"): split
                flush()
            run += "%s" if char == " " else char
        else:
            flush()
            j = i
            while j < len(text) and not (" " <= text[j] <= "~") and text[j] not in _KEYS:
                j += 1
            if not unicode_ime:
                raise UnicodeInputError(
                    f"cannot type {text[i:j]!r}: `input text` has no key events for it; install ADBKeyBoard in the "
                    "AVD snapshot and set env.android.unicode_input = 'adbkeyboard'"
                )
            msg = base64.b64encode(text[i:j].encode("utf-8")).decode("ascii")
            commands.append(["am", "broadcast", "-a", "ADB_INPUT_B64", "--es", "msg", msg])
            i = j
            continue
        i += 1
    flush()
    return commands


def run_shell(client, serial: str, argv: list[str], timeout_s: float) -> bytearray:
    """`adb exec-out <argv>` with `timeout_s` bounding every wait, the stream's opening included (adbutils'
    own shell waits up to 10 minutes for a device that stopped answering, and grows its output 4 KB at a
    time, which is quadratic on a 10 MB frame)."""
    from adbutils._utils import list2cmdline

    conn = client.device(serial).open_transport(timeout=timeout_s)
    try:
        conn.send_command("shell:" + list2cmdline(argv))
        conn.check_okay()
        out = bytearray()
        while chunk := conn.conn.recv(_READ_CHUNK):
            out += chunk
        return out  # a bytearray: no copy of a 10 MB frame
    finally:
        conn.close()


@dataclass(eq=False)
class Screen:
    """One raw screenshot: RGBA pixels after a small header."""

    raw: bytearray
    header: int
    width: int
    height: int

    @property
    def rgba(self) -> np.ndarray:
        return np.frombuffer(self.raw, np.uint8, offset=self.header).reshape(self.height, self.width, 4)

    def same_as(self, other: Screen) -> bool:
        return self.raw == other.raw  # one memcmp


class AndroidDevice:
    def __init__(self, serial: str, adb_port: int = 5037, timeout_s: float = 15.0, unicode_ime: bool = True):
        import adbutils

        self.serial = serial
        self.timeout_s = timeout_s
        self.unicode_ime = unicode_ime
        self.adb_seconds = 0.0
        self.adb_calls = 0
        self._client = adbutils.AdbClient(host="127.0.0.1", port=adb_port, socket_timeout=timeout_s)
        self.width, self.height = self._screen_size()

    # ------------------------------------------------------------------ adb calls

    def _call(self, what: str, fn):
        import adbutils

        t0 = time.perf_counter()
        try:
            return fn()
        except (adbutils.AdbError, OSError, EOFError) as e:
            raise DeviceLostError(f"device {self.serial}: {what} failed: {type(e).__name__}: {e}") from e
        finally:
            self.adb_seconds += time.perf_counter() - t0
            self.adb_calls += 1

    def shell(self, argv: list[str]) -> str:
        return self.exec_out(argv).decode("utf-8", "replace")

    def exec_out(self, argv: list[str]) -> bytearray:
        return self._call(argv[0], lambda: run_shell(self._client, self.serial, argv, self.timeout_s))

    # ------------------------------------------------------------------ queries

    def _screen_size(self) -> tuple[int, int]:
        out = self.shell(["wm", "size"])
        match = re.search(r"Override size: (\d+)x(\d+)", out) or re.search(r"Physical size: (\d+)x(\d+)", out)
        if not match:
            raise DeviceLostError(f"device {self.serial}: unexpected `wm size` output {out[:80]!r}")
        return int(match.group(1)), int(match.group(2))

    def foreground(self) -> str:
        """The focused window's `package/activity` ("" when none has focus)."""
        match = _FOCUS.search(self.shell(["dumpsys", "window", "windows"]))
        return match.group(1) if match else ""

    def screen(self) -> Screen:
        """The raw `screencap` output: no PNG encoding on the device, which costs seconds at full resolution."""
        raw = self.exec_out(["screencap"])
        width, height, pixel_format = struct.unpack_from("<3I", raw)
        header = len(raw) - width * height * 4  # 12 bytes up to Android 9, 16 with the colour space after
        if pixel_format != 1 or header not in (12, 16):
            raise DeviceLostError(
                f"device {self.serial}: unexpected screencap output ({len(raw)} bytes, {width}x{height}, "
                f"format {pixel_format})"
            )
        return Screen(raw, header, width, height)

    def frame(self) -> np.ndarray:
        """The screen as an (height, width, 3) uint8 array."""
        return self.screen().rgba[:, :, :3]

    # ------------------------------------------------------------------ input

    def tap(self, x: int, y: int) -> None:
        self.shell(["input", "tap", str(x), str(y)])

    def swipe(self, x0: int, y0: int, x1: int, y1: int, duration_ms: int = 300) -> None:
        self.shell(["input", "swipe", str(x0), str(y0), str(x1), str(y1), str(duration_ms)])

    def key(self, code: int) -> None:
        self.shell(["input", "keyevent", str(code)])

    def type_text(self, text: str) -> None:
        for argv in text_commands(text, self.unicode_ime):
            out = self.shell(argv)
            if "Exception" in out or out.startswith("Error"):
                raise ValueError(f"`{argv[0]} {argv[1]}` failed on the device: {out.strip()[:200]}")

    def open_url(self, url: str) -> None:
        self.shell(["am", "start", "-a", "android.intent.action.VIEW", "-d", url])
