"""EmulatorPool: the Android emulators of one machine.

Emulators of one AVD run side by side with `-read-only`, each on its own console/adb port pair
(5554 + 2i, 5555 + 2i); they boot from the AVD's snapshot, and every episode starts by loading that
snapshot again through the emulator console (seconds, never a cold boot). A lease hands one emulator
to one runner. The pool only ever stops processes it started itself.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rlsys.config import AndroidConfig
from rlsys.core.env import EnvBrokenError, EnvSetupError
from rlsys.envs.android.device import run_shell

log = logging.getLogger(__name__)

SDK_HINT = (
    "install the emulator and a system image with sdkmanager (README: Creating the AVD and its snapshot), then set "
    "env.android.sdk_root or ANDROID_SDK_ROOT"
)
_LAST_CONSOLE_PORT = 5682  # the emulator accepts console ports 5554..5682


class ConsoleError(RuntimeError):
    """The emulator console refused a command or did not answer."""


@dataclass
class Lease:
    """What a runner needs to drive its device: the adb serial, and the console port (None for a device
    the pool did not start, which is reset with the home key instead of a snapshot)."""

    serial: str
    console_port: int | None = None
    snapshot: str = ""
    token_file: str = ""


class Leases(Protocol):
    """Where an Android env gets its device (`make_env`'s `emulators`): an EmulatorPool in this process, or a
    runner's node pool actor (rlsys.actors.emulators.NodePool). The env hands its lease back when it closes,
    `broken` when the device failed it."""

    def acquire(self) -> Lease: ...

    def release(self, serial: str, broken: bool) -> None: ...


@dataclass
class Emulator:
    console_port: int
    process: subprocess.Popen | None = None
    log_path: Path | None = None
    leased: bool = False
    starts: int = 0

    @property
    def adb_port(self) -> int:
        return self.console_port + 1

    @property
    def serial(self) -> str:
        return f"emulator-{self.console_port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None


def find_emulator_binary(cfg: AndroidConfig) -> str:
    """The emulator executable, or an EnvSetupError saying how to get one."""
    if cfg.emulator:
        path = Path(os.path.expanduser(cfg.emulator))
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise EnvSetupError(f"env.android.emulator: {path} is not an executable file")
        return str(path)
    sdk = cfg.sdk_root or os.environ.get("ANDROID_SDK_ROOT") or os.environ.get("ANDROID_HOME")
    if not sdk:
        found = shutil.which("emulator")
        if found:
            return found
        raise EnvSetupError(f"no Android SDK: neither env.android.sdk_root nor ANDROID_SDK_ROOT is set; {SDK_HINT}")
    path = Path(os.path.expanduser(sdk)) / "emulator" / "emulator"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise EnvSetupError(f"the Android SDK at {sdk} has no emulator/emulator; {SDK_HINT}")
    return str(path)


def check_kvm(device: str) -> None:
    if not device:
        return
    if not os.path.exists(device):
        raise EnvSetupError(
            f"{device} does not exist: x86 emulators need KVM. Enable virtualisation in the BIOS or use a "
            "KVM-capable (bare-metal or nested-virtualisation) instance; see README: Android environment"
        )
    if not os.access(device, os.R_OK | os.W_OK):
        raise EnvSetupError(
            f"{device} is not readable and writable by this user: run `sudo usermod -aG kvm $USER` and log in again"
        )


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # as the emulator binds: connections of a killed emulator left in TIME_WAIT do not hold the port
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def console_command(port: int, command: str, token_file: str, timeout_s: float = 10.0) -> str:
    """Run one emulator console command (what `adb emu <command>` does) and return its reply."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
            reader = sock.makefile("rb")
            banner = _read_reply(reader)
            if "Authentication required" in banner:
                token_path = Path(os.path.expanduser(token_file))
                try:
                    token = token_path.read_text().strip()
                except OSError as e:
                    raise ConsoleError(
                        f"the emulator console asks for the token in {token_path}, which cannot be read: {e}"
                    ) from None
                sock.sendall(f"auth {token}\r\n".encode())
                _read_reply(reader)
            sock.sendall(f"{command}\r\n".encode())
            return _read_reply(reader)
    except (OSError, TimeoutError) as e:
        raise ConsoleError(f"emulator console on port {port}: `{command}` failed: {type(e).__name__}: {e}") from e


def _read_reply(reader) -> str:
    lines = []
    while True:
        raw = reader.readline()
        if not raw:
            raise ConsoleError("the emulator console closed the connection")
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line == "OK":
            return "\n".join(lines)
        if line.startswith("KO"):
            raise ConsoleError(line[3:].strip() or "KO")
        lines.append(line)


class EmulatorPool:
    """Starts, leases, health-checks and restarts the emulators of one machine."""

    def __init__(self, cfg: AndroidConfig, log_dir: str | os.PathLike | None = None):
        self.cfg = cfg
        self.log_dir = Path(log_dir) if log_dir else None
        self.emulators: list[Emulator] = []
        self.attached = {serial: False for serial in cfg.devices}  # devices we did not start: serial -> leased
        self.restarts = 0
        self._binary: str | None = None
        self._lock = threading.Lock()  # a pool actor serves several runners at once

    # ------------------------------------------------------------------ setup

    def check(self) -> None:
        """Everything a start needs, as one clear EnvSetupError."""
        if self.cfg.devices:
            return
        self._binary = find_emulator_binary(self.cfg)
        check_kvm(self.cfg.kvm_device)
        env = {**os.environ, **self.cfg.emulator_env}  # as the emulators will see it (ANDROID_AVD_HOME, HOME)
        listed = subprocess.run([self._binary, "-list-avds"], capture_output=True, text=True, timeout=60, env=env)
        avds = listed.stdout.split()
        if self.cfg.avd not in avds:
            raise EnvSetupError(
                f"env.android.avd: no AVD named {self.cfg.avd!r} (this emulator knows {avds}); create it as shown "
                "in README: Creating the AVD and its snapshot"
            )

    def _adb(self):
        import adbutils

        return adbutils.AdbClient(host="127.0.0.1", port=self.cfg.adb_server_port, socket_timeout=10)

    def _ensure_adb_server(self) -> None:
        import adbutils

        if port_free(self.cfg.adb_server_port):
            subprocess.run(
                [adbutils.adb_path(), "-P", str(self.cfg.adb_server_port), "start-server"],
                capture_output=True,
                timeout=30,
            )

    # ------------------------------------------------------------------ start and stop

    def start(self, n: int, leased: bool = False) -> list[Emulator]:
        """Start `n` more emulators at once and wait until all have booted."""
        with self._lock:  # ports are chosen and taken one caller at a time
            if self._binary is None:
                self.check()
            self._ensure_adb_server()
            started = [self._launch(self._new_slot()) for _ in range(n)]
            for emulator in started:
                emulator.leased = leased
        try:
            self._wait_booted(started)
        except Exception:
            for emulator in started:
                emulator.leased = False  # stopped; the next acquire starts it again
            raise
        return started

    def _new_slot(self) -> Emulator:
        """The next console/adb port pair that no process listens on (someone else's emulator included)."""
        if len(self.emulators) >= self.cfg.max_emulators:
            raise EnvSetupError(f"env.android.max_emulators = {self.cfg.max_emulators} emulators already run here")
        used = {e.console_port for e in self.emulators}
        for port in range(self.cfg.first_console_port, _LAST_CONSOLE_PORT + 1, 2):
            if port not in used and port_free(port) and port_free(port + 1):
                emulator = Emulator(console_port=port)
                self.emulators.append(emulator)
                return emulator
        raise EnvSetupError(
            f"no free console/adb port pair from env.android.first_console_port = {self.cfg.first_console_port} "
            f"up to {_LAST_CONSOLE_PORT}"
        )

    def _launch(self, emulator: Emulator) -> Emulator:
        cfg = self.cfg
        argv = [
            self._binary,
            *("-avd", cfg.avd, "-port", str(emulator.console_port)),
            *("-read-only", "-no-window", "-no-audio", "-no-boot-anim", "-no-snapshot-save"),
            *("-snapshot", cfg.snapshot),
            *cfg.emulator_args,
        ]
        env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(cfg.adb_server_port), **cfg.emulator_env}
        out = subprocess.DEVNULL
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            emulator.log_path = self.log_dir / f"emulator-{emulator.console_port}.log"
            out = open(emulator.log_path, "ab")
        try:
            emulator.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        emulator.starts += 1
        log.info("started %s (pid %d)", emulator.serial, emulator.process.pid)
        return emulator

    def _wait_booted(self, emulators: list[Emulator]) -> None:
        """Poll every emulator until `sys.boot_completed` is 1: they boot concurrently."""
        deadline = time.monotonic() + self.cfg.boot_timeout_s
        waiting = list(emulators)
        while waiting:
            for emulator in list(waiting):
                if emulator.process.poll() is not None:
                    self._stop(emulator)
                    raise EnvSetupError(
                        f"{emulator.serial} exited with code {emulator.process.returncode} while booting"
                        + (f"; its log: {emulator.log_path}" if emulator.log_path else "")
                    )
                if self._boot_completed(emulator.serial):
                    waiting.remove(emulator)
            if waiting and time.monotonic() > deadline:
                for emulator in waiting:
                    self._stop(emulator)
                names = [e.serial for e in waiting]
                raise EnvSetupError(
                    f"{names} did not boot within env.android.boot_timeout_s={self.cfg.boot_timeout_s:g}"
                )
            if waiting:
                time.sleep(0.2)

    def _answers(self, serial: str, argv: list[str], expected: str, timeout_s: float) -> bool:
        try:
            return run_shell(self._adb(), serial, argv, timeout_s).decode(errors="replace").strip() == expected
        except Exception:  # not on the adb server (yet), or not answering
            return False

    def _boot_completed(self, serial: str) -> bool:
        return self._answers(serial, ["getprop", "sys.boot_completed"], "1", 5.0)

    def _stop(self, emulator: Emulator) -> None:
        process = emulator.process
        if process is None or process.poll() is not None:
            return
        process.kill()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("%s (pid %d) did not exit after SIGKILL", emulator.serial, process.pid)

    def shutdown(self) -> None:
        for emulator in self.emulators:
            self._stop(emulator)

    # ------------------------------------------------------------------ leases

    def acquire(self) -> Lease:
        """A free device for one runner, starting an emulator when none is free."""
        with self._lock:
            for serial, leased in self.attached.items():
                if not leased:
                    self.attached[serial] = True
                    return Lease(serial)
            if self.cfg.devices:
                raise EnvBrokenError(f"all {len(self.cfg.devices)} devices of env.android.devices are in use")
            free = next((e for e in self.emulators if not e.leased), None)
            if free is not None:
                free.leased = True
        if free is None:
            return self._lease(self.start(1, leased=True)[0])
        if not self.healthy(free):
            try:
                self.restart(free)
            except Exception:
                free.leased = False
                raise
        return self._lease(free)

    def _lease(self, emulator: Emulator) -> Lease:
        return Lease(emulator.serial, emulator.console_port, self.cfg.snapshot, self.cfg.console_token_file)

    def release(self, serial: str, broken: bool = False) -> None:
        """Hand a device back; one that broke is restarted before anyone gets it again."""
        if serial in self.attached:
            self.attached[serial] = False
            return
        emulator = next((e for e in self.emulators if e.serial == serial), None)
        if emulator is None:
            raise KeyError(f"{serial} is not an emulator of this pool")
        try:
            if broken or not self.healthy(emulator):
                self.restart(emulator)
        finally:
            emulator.leased = False  # a failed restart leaves it stopped: the next acquire starts it again

    def healthy(self, emulator: Emulator) -> bool:
        """The process runs and the device answers a shell command in time."""
        if emulator.process is None or emulator.process.poll() is not None:
            return False
        return self._answers(emulator.serial, ["echo", "ok"], "ok", self.cfg.health_timeout_s)

    def restart(self, emulator: Emulator) -> None:
        """Stop a crashed or hung emulator and start it again on the same ports."""
        self.restarts += 1
        log.warning("restarting %s (restart %d)", emulator.serial, self.restarts)
        self._stop(emulator)
        deadline = time.monotonic() + 30
        while not (port_free(emulator.console_port) and port_free(emulator.adb_port)):
            if time.monotonic() > deadline:
                raise EnvSetupError(f"ports {emulator.console_port}/{emulator.adb_port} stayed busy after a restart")
            time.sleep(0.2)
        self._wait_booted([self._launch(emulator)])

    def status(self) -> list[dict]:
        return [
            {
                "serial": e.serial,
                "pid": e.pid,
                "leased": e.leased,
                "starts": e.starts,
                "alive": e.process is not None and e.process.poll() is None,
            }
            for e in self.emulators
        ]


def load_snapshot(lease: Lease, timeout_s: float) -> None:
    """Reset a leased emulator to its snapshot through the console."""
    if lease.console_port is None:
        raise ValueError(f"{lease.serial} was not started by the pool: it has no snapshot to load")
    reply = console_command(lease.console_port, f"avd snapshot load {lease.snapshot}", lease.token_file, timeout_s)
    if "error" in reply.lower() or "fail" in reply.lower():
        raise ConsoleError(f"loading snapshot {lease.snapshot!r} on {lease.serial}: {reply.strip()}")


def check_local_setup(cfg) -> None:
    """Before Ray starts, on a run that starts its own Ray: the SDK, KVM and the AVD this machine's
    emulators need, as a ConfigError naming the key to fix. (Cluster nodes are checked where they run.)"""
    from rlsys.config import ConfigError

    if cfg.env.kind != "android" or cfg.ray.address or cfg.env.android.devices:
        return
    try:
        EmulatorPool(cfg.env.android).check()
    except EnvSetupError as e:
        raise ConfigError(str(e)) from None
