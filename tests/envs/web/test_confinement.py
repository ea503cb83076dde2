"""Web confinement against hostile pages: a "task" server and an "other service" on another port of 127.0.0.1.

Whatever the page does (links, redirects, meta refresh, window.open, form posts, images, iframes, fetch,
WebSockets, URLs that Python and Chromium read differently), the other service must receive no request at
all, and every refusal is in the step's info. A link-local address is bound in a network namespace of the
test's own; nothing leaves this machine."""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlsys.envs.web.browser import Browser
from rlsys.envs.web.confinement import ConfinementProxy, Policy, origin_of
from rlsys.envs.web.webenv import WebEnv
from tests.envs.web.test_env_web import index_of, pae, task, web_config

SECRET = "RLSYS_TEST_PLANTED_SECRET"
HOSTILE = """<!doctype html><html><body>
  <a href="http://127.0.0.1:OTHER/link?from=link">Other link</a>
  <a href="/redirect">Redirecting link</a>
  <a href="/meta.html">Meta refresh</a>
  <button onclick="window.open('http://127.0.0.1:OTHER/popup')">Popup</button>
  <form action="http://127.0.0.1:OTHER/post" method="post"><input name="q" placeholder="Post it"></form>
  </body></html>"""
PAGES = {
    "/hostile.html": HOSTILE,
    "/meta.html": '<meta http-equiv="refresh" content="0; url=http://127.0.0.1:OTHER/meta"><p>moving</p>',
    "/subresources.html": """<!doctype html><html><body><p>pictures</p>
        <img src="http://127.0.0.1:OTHER/img.png"><iframe src="http://127.0.0.1:OTHER/frame.html"></iframe>
        <link rel="stylesheet" href="http://127.0.0.1:OTHER/style.css">
        <script>fetch("http://127.0.0.1:OTHER/fetch").catch(() => {});
          try { new WebSocket("ws://127.0.0.1:OTHER/ws"); } catch (e) {}</script></body></html>""",
    "/jump.html": "<script>location.href = 'http://127.0.0.1:OTHER/jumped';</script><p>jumping</p>",
}


class Recorder(BaseHTTPRequestHandler):
    """Serves PAGES; `/second.html` redirects to the other service from its second visit on."""

    def do_GET(self):
        self.server.seen.append(("GET", self.path))
        path = self.path.split("?")[0]
        if path == "/redirect":
            return self._redirect(f"http://127.0.0.1:{self.server.other}/redirected")
        if path == "/second.html":
            visits = sum(1 for _, p in self.server.seen if p == "/second.html")
            if visits > 1:
                return self._redirect(f"http://127.0.0.1:{self.server.other}/second-visit")
            return self._page('<a href="http://127.0.0.1:OTHER/away">Away</a>')
        self._page(PAGES.get(path, "<p>a page</p>"))

    def do_POST(self):
        self.server.seen.append(("POST", self.path))
        self._page("<p>posted</p>")

    def _redirect(self, url):
        self.send_response(302)
        self.send_header("Location", url)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _page(self, html):
        body = html.replace("OTHER", str(self.server.other)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def servers():
    """(task URL, task server, other service); each server's `seen` lists the requests it received."""
    made = [ThreadingHTTPServer(("127.0.0.1", 0), Recorder) for _ in range(2)]
    for server in made:
        server.seen, server.other = [], made[1].server_port
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{made[0].server_port}", made[0], made[1]
    for server in made:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def env(tmp_path_factory, servers):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SECRET, "do-not-leak-me")
        env = WebEnv(web_config(tmp_path_factory.mktemp("confined"), action_space="pae", search_engine=""))
    yield env
    env.close()


@pytest.fixture
def other(servers):
    servers[2].seen.clear()
    yield servers[2]
    assert servers[2].seen == [], "the other service was reached"


def refused(result) -> list[str]:
    return [r["url"] for r in result.info["blocked_requests"]]


@pytest.mark.parametrize(
    "action, reaches",
    [
        ("Click [{Other link}]", "/link?from=link"),
        ("Click [{Redirecting link}]", "/redirected"),
        ("Click [{Meta refresh}]", "/meta"),
        ("Click [{Popup}]", "/popup"),
        ("Type [{Post it}]; [typed secret]", "/post"),
    ],
)
def test_navigations_to_another_port_are_refused_before_they_are_sent(env, servers, other, action, reaches):
    site = servers[0]
    env.reset(task(site, "hostile.html"))
    label = action.split("{")[1].split("}")[0]
    result = env.step(pae(action.replace("{" + label + "}", str(index_of(env, label)))))
    time.sleep(0.3)  # anything that was going to arrive has arrived
    assert f"http://127.0.0.1:{other.server_port}{reaches}" in refused(result)
    assert result.observation.location.startswith(site)


