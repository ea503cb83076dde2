"""Real documentation sites from Debian's documentation packages, served on 127.0.0.1.

The packages (python3.11-doc, sphinx-doc, git-doc, debian-reference-en, bash-doc, sqlite3-doc)
install static HTML under standard Debian locations. Each site names a few pages of different
kinds: a table of contents, a long reference, a tutorial, a search page where the site has one,
and an index of many links. A site whose root is missing is skipped with a note.
"""

from __future__ import annotations

import gzip
import io
import os
import threading
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass(frozen=True)
class Page:
    kind: str  # toc, reference, tutorial, search or index
    path: str  # relative to the site's root; may carry a ?query or a #fragment


@dataclass(frozen=True)
class Site:
    name: str
    root: Path
    pages: tuple[Page, ...]


SITES = (
    Site(
        "python",
        Path("/usr/share/doc/python3.11/html"),
        (
            Page("toc", "index.html"),
            Page("reference", "library/stdtypes.html"),
            Page("reference", "library/functions.html"),
            Page("tutorial", "tutorial/introduction.html"),
            Page("search", "search.html?q=dict"),
            Page("index", "genindex-A.html"),
        ),
    ),
    Site(
        "sphinx",
        Path("/usr/share/doc/sphinx-doc/html"),
        (
            Page("toc", "index.html"),
            Page("reference", "usage/configuration.html"),
            Page("tutorial", "tutorial/getting-started.html"),
            Page("search", "search.html?q=toctree"),
            Page("index", "genindex.html"),
        ),
    ),
    Site(
        "git",
        Path("/usr/share/doc/git/html"),
        (
            Page("toc", "user-manual.html"),
            Page("reference", "git-commit.html"),
            Page("tutorial", "gittutorial.html"),
            Page("index", "git.html"),
            Page("index", "howto-index.html"),
        ),
    ),
    Site(
        "debian-reference",
        Path("/usr/share/debian-reference"),
        (
            Page("toc", "index.en.html"),
            Page("tutorial", "ch01.en.html"),
            Page("reference", "ch02.en.html"),
            Page("reference", "ch12.en.html"),
        ),
    ),
    Site(
        "bash",
        Path("/usr/share/doc/bash-doc"),
        (
            Page("toc", "bashref.html"),
            Page("tutorial", "bashref.html#Shell-Syntax"),
            Page("reference", "bashref.html#Bourne-Shell-Builtins"),
            Page("index", "bashref.html#Builtin-Index"),
            Page("reference", "bash.html"),
        ),
    ),
    Site(
        "sqlite",
        Path("/usr/share/doc/sqlite3"),
        (
            Page("toc", "docs.html"),
            Page("search", "index.html"),  # its search form posts to a CGI the local copy lacks
            Page("reference", "capi3ref.html"),
            Page("tutorial", "quickstart.html"),
            Page("index", "lang.html"),
            Page("index", "keyword_index.html"),
        ),
    ),
)


def available_sites(names: list[str] | None = None) -> tuple[list[Site], list[Site]]:
    """The sites asked for (all by default) split into those whose root exists and those missing;
    prints a note for each missing one."""
    unknown = set(names or ()) - {site.name for site in SITES}
    if unknown:
        raise SystemExit(f"unknown sites {sorted(unknown)}; known: {[site.name for site in SITES]}")
    wanted = [site for site in SITES if not names or site.name in names]
    missing = [site for site in wanted if not site.root.is_dir()]
    for site in missing:
        print(f"skipping {site.name}: {site.root} is missing (install its Debian documentation package)")
    return [site for site in wanted if site not in missing], missing


class DocHandler(SimpleHTTPRequestHandler):
    """Static files (symlinks followed, as the OS opens them), quiet; a page shipped only as
    `X.html.gz` is served decompressed at `X.html`, since pages link to it by that name
    (python's whatsnew/changelog.html, for one)."""

    def send_head(self):
        path = self.translate_path(self.path)
        gzipped = path + ".gz"
        if path.endswith(".html") and not os.path.exists(path) and os.path.isfile(gzipped):
            with open(gzipped, "rb") as f:
                body = gzip.decompress(f.read())
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            return io.BytesIO(body)
        return super().send_head()

    def log_message(self, format, *args):
        pass


def serve(root: Path) -> tuple[ThreadingHTTPServer, str]:
    """Serve `root` on 127.0.0.1 on a free port, in a daemon thread; returns the server and its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(DocHandler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"
