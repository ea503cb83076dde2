"""The element list on real pages nobody here wrote: Python's and Sphinx's documentation as Debian ships them
(`scripts/setup.sh --test` installs them), served on 127.0.0.1.

The ground truth comes from the browser, not from the env's script: every link with text a person can see,
i.e. one of its client rects meets the viewport and a hit test at that rect's centre lands on the link."""

import os
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rlsys.core.types import Task
from rlsys.envs.web.webenv import WebEnv
from tests.envs.web.test_env_web import web_config

SITES = {"python": Path("/usr/share/doc/python3.11/html"), "sphinx": Path("/usr/share/doc/sphinx-doc/html")}
PAGES = [
    ("python", "index.html"),  # a table of contents
    ("python", "library/json.html"),  # links whose text sits in <code> and <span>
    ("python", "library/index.html"),  # long link lists, links wrapping onto two lines
    ("python", "tutorial/controlflow.html"),
    ("sphinx", "usage/configuration.html"),
]

VISIBLE_LINKS = """
const norm = (s) => (s || "").replace(/\\s+/g, " ").trim();
const out = [];
for (const a of document.querySelectorAll("a[href]")) {
  const text = norm(a.innerText) || norm([...a.querySelectorAll("img")].map((i) => i.alt).join(" "));
  if (!text) continue;
  for (const r of a.getClientRects()) {
    const x = (Math.max(r.left, 0) + Math.min(r.right, innerWidth)) / 2;
    const y = (Math.max(r.top, 0) + Math.min(r.bottom, innerHeight)) / 2;
    if (r.right <= 0 || r.left >= innerWidth || r.bottom <= 0 || r.top >= innerHeight) continue;
    const hit = document.elementFromPoint(x, y);
    if (hit && (hit === a || a.contains(hit))) { out.push({href: a.href, text}); break; }
  }
}
return out;
"""


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def doc_sites():
    missing = [str(root) for root in SITES.values() if not root.is_dir()]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"documentation sites missing in CI: {missing}; scripts/setup.sh --test installs them")
        pytest.skip(f"documentation sites not installed ({missing}): run scripts/setup.sh --test")
    servers = {
        name: ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(root))) for name, root in SITES.items()
    }
    for server in servers.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {name: f"http://127.0.0.1:{server.server_port}" for name, server in servers.items()}
    for server in servers.values():
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    env = WebEnv(web_config(tmp_path_factory.mktemp("real"), action_space="pae", max_elements=200))
    yield env
    env.close()


@pytest.mark.parametrize("site,path", PAGES)
def test_every_visible_link_is_listed_with_its_whole_text(env, doc_sites, site, path):
    for view in ("top", "scrolled"):
        if view == "top":
            obs = env.reset(Task(id=path, instruction="read", suite="webvoyager", start=f"{doc_sites[site]}/{path}"))
        else:
            obs = env.step("Thought: read on.\nAction: Scroll [WINDOW]; [down]").observation
        links = env.driver.execute_script(VISIBLE_LINKS)
        assert len(links) >= 5, f"{path} ({view}): the ground truth found only {links}"
        listed = {(e["href"], e["text"]) for e in obs.extras["elements"] if e["tag"] == "a"}
        missed = [link for link in links if (link["href"], link["text"][:80]) not in listed]
        assert not missed, f"{path} ({view}): {len(missed)} of {len(links)} visible links not listed: {missed[:5]}"
        nameless = [e for e in obs.extras["elements"] if not e["text"].strip()]
        assert not nameless, f"{path} ({view}): elements without a name: {nameless[:5]}"
