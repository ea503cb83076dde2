import functools
import os
import shutil
import signal
import tempfile
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# scripts/test.sh runs the suite on pytest-xdist workers. Each gets a temp folder of its own, which every process it
# starts inherits (Ray, which keeps its sessions there, and Chromium, which keeps TMPDIR): a test that looks at all
# of the machine's processes leaves out those it can tell another worker started (`started_here`), and no Ray finds
# another worker's session.
# (Short: Ray's socket paths beneath it are near the 107-byte limit. Tests import this module a second time, as
# tests.conftest, which finds the folder set.)
if (_WORKER := os.environ.get("PYTEST_XDIST_WORKER")) and os.path.basename(tempfile.gettempdir()) != f"rlsys-{_WORKER}":
    os.environ["TMPDIR"] = os.path.join(tempfile.gettempdir(), f"rlsys-{_WORKER}")
    os.makedirs(os.environ["TMPDIR"], exist_ok=True)
    tempfile.tempdir = None

import pytest

from rlsys.config import load_config


def _chromium_paths():
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return chromium, driver


def make_config(tmp_path, **overrides):
    """A small, fast config for tests; `section__key=value` keyword overrides."""
    chromium, driver = _chromium_paths()
    data = {
        "run": {
            "name": "test",
            "output_dir": str(tmp_path / "run"),
            "iterations": 2,
            "rollout_size": 4,
            "eval_every": 0,
            "eval_at_start": False,
            "checkpoint_every": 1,
            "episode_timeout_s": 120,
        },
        "ray": {"dashboard": False},
        "runners": {"num": 2, "num_cpus": 0.25},
        "env": {"max_steps": 3, "viewport": [400, 400], "chromium": chromium, "chromedriver": driver},
        "tasks": {"train": ["click-test-2", "click-tab"]},
        "policy": {"d_model": 32, "d_ff": 64, "num_heads": 2},
        "learner": {"updates_per_iteration": 2, "batch_size": 8, "num_cpus": 0.25},
        "metrics": {"progress": False},
    }
    for key, value in overrides.items():
        section, name = key.split("__")
        data.setdefault(section, {})[name] = value
    return load_config(None, data=data)


# make_config overrides for runs whose subject is the driver's loop, not the browser: the simulated env (no
# Chromium to start in each runner), its observations shaped as the web env's
SIMULATED_ENV = {
    "env__kind": "sim",
    "env__sim": {"reset_median_s": 0.05, "step_median_s": 0.05, "step_sigma": 0.0, "success_prob": 0.5},
    "runners__resource": "browser",
}

FAKE_ACCESS_KEY = "AKIDSTUBEXAMPLE0000"


