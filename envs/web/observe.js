// Waits until the page has settled, then describes it, in one asynchronous script call.
// Settled: the document is loaded, no fetch/XHR is in flight and the DOM has not changed for
// `quietMs`; or `timeoutMs` has passed (reported as settled: false). Only elements visible in `area`
// ([left, top, width, height] of the viewport) are listed.
const [rootSelector, skipIds, quietMs, timeoutMs, area] = arguments;
const reply = arguments[arguments.length - 1];
const NAVIGATION_MS = 1000;
const start = performance.now();
let lastChange = start;
const observer = new MutationObserver(() => { lastChange = performance.now(); });
observer.observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
(function check() {
  const now = performance.now();
  // a navigation the page started counts for at most NAVIGATION_MS: one that became a download or a 204 never
  // replaces the document
  const navigating = now - (window.__rlsysNavigating ?? -Infinity) < NAVIGATION_MS;
  const quiet = document.readyState === "complete" && !(window.__rlsysPending > 0) && !navigating
    && now - lastChange >= quietMs;
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
  });
})();
