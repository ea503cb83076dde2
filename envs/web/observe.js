// Waits until the page has settled, then describes it, in one asynchronous script call.
// Settled: the document is loaded, no fetch/XHR is in flight, and for `quietMs` neither has the DOM changed nor
// has the env acted (`sinceActionMs` ago by the env's clock; null: it has not acted on this document); or
// `timeoutMs` has passed (reported as settled: false). The DOM's changes before this call are known where the
// init script runs (page_init.js); elsewhere the quiet window starts with this call. Only elements visible in
// `area` ([left, top, width, height] of the viewport) are listed.
const [rootSelector, skipIds, quietMs, timeoutMs, area, sinceActionMs] = arguments;
const reply = arguments[arguments.length - 1];
const NAVIGATION_MS = 1000;
const start = performance.now();
let lastChange = Math.max(window.__rlsysLastChange ?? start, sinceActionMs === null ? -Infinity : start - sinceActionMs);
const observer = new MutationObserver(() => { lastChange = performance.now(); });
observer.observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
(function check() {
  const now = performance.now();
  // a navigation the page started counts for at most NAVIGATION_MS: one that became a download or a 204 never
  // replaces the document
  const navigating = now - (window.__rlsysNavigating ?? -Infinity) < NAVIGATION_MS;
  const quiet = document.readyState === "complete" && !(window.__rlsysPending > 0) && !navigating
    && now - Math.max(lastChange, window.__rlsysLastChange ?? -Infinity) >= quietMs;
  if (!quiet && now - start < timeoutMs) {
    setTimeout(check, 10);
    return;
  }
  observer.disconnect();
  reply({
    settled: quiet,
    settle_ms: now - start,
    url: location.href,
    content_type: document.contentType,
    scroll: [scrollX, scrollY],
    elements: findElements(rootSelector, skipIds, area),
    extra: (() => { /*EXTRA*/ })(),
    events: (() => {  // what page_init.js noted since the last read: dialogs it answered, tabs the page opened
      const events = window.__rlsysEvents;
      return events ? { dialogs: events.dialogs.splice(0), opened: events.opened.splice(0) } : { dialogs: [], opened: [] };
    })(),
  });
})();
