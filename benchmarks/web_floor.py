"""The floor of a web step: only what any step must do, timed on the env's own browser in the same run.

A step must act, wait until the page is idle, take one screenshot and read the element list. The floor does
exactly that and nothing else, over one DevTools connection of its own (no chromedriver in between):

- act through CDP: a click is two `Input.dispatchMouseEvent`s, a scroll one `Runtime.evaluate` of
  `scrollBy`, typing `Input.insertText` and an Enter key, going back `history.back()`, a reset `Page.navigate`;
- wait for idle and read the element list in one `Runtime.evaluate` sent with the action, without waiting for
  the action's reply first (one round trip for both): the document is loaded, no fetch/XHR of the page is in
  flight, no navigation it started is pending, and the DOM has not changed for the env's quiet window
  (`env.settle_quiet_ms`) counted from the action (after a reset, from the new document's last change). This is
  the env's own definition of a settled page, so the floor waits as long as the env must; the list is the env's
  own element walk (elements.js), run once. A reset waits for `Page.navigate`'s answer (the new document is
  committed) before it sends the script, which would otherwise list the old document;
- one `Page.captureScreenshot` (PNG, as the env takes it).

It draws no marks, keeps no history, checks no URL, tab or download, clears nothing between episodes: every
one of those is rlsys's overhead above the floor. The floor runs on the env's browser, so the page's init
script (page_init.js, which counts requests in flight and notes navigations) is there for it too.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

from rlsys.envs.web.browser import PAGE_GONE, Browser
from rlsys.envs.web.devtools import DevTools

ELEMENTS_JS = (Path(__file__).resolve().parent.parent / "rlsys" / "envs" / "web" / "elements.js").read_text()
# Waits for idle (see the module's docstring), then lists the elements.
IDLE_THEN_LIST = (
    ELEMENTS_JS
    + """
(async (quietMs, timeoutMs, acted) => {
  const start = performance.now();
  // as the env counts it: from the action, or on a document nothing has acted on yet from its last change only
  let last = acted ? start : window.__rlsysLastChange ?? start;
  const observer = new MutationObserver(() => { last = performance.now(); });
  observer.observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
  const navigating = () => performance.now() - (window.__rlsysNavigating ?? -Infinity) < 1000;
  for (;;) {
    const now = performance.now();
    const idle = document.readyState === "complete" && !(window.__rlsysPending > 0) && !navigating();
    if ((idle && now - Math.max(last, window.__rlsysLastChange ?? -Infinity) >= quietMs) || now - start >= timeoutMs)
      break;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  observer.disconnect();
  return { url: location.href, elements: findElements("body", [], null) };
})"""
)
ATTEMPTS = 5


class CdpSession:
    """A DevTools connection of the floor's own (rlsys's client, beside the env's), with a session on the env's
    current tab: `send` sends a command without waiting, `wait` waits for its reply."""

    def __init__(self, browser: Browser):
        self._devtools = DevTools(Path(browser._profile))
        self._session = self._devtools.attach(browser.driver.current_window_handle)

    def send(self, method: str, **params) -> int:
        return self._devtools.send(method, self._session, **params)

    def wait(self, ident: int) -> dict:
        return self._devtools.wait(ident, timeout_s=60)

    def call(self, method: str, **params) -> dict:
        return self.wait(self.send(method, **params))

    def close(self) -> None:
        self._devtools.close()


class Floor:
    """The floor's reset and steps (see the module's docstring); each returns the page it observed:
    {"url", "elements", "png"}."""

    def __init__(self, browser: Browser, quiet_ms: float, timeout_s: float):
        self.cdp = CdpSession(browser)
        self.quiet_ms, self.timeout_ms = quiet_ms, timeout_s * 1000

    def reset(self, url: str) -> dict:
        # Page.navigate answers once the new document is committed: the list must not be read from the old one
        self.cdp.call("Page.navigate", url=url)
        return self._observe([], acted=False)

    def scroll(self, sign: int) -> dict:
        script = f"scrollBy(0, {sign} * Math.round(innerHeight * 2 / 3))"
        return self._observe([("Runtime.evaluate", {"expression": script})])

    def click(self, x: float, y: float) -> dict:
        mouse = {"x": x, "y": y, "button": "left", "clickCount": 1}
        return self._observe(
            [
                ("Input.dispatchMouseEvent", {"type": "mousePressed", **mouse}),
                ("Input.dispatchMouseEvent", {"type": "mouseReleased", **mouse}),
            ]
        )

    def type(self, x: float, y: float, text: str) -> dict:
        mouse = {"x": x, "y": y, "button": "left", "clickCount": 1}
        enter = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}
        return self._observe(
            [
                ("Input.dispatchMouseEvent", {"type": "mousePressed", **mouse}),
                ("Input.dispatchMouseEvent", {"type": "mouseReleased", **mouse}),
                ("Input.insertText", {"text": text}),
                ("Input.dispatchKeyEvent", {"type": "keyDown", "text": "\r", **enter}),
                ("Input.dispatchKeyEvent", {"type": "keyUp", **enter}),
            ]
        )

    def back(self) -> dict:
        return self._observe([("Runtime.evaluate", {"expression": "history.back()"})])

    def _observe(self, action: list[tuple[str, dict]], acted: bool = True) -> dict:
        """Send the action and the idle-then-list script together, wait for the list, take the screenshot."""
        sent = [self.cdp.send(method, **params) for method, params in action]
        for attempt in range(1, ATTEMPTS + 1):
            listing = self.cdp.send(
                "Runtime.evaluate",
                expression=f"{IDLE_THEN_LIST}({self.quiet_ms}, {self.timeout_ms}, {json.dumps(acted)})",
                awaitPromise=True,
                returnByValue=True,
            )
            for ident in sent:
                self.cdp.wait(ident)
            sent = []
            try:
                reply = self.cdp.wait(listing)
            except RuntimeError as e:  # the document went away under the script: list the next one
                if attempt == ATTEMPTS or not any(s in str(e) for s in PAGE_GONE):
                    raise
                continue
            if "exceptionDetails" in reply:
                details = reply["exceptionDetails"]
                message = details.get("exception", {}).get("description") or details.get("text", "")
                if attempt == ATTEMPTS or not any(s in message for s in PAGE_GONE):
                    raise RuntimeError(message)
                continue
            page = reply["result"]["value"]
            break
        shot = self.cdp.call("Page.captureScreenshot", format="png", optimizeForSpeed=True)
        page["png"] = base64.b64decode(shot["data"])
        return page

    def close(self) -> None:
        self.cdp.close()


def timed(call, *args) -> tuple[dict, float]:
    started = time.perf_counter()
    page = call(*args)
    return page, round((time.perf_counter() - started) * 1000, 1)
