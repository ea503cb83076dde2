"""A fake Android device for tests: the device side of the adb protocol over TCP.

A real adb server attaches to it (`adb connect 127.0.0.1:<port>`, or the emulator registration the
fake `emulator` does), so adbutils and the adb server run for real; only the phone is pretend.

The device answers the shell commands rlsys sends (getprop, wm size, input, screencap, dumpsys window,
am start, am broadcast) the way Android 9 does, records every input event, and renders a simple screen
that shows its state: the app in front (background colour), the typed text (one column per character)
and the last tap (a marker). After an input, `settle_frames` screenshots show a transition before the
screen is still, as a real UI animates.
"""

from __future__ import annotations

import base64
import io
import shlex
import socket
import struct
import threading
from dataclasses import dataclass, field

import numpy as np

A_CNXN, A_OPEN, A_OKAY, A_CLSE, A_WRTE = 0x4E584E43, 0x4E45504F, 0x59414B4F, 0x45534C43, 0x45545257
A_VERSION = 0x01000001
MAX_PAYLOAD = 1024 * 1024

LAUNCHER = "com.google.android.apps.nexuslauncher/com.google.android.apps.nexuslauncher.NexusLauncherActivity"
CHROME = "com.android.chrome/com.google.android.apps.chrome.Main"
APP_COLOURS = {LAUNCHER: (30, 60, 120), CHROME: (240, 240, 240)}
TEXT_COLOUR = (250, 200, 0)
KEYCODES = {"KEYCODE_HOME": 3, "KEYCODE_BACK": 4, "KEYCODE_ENTER": 66, "KEYCODE_SPACE": 62, "KEYCODE_DEL": 67}


def android_input_text(arg: str) -> str:
    """What `input text <arg>` types on Android 9: "%s" becomes a space (Input.java's escape loop)."""
    buff = list(arg)
    i, escape = 0, False
    while i < len(buff):
        if escape:
            escape = False
            if buff[i] == "s":
                buff[i] = " "
                del buff[i - 1]
                i -= 1
        if buff[i] == "%":
            escape = True
        i += 1
    return "".join(buff)


@dataclass
class DeviceState:
    app: str = LAUNCHER
    url: str = ""
    text: str = ""
    last_tap: tuple[int, int] | None = None