def test_subresources_from_another_port_are_refused(env, servers, other):
    env.reset(task(servers[0], "subresources.html"))
    result = env.step(pae("Wait"))
    base = f"127.0.0.1:{other.server_port}"
    urls = refused(result)  # the refusals since the last observation: the reset's included
    for path in ("/img.png", "/frame.html", "/style.css", "/fetch"):
        assert f"http://{base}{path}" in urls
    assert f"https://{base}" in urls  # the WebSocket's tunnel


STUN = """const pc = new RTCPeerConnection({iceServers: [{urls: "stun:127.0.0.1:%d"}]});
pc.createDataChannel("x"); pc.createOffer().then((offer) => pc.setLocalDescription(offer));"""


def test_webrtc_sends_no_udp_around_the_proxy(env, servers):
    env.reset(task(servers[0], "hostile.html"))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        udp.settimeout(2.0)
        env.driver.execute_script(STUN % udp.getsockname()[1])
        with pytest.raises(TimeoutError):
            udp.recvfrom(2048)


def test_a_backslash_url_is_read_as_the_browser_reads_it(env, servers, other):
    site = servers[0]
    env.reset(task(site, "hostile.html"))
    url = f"http://127.0.0.1:{other.server_port}\\@{site.removeprefix('http://')}/"  # Python: the task's host
    result = env.step(pae(f"Goto [{url}]"))
    assert "not allowed" in result.info["action_error"] and result.observation.location == f"{site}/hostile.html"


def test_an_empty_search_engine_admits_no_host_with_a_trailing_dot(env, servers, other):
    env.reset(task(servers[0], "hostile.html"))
    result = env.step(pae(f"Goto [http://localhost.:{other.server_port}/dot]"))
    assert "not allowed" in result.info["action_error"]


def test_going_back_is_checked_again(env, servers, other):
    site = servers[0]
    env.reset(task(site, "second.html"))  # its second visit redirects to the other service
    result = env.step(pae(f"Click [{index_of(env, 'Away')}]"))
    assert result.observation.location == "about:blank"
    assert f"http://127.0.0.1:{other.server_port}/second-visit" in refused(result)


def test_a_new_episode_does_not_inherit_the_last_allowed_url(env, servers, other):
    site, task_server = servers[0], servers[1]
    env.reset(task(site, "hostile.html"))
    task_server.seen.clear()
    # the next task is on another origin (the same server, named otherwise); its page jumps away at once
    obs = env.reset(task(site.replace("127.0.0.1", "localhost"), "jump.html"))
    assert obs.location == "about:blank"  # not the last episode's page
    assert ("GET", "/hostile.html") not in task_server.seen


def test_an_action_is_not_delivered_to_a_page_that_went_somewhere_forbidden(env, servers, other):
    site = servers[0]
    env.reset(task(site, "hostile.html"))
    env.driver.execute_script("location.href = arguments[0]", f"http://127.0.0.1:{other.server_port}/while")
    time.sleep(0.3)
    result = env.step(pae("Scroll [WINDOW]; [down]"))
    assert "not allowed; nothing was done" in result.info["action_error"]
    assert result.observation.location == f"{site}/hostile.html"


def test_chromium_inherits_no_secret_from_the_environment(env):
    pids = env.pids()
    assert pids["chromium"]
    for pid in pids["chromedriver"] + pids["chromium"]:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        assert SECRET.encode() not in environ


# -- the proxy and its policy -----------------------------------------------------------------


def test_policy_by_origin():
    policy = Policy(frozenset({("http", "127.0.0.1", 7770)}), domains=("example.org",))
    assert policy.allows_url("http://127.0.0.1:7770/a") and not policy.allows_url("http://127.0.0.1:8265/")
    assert not policy.allows_url("https://127.0.0.1:7770/")  # another scheme, another origin
    assert policy.allows_url("https://www.example.org/") and not policy.allows_url("https://example.org:8443/")
    assert not policy.allows_url("http://127.0.0.1:8265\\@127.0.0.1:7770/")
    assert not policy.allows_url("http://user@127.0.0.1:7770/")
    assert not policy.allows_url("http://example.org./")
    open_web = Policy(public=True)
    assert open_web.allows_url("https://example.org/")
    for url in ("http://169.254.169.254/", "http://[fe80::1]/", "http://127.0.0.1/", "http://10.0.0.1/"):
        assert not open_web.allows_url(url)
    assert origin_of("  http://A.example:80/x") == ("http", "a.example", 80)