@pytest.fixture
def stub_api_env(monkeypatch, tmp_path):
    """Hosted-model clients that reach only the local stubs: no proxy for 127.0.0.1, fake AWS
    credentials through the standard chain (no real profile, file or instance role is consulted),
    and no API key from the caller's environment."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "stub-secret-access-key")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("OPENAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def ray_session():
    import ray
    from ray._private import parameter

    from rlsys.driver.ray_init import SUBREAPER, bind_to_loopback

    os.environ.setdefault(SUBREAPER, "true")
    bind_to_loopback()
    # Ray's dashboard agent listens on 52365 unless told otherwise, which ray.init cannot do. Held by this
    # session's Ray, the port would cost every Ray a test starts in a child process (rlsys-train) ~4 s: its agent
    # retries the taken port before giving up, and its raylet waits for the agent. This one takes a free port.
    agent_on_a_free_port = functools.partial(parameter.RayParams, dashboard_agent_listen_port=None)
    with mock.patch.object(parameter, "RayParams", agent_on_a_free_port):
        ray.init(num_cpus=2, resources={"browser": 8, "android": 4}, include_dashboard=False, log_to_driver=False)
    # Ray's driver ignores SIGCHLD (set below Python, so signal.getsignal does not show it): children are
    # reaped by the kernel and every subprocess exit code reads 0. Tests that check exit codes need them.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    yield ray
    ray.shutdown()


def started_here(process) -> bool:
    """False only for a psutil process seen to be another pytest-xdist worker's: by its TMPDIR, or by that of the
    nearest process above it that has one (Chromium's zygote starts its renderers without any environment)."""
    import psutil

    if not _WORKER:
        return True
    try:
        for p in (process, *process.parents()):
            if (folder := p.environ().get("TMPDIR")) is not None:
                return folder == os.environ["TMPDIR"]
    except psutil.Error:
        pass
    return True  # not known to be another's: counted, so that a leak is never hidden


def browsers_started_after(t0: float) -> list:
    """Chromium/chromedriver processes created after `t0` that are still running, other than another worker's."""
    import psutil

    alive = []
    for p in psutil.process_iter(["name", "create_time", "status"]):
        info = p.info
        if info["name"] and "chrom" in info["name"] and info["create_time"] >= t0 and info["status"] != "zombie":
            if started_here(p):
                alive.append(p.pid)
    return alive


def assert_no_browsers_left(t0: float, timeout: float = 15.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while browsers_started_after(t0) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not browsers_started_after(t0), f"browsers outlived the run: {browsers_started_after(t0)}"


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium that logs every request the page makes (the run report's pages are checked in it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = _chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--disable-background-networking",
        "--disable-component-update",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    driver.network_log = []  # every performance entry, kept across tests (reading the log drains it)
    yield driver
    driver.quit()


def load(driver, path):
    """Open the file at `path` in the `browser` fixture's Chromium, keeping the requests it made."""
    driver.get(path.as_uri())
    driver.network_log += driver.get_log("performance")
    return driver


SITE_DIR = os.path.join(os.path.dirname(__file__), "site")
MINIMAL_PDF = (
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj 2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj "
    b"3 0 obj<</Type/Page/MediaBox[0 0 200 200]/Parent 2 0 R>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
)


@pytest.fixture(scope="session")
def site():
    """The pages in tests/site served on 127.0.0.1, plus a slow endpoint and downloads."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path.split("?")[0]
            headers = {"Content-Type": "text/html; charset=utf-8"}
            if path == "/slow":
                time.sleep(0.4)
                body, headers = b"loaded slowly", {"Content-Type": "text/plain"}
            elif path in ("/file.bin", "/big.bin"):
                body = b"x" * (1000 if path == "/file.bin" else 2_000_000)
                headers = {"Content-Type": "application/octet-stream", "Content-Disposition": "attachment"}
            elif path == "/doc.pdf":
                body, headers = MINIMAL_PDF, {"Content-Type": "application/pdf"}
            else:
                file = os.path.join(SITE_DIR, os.path.basename(path) or "actions.html")
                if not os.path.isfile(file):
                    self.send_error(404)
                    return
                with open(file, "rb") as f:
                    body = f.read().replace(b"PORT", str(self.server.server_port).encode())
            self.send_response(200)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


# ---------------------------------------------------------------------------------- Android


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def adb_server():
    """A real adb server (the one adbutils bundles) on a private port; its port."""
    import subprocess

    import adbutils

    port = _free_port()
    subprocess.run([adbutils.adb_path(), "-P", str(port), "start-server"], check=True, capture_output=True, timeout=60)
    yield port
    subprocess.run([adbutils.adb_path(), "-P", str(port), "kill-server"], capture_output=True, timeout=60)


@pytest.fixture
def fake_phone(adb_server):
    """A fake device attached to the real adb server: (device, daemon, serial)."""
    import adbutils

    from tests.fake_android.device import AdbDaemon, FakeDevice

    device = FakeDevice()
    daemon = AdbDaemon(device)
    client = adbutils.AdbClient(host="127.0.0.1", port=adb_server)
    client.connect(daemon.address, timeout=10)
    client.wait_for(daemon.address, timeout=10)
    yield device, daemon, daemon.address
    daemon.close()
    try:
        client.disconnect(daemon.address)
    except Exception:
        pass


@pytest.fixture
def fake_sdk(tmp_path, adb_server):
    """An Android SDK folder whose emulator/emulator is the fake emulator, and the AndroidConfig keys that
    point the pool at it (a private HOME for the console token, the private adb server)."""
    import sys
    from pathlib import Path

    sdk = tmp_path / "sdk"
    (sdk / "emulator").mkdir(parents=True)
    script = Path(__file__).parent / "fake_android" / "emulator.py"
    binary = sdk / "emulator" / "emulator"
    binary.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    binary.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".emulator_console_auth_token").write_text("fake-console-token")  # before several fakes race to write it
    return {
        "sdk_root": str(sdk),
        "adb_server_port": adb_server,
        "kvm_device": "",
        "console_token_file": str(home / ".emulator_console_auth_token"),
        "emulator_env": {
            "HOME": str(home),
            "FAKE_EMULATOR_BOOT_S": "0.5",
            "FAKE_EMULATOR_LOG": str(tmp_path / "emu.jsonl"),
        },
        "first_console_port": 5600,
        "boot_timeout_s": 30.0,
        "health_timeout_s": 3.0,
    }


@pytest.fixture(scope="module")
def s3():
    """A real S3-protocol server on 127.0.0.1 (tests/support/s3_server.py) with a bucket named `bucket`, this process's
    AWS variables pointing at it; yields those variables for a child process's environment."""
    from tests.support.s3_server import s3_server

    with s3_server() as variables:
        yield variables