@dataclass
class FakeDevice:
    width: int = 1080
    height: int = 2280
    sdk: int = 28
    booted: bool = True
    settle_frames: int = 1  # screenshots after an input that still show the transition
    adb_keyboard: bool = True  # ADBKeyBoard installed: `am broadcast -a ADB_INPUT_B64` types unicode
    state: DeviceState = field(default_factory=DeviceState)
    events: list[tuple] = field(default_factory=list)  # every input, as ("tap", x, y), ("text", s), ...
    commands: list[str] = field(default_factory=list)  # every shell command line received
    snapshots: dict[str, DeviceState] = field(default_factory=lambda: {"rlsys_home": DeviceState()})
    _transition: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ------------------------------------------------------------------ shell

    def shell(self, line: str) -> bytes:
        with self._lock:
            self.commands.append(line)
            try:
                argv = shlex.split(line)
            except ValueError as e:
                return f"/system/bin/sh: syntax error: {e}\n".encode()
            if not argv:
                return b""
            handler = getattr(self, "_cmd_" + argv[0], None)
            if handler is None:
                return f"/system/bin/sh: {argv[0]}: not found\n".encode()
            return handler(argv[1:])

    def _cmd_echo(self, args):
        return (" ".join(args) + "\n").encode()

    def _cmd_getprop(self, args):
        props = {
            "sys.boot_completed": "1" if self.booted else "",
            "ro.build.version.sdk": str(self.sdk),
            "ro.product.model": "sdk_gphone_x86_64",
        }
        if not args:
            return "".join(f"[{k}]: [{v}]\n" for k, v in props.items()).encode()
        return (props.get(args[0], "") + "\n").encode()

    def _cmd_wm(self, args):
        if args[:1] == ["size"]:
            return f"Physical size: {self.width}x{self.height}\n".encode()
        return b""

    def _cmd_input(self, args):
        if not args:
            return b"usage: input ...\n"
        kind, rest = args[0], args[1:]
        if kind == "tap" and len(rest) == 2:
            x, y = int(float(rest[0])), int(float(rest[1]))
            self.state.last_tap = (x, y)
            self._event(("tap", x, y))
        elif kind == "swipe" and len(rest) in (4, 5):
            self._event(("swipe", *[int(float(v)) for v in rest]))
        elif kind == "text" and len(rest) == 1:
            typed = android_input_text(rest[0])
            if any(ord(c) > 126 for c in typed):  # the virtual keymap has no events for these
                return b"java.lang.IllegalArgumentException: no key events for text\n"
            self.state.text += typed
            self._event(("text", typed))
        elif kind == "keyevent" and rest:
            for key in rest:
                code = KEYCODES.get(key, None) if not key.isdigit() else int(key)
                if code is None:
                    return f"Error: unknown keycode {key}\n".encode()
                self._key(code)
        else:
            return f"Error: bad input command {' '.join(args)}\n".encode()
        return b""

    def _key(self, code: int) -> None:
        self._event(("key", code))
        if code == 3:
            self.state.app, self.state.url = LAUNCHER, ""
        elif code == 4 and self.state.app != LAUNCHER:
            self.state.app = LAUNCHER
        elif code == 66:
            self.state.text += "\n"
        elif code == 62:
            self.state.text += " "
        elif code == 67:
            self.state.text = self.state.text[:-1]

    def _cmd_am(self, args):
        if args[:1] == ["start"]:
            if "-d" in args:
                self.state.url = args[args.index("-d") + 1]
            self.state.app = args[args.index("-n") + 1] if "-n" in args else CHROME
            self._event(("start", self.state.app, self.state.url))
            return f"Starting: Intent {{ dat={self.state.url} }}\n".encode()
        if args[:1] == ["broadcast"] and "ADB_INPUT_B64" in args and self.adb_keyboard:
            typed = base64.b64decode(args[args.index("--es") + 2]).decode("utf-8")
            self.state.text += typed
            self._event(("text", typed))
            return b"Broadcasting: Intent { act=ADB_INPUT_B64 }\nBroadcast completed: result=0\n"
        return b"Broadcast completed: result=0\n"

    def _cmd_dumpsys(self, args):
        if args[:1] == ["window"]:
            return f"  mCurrentFocus=Window{{5c1b6b2 u0 {self.state.app}}}\n".encode()
        return b""

    def _cmd_screencap(self, args):
        frame = self.render()
        if "-p" in args:
            from PIL import Image

            out = io.BytesIO()
            Image.fromarray(frame, "RGBA").save(out, format="PNG", compress_level=1)
            return out.getvalue()
        header = struct.pack("<3I", self.width, self.height, 1)  # RGBA_8888
        if self.sdk >= 29:
            header += struct.pack("<I", 0)  # the colour space field newer screencaps write
        return header + frame.tobytes()

    def _event(self, event: tuple) -> None:
        self.events.append(event)
        self._transition = self.settle_frames

    # ------------------------------------------------------------------ screen and snapshots

    def render(self) -> np.ndarray:
        frame = np.empty((self.height, self.width, 4), np.uint8)
        frame[:] = (*APP_COLOURS.get(self.state.app, (90, 90, 90)), 255)
        columns = min(len(self.state.text), self.width // 8)
        for i in range(columns):  # one 6-pixel column per typed character, its height from the code point
            frame[100 : 100 + 4 + ord(self.state.text[i]) % 60, 8 * i : 8 * i + 6, :3] = TEXT_COLOUR
        if self.state.last_tap is not None:
            x, y = self.state.last_tap
            frame[max(0, y - 10) : y + 10, max(0, x - 10) : x + 10, :3] = (255, 0, 0)
        if self._transition:  # the transition still running: a band that moves each frame
            self._transition -= 1
            top = (self._transition * 97) % (self.height - 40)
            frame[top : top + 40, :, :3] = (0, 255, 0)
        return frame

    def save_snapshot(self, name: str) -> None:
        with self._lock:
            self.snapshots[name] = DeviceState(**vars(self.state))

    def load_snapshot(self, name: str) -> bool:
        with self._lock:
            if name not in self.snapshots:
                return False
            self.state = DeviceState(**vars(self.snapshots[name]))
            self._transition = 0
            return True


# ---------------------------------------------------------------------- the adb transport


def _message(command: int, arg0: int, arg1: int, data: bytes = b"") -> bytes:
    header = struct.pack("<6I", command, arg0, arg1, len(data), sum(data) & 0xFFFFFFFF, command ^ 0xFFFFFFFF)
    return header + data


class AdbDaemon:
    """Serves `device` to adb servers that connect to 127.0.0.1:`port` (0: any free port)."""

    def __init__(self, device: FakeDevice, port: int = 0):
        self.device = device
        self._listener = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.port = self._listener.getsockname()[1]
        self._connections: list[socket.socket] = []
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name=f"adbd-{self.port}").start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._connections.append(conn)
            threading.Thread(target=_Connection(self.device, conn).serve, daemon=True).start()

    def disconnect(self) -> None:
        """Pull the cable: drop every connection and stop answering."""
        self._closed.set()
        self._listener.close()
        for conn in self._connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            except OSError:
                pass

    close = disconnect


