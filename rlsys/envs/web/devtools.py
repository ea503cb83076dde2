"""One DevTools connection to Chromium, on the port it writes into its profile (DevToolsActivePort).

chromedriver forwards a DevTools command in one HTTP request of its own, with its checks of the page around it:
3.8 ms a round trip on a 2-core machine against 0.5 ms on this connection (benchmarks/README.md), and a web step
sends several. The env's page commands (actions, the screenshot, the page scripts after the first) therefore go
here, to a flattened session on the tab (TabSessions); chromedriver keeps what needs its waiting on page loads
(`get`, reading a page that is loading, leaving a page and clearing its state between episodes) and the tab's
own set-up. A reader thread takes the replies and
hands events to their listeners (`on`); listeners run on that thread and must not wait for a reply.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import websocket

# what a DevTools connection that cannot be made raises (a missing or torn DevToolsActivePort, a refused socket,
# a failed handshake, a refused command)
log = logging.getLogger(__name__)
CONNECTION_ERRORS = (OSError, ValueError, RuntimeError, websocket.WebSocketException)
REPLY_TIMEOUT_S = 10.0


class DevToolsError(RuntimeError):
    """Chromium refused a command (its message), or the connection is gone."""


class DevTools:
    def __init__(self, profile: Path):
        port, path = (profile / "DevToolsActivePort").read_text().split()[:2]
        self._ws = websocket.create_connection(
            f"ws://127.0.0.1:{port}{path}",
            suppress_origin=True,
            timeout=10,
            http_no_proxy=["127.0.0.1"],  # never through a proxy the caller's environment names
            skip_utf8_validation=True,  # JSON from Chromium; checking a screenshot's 300 KB in Python took 10 ms
        )
        self._ws.settimeout(None)
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._replies: dict[int, dict] = {}
        self._abandoned: set[int] = set()  # commands whose waiter gave up
        self._on_reply: dict[int, Callable[[dict], None]] = {}
        self._replied = threading.Condition()
        self._listeners: dict[str, list[Callable[[dict, str | None], None]]] = {}
        self.closed = threading.Event()
        threading.Thread(target=self._read, name="rlsys-devtools", daemon=True).start()

    def on(self, method: str, listener: Callable[[dict, str | None], None]) -> None:
        """Call `listener(params, session)` on the reader thread for every `method` event."""
        self._listeners.setdefault(method, []).append(listener)

    def send(self, method: str, session: str | None = None, on_reply: Callable[[dict], None] | None = None, **params):
        """Send a command without waiting; its id. `on_reply(reply)` runs on the reader thread if given, and the
        reply is then not kept for `wait`."""
        ident = next(self._ids)
        message = {"id": ident, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        if on_reply:
            self._on_reply[ident] = on_reply
        try:
            with self._send_lock:
                self._ws.send(json.dumps(message))
        except (websocket.WebSocketException, OSError) as e:
            self._on_reply.pop(ident, None)
            raise DevToolsError(f"{method}: the DevTools connection is gone ({type(e).__name__}: {e})") from None
        return ident

    def wait(self, ident: int, method: str = "the command", timeout_s: float = REPLY_TIMEOUT_S) -> dict:
        """The result of the command sent as `ident`. DevToolsError where Chromium refused it or the connection is
        gone, TimeoutError where no reply came within `timeout_s`."""
        with self._replied:
            if not self._replied.wait_for(lambda: ident in self._replies or self.closed.is_set(), timeout_s):
                self._abandoned.add(ident)  # a reply that comes after all is not kept
                raise TimeoutError(f"no reply from Chromium to {method} within {timeout_s:g} s")
            reply = self._replies.pop(ident, {"error": {"message": "the DevTools connection closed"}})
        if "error" in reply:
            error = reply["error"]
            raise DevToolsError(f"{method}: {error.get('message', error) if isinstance(error, dict) else error}")
        return reply.get("result", {})

    def call(self, method: str, session: str | None = None, timeout_s: float = REPLY_TIMEOUT_S, **params) -> dict:
        return self.wait(self.send(method, session, **params), method, timeout_s)

    def attach(self, target_id: str) -> str:
        """A flattened session on the target (a tab's id is its WebDriver window handle)."""
        return self.call("Target.attachToTarget", targetId=target_id, flatten=True)["sessionId"]

    def _read(self) -> None:
        try:
            while message := self._ws.recv():
                message = json.loads(message)
                if "id" in message:
                    if callback := self._on_reply.pop(message["id"], None):
                        _heard(callback, message)
                        continue
                    with self._replied:
                        if message["id"] in self._abandoned:
                            self._abandoned.discard(message["id"])
                        else:
                            self._replies[message["id"]] = message
                        self._replied.notify_all()
                else:
                    for listener in self._listeners.get(message.get("method"), ()):
                        _heard(listener, message.get("params", {}), message.get("sessionId"))
        except (websocket.WebSocketException, OSError, ValueError):
            pass  # the browser went away, or close()
        finally:
            self.closed.set()
            with self._replied:
                self._replied.notify_all()

    def close(self) -> None:
        self.closed.set()
        with self._replied:
            self._replied.notify_all()
        try:
            self._ws.close()
        except (websocket.WebSocketException, OSError):
            pass


# The Page events that say a tab's page begins or ends loading a document (a navigation that opens a new tab or
# becomes a download has another disposition and is no load of the tab's).
LOADING_EVENTS = {
    "Page.frameRequestedNavigation": True,
    "Page.frameStartedLoading": True,
    "Page.frameStoppedLoading": False,
}


class TabSessions:
    """A flattened session per tab (by its WebDriver window handle, which is its DevTools target id), with the
    Page events that matter to the env:

    - Whether a tab is loading a document. While a navigation is pending the page answers no command sent to it
      until the new document arrives (a server that never answers: never), so the env leaves such a page to
      chromedriver, which waits for the load and stops one that outlasts its page-load timeout.
    - Dialogs that the page's init script did not answer (page_init.js answers the page's own): accepted at once,
      so that none blocks a command on this connection; their texts are kept for `take_dialogs`.
    """

    def __init__(self, devtools: DevTools):
        self._devtools = devtools
        self._sessions: dict[str, str] = {}
        self._loading: set[str] = set()
        self._dialogs: list[str] = []
        self._dialogs_lock = threading.Lock()  # appended on the reader thread, taken on the env's
        devtools.on("Page.javascriptDialogOpening", self._accept_dialog)
        devtools.on("Target.detachedFromTarget", self._forget)
        for event, loading in LOADING_EVENTS.items():
            devtools.on(event, lambda params, session, loading=loading: self._note(loading, params, session))

    def session(self, tab: str) -> str:
        if (session := self._sessions.get(tab)) is None:
            session = self._sessions[tab] = self._devtools.attach(tab)
            self._devtools.call("Page.enable", session)
        return session

    def loading(self, tab: str) -> bool:
        return tab in self._loading

    def loaded(self, tab: str) -> None:
        self._loading.discard(tab)

    def take_dialogs(self) -> list[str]:
        with self._dialogs_lock:
            taken, self._dialogs = self._dialogs, []
        return taken

    def _note(self, loading: bool, params: dict, session: str | None) -> None:
        tab = params.get("frameId")  # a tab's main frame has the tab's id
        if self._sessions.get(tab) == session and params.get("disposition", "currentTab") == "currentTab":
            (self._loading.add if loading else self._loading.discard)(tab)

    def _accept_dialog(self, params: dict, session: str | None) -> None:
        def accepted(reply: dict) -> None:
            if "error" not in reply:  # else chromedriver had answered it, and reports it itself
                with self._dialogs_lock:
                    self._dialogs.append(params.get("message", ""))

        if session in self._sessions.values():
            self._devtools.send("Page.handleJavaScriptDialog", session, on_reply=accepted, accept=True)

    def _forget(self, params: dict, _session: str | None) -> None:
        for tab, session in list(self._sessions.items()):
            if session == params.get("sessionId"):
                del self._sessions[tab]
                self._loading.discard(tab)


def _heard(listener: Callable, *args) -> None:
    """Call a listener on the reader thread; its failure is logged, not allowed to end the reading for every
    other command and listener of the connection."""
    try:
        listener(*args)
    except Exception:
        log.exception("a DevTools listener failed")
