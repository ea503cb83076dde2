"""Web confinement: every request the browser makes is allowed or refused before it is sent, by origin.

Chromium sends all of its traffic, loopback included (`--proxy-bypass-list=<-loopback>`), through a small
HTTP proxy that the env owns on 127.0.0.1. The proxy is the decision point, not the page's URL afterwards:

- It sees every request of the network stack whatever started it (a link, a redirect, a meta refresh,
  `window.open`, a form post, an image, an iframe, `fetch`, a WebSocket, a service worker, a preconnect)
  and sees it as the browser parsed it: `GET http://host:port/path` or `CONNECT host:port`, already
  canonical, so a URL that Python and Chromium would read differently (a backslash, userinfo, odd IPv4
  forms) reaches the decision in the browser's reading.
- It makes the connection itself, to the address it checked, so a name that resolves to a forbidden
  address is refused too (no window between checking and connecting for DNS to change its answer).
- A refused request gets a 403 from the proxy and never reaches a socket of its destination.

Chosen over CDP Fetch interception, which chromedriver does not expose (its events need a second
DevTools connection), which must be enabled in every new target before it runs (a race for each new tab,
frame and worker), which does not see WebSockets, preconnects or DNS lookups, and which decides on the
name without knowing the address. The proxy costs nothing for file:// pages (MiniWoB++) and one
local hop for http(s).

The policy, by origin (scheme, host, port; a missing port is the scheme's default):
- allowed: the task's start origin, `env.allowed_origins` (exact origins), `env.allowed_domains` (those
  hosts and their subdomains, on the default ports 80 and 443), and the search engine's origin while those
  two name no origin and no domain (`webenv.episode_policy`);
- with `env.allow_all_domains`, also any host whose every address is public;
- refused otherwise, in particular link-local (169.254.0.0/16, fe80::/10), loopback and private addresses,
  other ports of an allowed host, and every non-http(s) scheme, unless `env.allowed_origins` names them.
A name admitted by `allowed_domains` or `allow_all_domains` must resolve to public addresses only; an
exact origin (the task's, or one in `env.allowed_origins`) may be on any address, loopback included.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
MAX_RECORDED = 50  # refusals kept between two reads; the rest are only counted
_HEAD_LIMIT = 64 * 1024
_CONNECT_TIMEOUT_S = 10.0
# stripped from requests and responses: the proxy forwards one request per connection and says so
_HOP_BY_HOP = {b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization", b"proxy-authenticate"}
_SPECIAL = ("http", "https", "ws", "wss", "ftp", "file")
_TAB_NEWLINE = re.compile(r"[\t\n\r]")

Origin = tuple[str, str, int]  # scheme, host (lower case, IPv6 without brackets), port


def browser_split(url: str):
    """`urlsplit` of `url` as Chromium reads it (the WHATWG URL standard) where the two differ: tabs and
    newlines removed, leading and trailing C0 controls and spaces stripped, and in special schemes a
    backslash is a slash (`http://a\\@b/` is host a to a browser, host b to `urlsplit`)."""
    url = _TAB_NEWLINE.sub("", url).strip(
        "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f"
        "\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f "
    )
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in _SPECIAL:
        url = url.replace("\\", "/")
    return urlsplit(url)


def origin_of(url: str) -> Origin | None:
    """(scheme, host, port) of an http(s)/ws(s) URL as the browser reads it; None for other schemes, a URL
    without a host, or one with userinfo (which no task needs and which hides the host from a reader)."""
    try:
        parts = browser_split(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or "@" in parts.netloc:
        return None
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def parse_origin(text: str) -> Origin:
    """An `env.allowed_origins` entry: `scheme://host[:port]`, nothing after it; ValueError otherwise."""
    origin = origin_of(text)
    parts = urlsplit(text)
    if origin is None or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{text!r} is not an origin (scheme://host[:port] with scheme http or https)")
    return origin


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def is_public(address) -> bool:
    """An address anyone on the internet could reach: not loopback, link-local, private, shared or reserved."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


@dataclass(frozen=True)
class Policy:
    """Which origins the browser may reach during one episode (see the module's docstring)."""

    origins: frozenset[Origin] = frozenset()
    domains: tuple[str, ...] = ()
    public: bool = False  # env.allow_all_domains

    def by_name(self, scheme: str | None, host: str, port: int) -> str:
        """ "origin" (an exact origin), "name" (a domain or any public name: its addresses must be public),
        or "" (refused). `scheme` None is a CONNECT tunnel, which carries https or a WebSocket: it may
        reach the host and port of any allowed origin."""
        host = host.lower().strip("[]")
        if any(h == host and p == port and (scheme is None or s == scheme) for s, h, p in self.origins):
            return "origin"
        address = _address(host)
        if port in (80, 443) and any(host == d or host.endswith("." + d) for d in self.domains):
            return "name"
        if self.public and (address is None or is_public(address)):
            return "name"
        return ""

    def allows_url(self, url: str) -> bool:
        """Whether a page may be on `url` (http(s) only; other schemes are the env's to decide)."""
        origin = origin_of(url)
        if origin is None:
            return False
        kind = self.by_name(*origin)
        return kind == "origin" or (kind == "name" and ((a := _address(origin[1])) is None or is_public(a)))