class _Connection:
    def __init__(self, device: FakeDevice, conn: socket.socket):
        self.device = device
        self.conn = conn
        self._send_lock = threading.Lock()
        self._acks: dict[int, threading.Semaphore] = {}
        self._next_id = 1
        self.max_payload = 4096  # until the host's CNXN says how much it takes

    def send(self, command: int, arg0: int, arg1: int, data: bytes = b"") -> None:
        with self._send_lock:
            self.conn.sendall(_message(command, arg0, arg1, data))

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.conn.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("host closed the connection")
            buf += chunk
        return buf

    def serve(self) -> None:
        try:
            while True:
                command, arg0, arg1, length, _, _ = struct.unpack("<6I", self._read(24))
                data = self._read(length) if length else b""
                if command == A_CNXN:
                    self.max_payload = min(arg1, MAX_PAYLOAD)
                    banner = b"device::ro.product.name=sdk_gphone_x86_64;ro.product.model=sdk_gphone_x86_64;"
                    self.send(A_CNXN, A_VERSION, MAX_PAYLOAD, banner + b"ro.product.device=generic_x86_64;")
                elif command == A_OPEN:
                    self._open(arg0, data.rstrip(b"\0").decode())
                elif command == A_WRTE:  # input for a stream: acknowledged, not used
                    self.send(A_OKAY, arg1, arg0)
                elif command == A_OKAY and arg1 in self._acks:
                    self._acks[arg1].release()
                elif command == A_CLSE and arg1 in self._acks:
                    self._acks.pop(arg1).release()
        except (ConnectionError, OSError, struct.error):
            self.conn.close()

    def _open(self, remote_id: int, service: str) -> None:
        local_id, self._next_id = self._next_id, self._next_id + 1
        if service.startswith(("shell:", "exec:")):
            command = service.split(":", 1)[1]
        else:
            self.send(A_CLSE, 0, remote_id)
            return
        self._acks[local_id] = threading.Semaphore(0)
        self.send(A_OKAY, local_id, remote_id)
        threading.Thread(target=self._run, args=(local_id, remote_id, command), daemon=True).start()

    def _run(self, local_id: int, remote_id: int, command: str) -> None:
        output = self.device.shell(command)
        ack = self._acks[local_id]
        try:
            for start in range(0, len(output), self.max_payload):
                self.send(A_WRTE, local_id, remote_id, output[start : start + self.max_payload])
                if not ack.acquire(timeout=30) or local_id not in self._acks:
                    return  # the host closed the stream
            self.send(A_CLSE, local_id, remote_id)
        except OSError:
            pass
        finally:
            self._acks.pop(local_id, None)
