"""env.download_max_mb is enforced while the bytes arrive: a real server on 127.0.0.1 streams a 50 MB attachment
in chunks, the env's Chromium downloads it through the confinement proxy, and the download is cancelled just
past the cap; the downloads folder never holds much more, the server stops sending, and the step's info says
what happened."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlsys.envs.web.webenv import WebEnv
from tests.envs.web.test_env_web import index_of, pae, task, web_config

TOTAL = 50_000_000
CHUNK = 64 * 1024
PAGE = b"""<!doctype html><body>
<a href="/stream.bin">Streamed</a> <a href="/announced.bin">Announced</a> <a href="/slow.bin">Slow</a>
</body>"""


class Streams(ThreadingHTTPServer):
    """Each attachment's bytes sent so far, and whether its response has ended (finished or cut off)."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.sent: dict[str, int] = {}
        self.ended: dict[str, threading.Event] = {}


class Handler(BaseHTTPRequestHandler):
    server: Streams

    def do_GET(self):
        if self.path == "/":
            self._answer(200, "text/html", PAGE)
        elif self.path in ("/stream.bin", "/announced.bin", "/slow.bin"):
            # announced.bin comes as slowly as slow.bin: its cancellation waits for Chromium's first progress
            # event, which a loaded machine once delayed past 16 chunks (the cap) at stream.bin's pace
            self._stream(self.path[1:], pause_s=0.005 if self.path == "/stream.bin" else 0.05)
        else:
            self._answer(404, "text/plain", b"")

    def _answer(self, code, kind, body):
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, name, pause_s):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Disposition", f"attachment; filename={name}")
        if name == "announced.bin":
            self.send_header("Content-Length", str(TOTAL))
        self.end_headers()
        sent, ended = self.server.sent, self.server.ended.setdefault(name, threading.Event())
        sent[name] = 0
        try:
            while sent[name] < TOTAL:
                self.wfile.write(b"x" * CHUNK)
                sent[name] += CHUNK
                time.sleep(pause_s)
        except OSError:
            pass  # the download was cancelled
        finally:
            ended.set()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def streams():
    server = Streams()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def env(tmp_path, streams):
    env = WebEnv(web_config(tmp_path, action_space="pae", download_max_mb=1.0))
    env.reset(task(f"http://127.0.0.1:{streams.server_port}", ""))
    yield env
    env.close()


class FolderSampler:
    """The largest the downloads folder got, read every 2 ms."""

    def __init__(self, folder):
        self.folder, self.peak, self._stop = folder, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.002):
            total = 0
            for path in self.folder.iterdir():
                try:
                    total += path.stat().st_size
                except FileNotFoundError:
                    pass
            self.peak = max(self.peak, total)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def download(env, streams, link, name):
    """Click `link` and wait until the server's response has ended; the step's info and the folder's peak."""
    sampler = FolderSampler(env.browser.downloads)
    result = env.step(pae(f"Click [{index_of(env, link)}]"))
    ended = streams.ended.setdefault(name, threading.Event()).wait(30)
    time.sleep(0.3)  # what Chromium still writes after the server's last byte
    return result.info, sampler.stop(), ended


def test_a_streamed_download_is_cancelled_as_it_passes_the_cap(env, streams):
    info, peak, ended = download(env, streams, "Streamed", "stream.bin")
    assert ended and streams.sent["stream.bin"] < 10_000_000, streams.sent  # Chromium hung up, long before 50 MB
    assert peak <= 2_000_000, f"the downloads folder held {peak} bytes with a 1 MB cap"
    downloads = info["downloads"] + env.step(pae("Wait")).info.get("downloads", [])
    (cancelled,) = [d for d in downloads if d["name"] == "stream.bin"]
    assert cancelled["removed"] == "cancelled while arriving: over the 1 MB cap" and not cancelled["complete"]
    assert 1_000_000 < cancelled["bytes"] <= 2_000_000
    assert list(env.browser.downloads.iterdir()) == []


def test_a_download_announced_over_the_cap_is_cancelled_before_its_body(env, streams):
    """Cancelled under the cap, where the size sampler cancels only once a partial file is past it (the test
    above): the cancellation came from the announced size."""
    info, peak, ended = download(env, streams, "Announced", "announced.bin")
    assert ended and streams.sent["announced.bin"] < 10_000_000, streams.sent
    assert peak <= 1_000_000
    downloads = info["downloads"] + env.step(pae("Wait")).info.get("downloads", [])
    (cancelled,) = [d for d in downloads if d["name"] == "announced.bin"]
    assert "cancelled while arriving" in cancelled["removed"] and cancelled["bytes"] <= 1_000_000


def test_a_download_still_arriving_at_the_next_reset_is_cancelled(tmp_path, streams):
    site = f"http://127.0.0.1:{streams.server_port}"
    env = WebEnv(web_config(tmp_path, action_space="pae", download_max_mb=100.0))
    try:
        env.reset(task(site, ""))
        env.step(pae(f"Click [{index_of(env, 'Slow')}]"))  # about 1.3 MB/s: under the cap for a while
        assert not streams.ended.setdefault("slow.bin", threading.Event()).is_set()
        env.reset(task(site, ""))
        assert streams.ended["slow.bin"].wait(10) and streams.sent["slow.bin"] < TOTAL
        time.sleep(0.3)
        assert list(env.browser.downloads.iterdir()) == []
    finally:
        env.close()
