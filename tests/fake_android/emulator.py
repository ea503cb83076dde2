"""A fake Android `emulator` executable for tests (put a wrapper named `emulator` on PATH or in a fake SDK).

    emulator -list-avds
    emulator -avd NAME -port N [-read-only -no-window -no-audio -no-boot-anim -no-snapshot-save] [-snapshot S] ...

Like the real one it serves the console on port N (with token authentication) and adb on N + 1,
tells the adb server ($ANDROID_ADB_SERVER_PORT) about itself, reports `sys.boot_completed` once
booted, and loads snapshots on `avd snapshot load`. Settings from the environment:
FAKE_EMULATOR_AVDS (comma-separated AVD names), FAKE_EMULATOR_BOOT_S (seconds to boot),
FAKE_EMULATOR_LOG (a file each start and snapshot load is appended to, as JSON lines).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fake_android.device import AdbDaemon, FakeDevice  # noqa: E402


def log_event(**event) -> None:
    path = os.environ.get("FAKE_EMULATOR_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"t": time.time(), "pid": os.getpid(), **event}) + "\n")


def console_token() -> str:
    path = Path(os.path.expanduser("~/.emulator_console_auth_token"))
    if not path.exists():
        path.write_text(secrets.token_hex(8))
    return path.read_text().strip()


def register_with_adb(adb_port: int) -> None:
    """What a booting emulator does: ask the adb server to connect to its adb port."""
    server = int(os.environ.get("ANDROID_ADB_SERVER_PORT", "5037"))
    payload = f"host:emulator:{adb_port}".encode()
    try:
        with socket.create_connection(("127.0.0.1", server), timeout=5) as s:
            s.sendall(b"%04x" % len(payload) + payload)
    except OSError:
        pass  # no adb server yet: it finds emulators by scanning when it starts


class Console:
    def __init__(self, device: FakeDevice, port: int, token: str):
        self.device, self.token = device, token
        self.listener = socket.create_server(("127.0.0.1", port))

    def serve(self) -> None:
        while True:
            conn, _ = self.listener.accept()
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        out = conn.makefile("wb", buffering=0)
        reader = conn.makefile("rb")
        out.write(
            b"Android Console: Authentication required\r\nAndroid Console: type 'auth <auth_token>' to "
            b"authenticate\r\nOK\r\n"
        )
        authed = False
        for raw in reader:
            words = raw.decode().strip().split()
            if not words:
                continue
            if words[0] == "auth":
                authed = words[1:] == [self.token]
                out.write(
                    b"Android Console: type 'help' for a list of commands\r\nOK\r\n"
                    if authed
                    else b"KO: authentication token does not match ~/.emulator_console_auth_token\r\n"
                )
            elif not authed:
                out.write(b"KO: unknown command, try 'help'\r\n")
            elif words[:3] == ["avd", "snapshot", "load"] and len(words) == 4:
                found = self.device.load_snapshot(words[3])
                log_event(event="snapshot_load", name=words[3], found=found)
                out.write(b"OK\r\n" if found else f"KO: snapshot '{words[3]}' does not exist\r\n".encode())
            elif words[:3] == ["avd", "snapshot", "save"] and len(words) == 4:
                self.device.save_snapshot(words[3])
                out.write(b"OK\r\n")
            elif words == ["ping"]:
                out.write(b"I am alive!\r\nOK\r\n")
            elif words == ["kill"]:
                out.write(b"OK: killing emulator, bye bye\r\n")
                os._exit(0)
            else:
                out.write(b"KO: unknown command, try 'help'\r\n")
        conn.close()


def main(argv: list[str]) -> int:
    avds = os.environ.get("FAKE_EMULATOR_AVDS", "rlsys_pixel_28").split(",")
    if "-list-avds" in argv:
        print("\n".join(avds))
        return 0
    avd = argv[argv.index("-avd") + 1]
    port = int(argv[argv.index("-port") + 1])
    if avd not in avds:
        print(f"PANIC: Unknown AVD name [{avd}], use -list-avds to see valid list.", file=sys.stderr)
        return 1
    device = FakeDevice(booted=False)
    if "-snapshot" in argv and not device.load_snapshot(argv[argv.index("-snapshot") + 1]):
        print("WARNING: snapshot not found, cold booting", file=sys.stderr)
    try:
        console = Console(device, port, console_token())
        AdbDaemon(device, port + 1)
    except OSError as e:
        print(f"ERROR: cannot bind ports {port}/{port + 1}: {e}", file=sys.stderr)
        return 1
    log_event(event="start", port=port, argv=argv)
    threading.Thread(target=console.serve, daemon=True).start()
    register_with_adb(port + 1)
    time.sleep(float(os.environ.get("FAKE_EMULATOR_BOOT_S", "0.5")))
    device.booted = True
    log_event(event="booted", port=port)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