def ask(proxy: ConfinementProxy, request: bytes) -> bytes:
    host, port = proxy.address.split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(request)
        return sock.recv(4096)


def test_the_proxy_refuses_link_local_and_names_of_local_addresses_without_connecting():
    proxy = ConfinementProxy(Policy(public=True))
    try:
        assert ask(proxy, b"GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: x\r\n\r\n").startswith(
            b"HTTP/1.1 403"
        )
        assert ask(proxy, b"CONNECT [fe80::1]:443 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 403")
        assert ask(proxy, b"GET http://localhost:8265/ HTTP/1.1\r\nHost: localhost\r\n\r\n").startswith(b"HTTP/1.1 403")
        reasons = [r["reason"] for r in proxy.drain()[0]]
        assert reasons == ["origin not allowed", "origin not allowed", "name resolves to a non-public address"]
    finally:
        proxy.close()


LINK_LOCAL_PROBE = """
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
sys.path.insert(0, {root!r})
from rlsys.config import EnvConfig, build
from rlsys.core.types import Task
from rlsys.envs.web.webenv import WebEnv
seen = []
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.server is meta:
            seen.append(self.path)
        body = PAGE.encode() if self.path == "/start.html" else b"metadata"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
PAGE = '''<a href="http://169.254.169.254/link">Metadata</a><img src="http://169.254.169.254/img">
<iframe src="http://169.254.169.254/frame"></iframe><script>fetch("http://169.254.169.254/fetch")</script>'''
meta = ThreadingHTTPServer(("169.254.169.254", 80), H)
site = ThreadingHTTPServer(("127.0.0.1", 0), H)
for s in (meta, site):
    threading.Thread(target=s.serve_forever, daemon=True).start()
cfg = build(EnvConfig, dict(kind="web", action_space="pae", chromium={chromium!r}, chromedriver={driver!r},
                            search_engine=""), "env")
env = WebEnv(cfg)
try:
    env.reset(Task(id="t", instruction="", suite="webvoyager", start=f"http://127.0.0.1:{{site.server_port}}/start.html"))
    link = next(i for i, e in enumerate(env._elements) if "Metadata" in e["text"])
    steps = [env.step("Thought: t\\nAction: Click [%d]" % link),
             env.step("Thought: t\\nAction: Goto [http://169.254.169.254\\\\@127.0.0.1:%d/]" % site.server_port)]
    assert not any(r.info["parse_error"] for r in steps)
    assert "not allowed" in steps[1].info["action_error"]
    refused = [b["url"] for r in steps for b in r.info.get("blocked_requests", [])]
finally:
    env.close()
print(json.dumps({{"seen": seen, "refused": refused}}))
"""


def test_a_link_local_service_in_a_namespace_receives_nothing(tmp_path):
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if not (unshare and ip) or subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode:
        pytest.skip("no user and network namespaces here")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    script = tmp_path / "probe.py"
    script.write_text(
        LINK_LOCAL_PROBE.format(root=root, chromium=shutil.which("chromium"), driver=shutil.which("chromedriver"))
    )
    setup = f"{ip} link set lo up && {ip} addr add 169.254.169.254/32 dev lo && exec {sys.executable} {script}"
    proc = subprocess.run([unshare, "-rn", "sh", "-c", setup], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["seen"] == []  # the metadata service received nothing
    assert {"http://169.254.169.254/img", "http://169.254.169.254/fetch", "http://169.254.169.254/link"} <= set(
        report["refused"]
    )


def test_chromium_starts_without_background_traffic(tmp_path):
    seen = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(50)

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    seen.append(conn.recv(4096).split(b"\r\n")[0].decode())
                    conn.sendall(b"HTTP/1.1 403 No\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    recording = f"127.0.0.1:{server.getsockname()[1]}"
    browser = Browser(shutil.which("chromium"), shutil.which("chromedriver"), [800, 600], True, 30, recording)
    try:
        browser.driver.get("about:blank")
        time.sleep(6)
    finally:
        browser.close()
        server.close()
    assert seen == []  # no request the page did not cause reached the proxy