class ConfinementProxy:
    """The filtering proxy (see the module's docstring), on 127.0.0.1 in a thread of its own.

    `policy` may be replaced at any time (at each reset); `drain()` returns and forgets the refusals
    since the last call, each {"url", "reason"}, at most MAX_RECORDED, the rest counted in `dropped`."""

    def __init__(self, policy: Policy | None = None):
        self.policy = policy or Policy()
        self._lock = threading.Lock()
        self._refused: list[dict] = []
        self._dropped = 0
        self._loop = asyncio.new_event_loop()
        self._tasks: set[asyncio.Task] = set()
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="rlsys-confinement", daemon=True)
        self._thread.start()
        started.wait()
        self.address = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0, limit=_HEAD_LIMIT, backlog=256)
        )
        started.set()
        self._loop.run_forever()

    def drain(self) -> tuple[list[dict], int]:
        with self._lock:
            refused, dropped = self._refused, self._dropped
            self._refused, self._dropped = [], 0
        return refused, dropped

    def close(self) -> None:
        if not self._loop.is_running():
            return

        async def stop():
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._loop.stop()

        asyncio.run_coroutine_threadsafe(stop(), self._loop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    # -- the proxy ------------------------------------------------------------------------

    def _refuse(self, url: str, reason: str) -> None:
        with self._lock:
            if len(self._refused) < MAX_RECORDED:
                self._refused.append({"url": url[:500], "reason": reason})
            else:
                self._dropped += 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        opened: list[asyncio.StreamWriter] = [writer]
        try:
            await self._one_request(reader, writer, opened)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, asyncio.TimeoutError):
            pass
        finally:
            self._tasks.discard(task)
            for w in opened:
                w.close()

    async def _one_request(self, reader, writer, opened: list) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line, _, headers = head.partition(b"\r\n")
        method, target, version = line.decode("latin-1").split(" ")
        if method == "CONNECT":
            host, _, port_text = target.rpartition(":")
            scheme, port, path, url = None, int(port_text), "", f"https://{target}"
        else:
            parts = urlsplit(target)
            scheme, host, port = parts.scheme.lower(), parts.hostname or "", parts.port
            port = port or DEFAULT_PORTS.get(scheme, 0)
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            url = target
        kind = self.policy.by_name(scheme, host, port) if scheme in (None, "http") else ""
        if not kind:
            return self._deny(writer, url, "origin not allowed")
        host = host.strip("[]")
        infos = await self._loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = [info[4][0] for info in infos]
        if kind == "name" and not all(is_public(ipaddress.ip_address(a.split("%")[0])) for a in addresses):
            return self._deny(writer, url, "name resolves to a non-public address")
        up_reader, upstream = await asyncio.wait_for(
            asyncio.open_connection(addresses[0], port, limit=_HEAD_LIMIT), _CONNECT_TIMEOUT_S
        )
        opened.append(upstream)
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            upstream.write(f"{method} {path} {version}\r\n".encode("latin-1") + _end_to_end(headers))
        upward = asyncio.ensure_future(_pipe(reader, upstream))  # a request body goes up while the answer is awaited
        try:
            if method != "CONNECT":
                await self._response_head(up_reader, writer)
            await _pipe(up_reader, writer)
            if method != "CONNECT":  # the answer is complete: nothing more of the browser's belongs upstream
                upward.cancel()
            await asyncio.gather(upward, return_exceptions=True)
        finally:
            upward.cancel()

    def _deny(self, writer, url: str, reason: str) -> None:
        self._refuse(url, reason)
        body = b"Refused by the environment's web confinement.\n"
        writer.write(
            b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    async def _response_head(self, up_reader, writer) -> None:
        """Forward the response's head(s) saying `Connection: close`, so the browser never sends a second
        request, perhaps for another origin, down a connection that was checked for this one."""
        while True:
            head = await up_reader.readuntil(b"\r\n\r\n")
            status, _, headers = head.partition(b"\r\n")
            code = status.split(b" ", 2)[1] if status.count(b" ") else b""
            if code.startswith(b"1") and code != b"101":  # 100 Continue, 103 Early Hints: a final one follows
                writer.write(head)
                continue
            writer.write(status + b"\r\n" + _end_to_end(headers))
            return


def _end_to_end(headers: bytes) -> bytes:
    """The header block (ending in a blank line) without hop-by-hop fields, with `Connection: close`."""
    kept = [h for h in headers.split(b"\r\n") if h and h.split(b":", 1)[0].strip().lower() not in _HOP_BY_HOP]
    return b"\r\n".join([*kept, b"Connection: close", b"", b""])


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.CancelledError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except OSError:
            pass
