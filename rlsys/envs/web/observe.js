// Waits until the page has settled, then describes it, in one asynchronous script call.
// Settled: the document is loaded, no fetch/XHR is in flight, and for `quietMs` neither has the DOM changed nor
// has the env acted (`sinceActionMs` ago by the env's clock; null: it has not acted on this document); or
// `timeoutMs` has passed (reported as settled: false). The DOM's changes before this call are known where the
// init script runs (page_init.js); elsewhere the quiet window starts with this call. Only elements visible in
// `area` ([left, top, width, height] of the viewport) are listed.
//
// With `provisionalKey`, a page found idle before its quiet window is over gets an early answer,
// {provisional: true, scroll}, so that the caller can take the screenshot while the page is scanned and the window
// waited out; the description then goes to a promise at window[provisionalKey], which a second call awaits. It
// says whether the screenshot shows the described page (`screenshot_holds`): nothing changed since the answer.
//
// With `leaveIfLoading`, a document still loading, or one that has started a navigation, gets {loading: true} at once:
// the env then waits for the load through chromedriver, which stops a load that outlasts its timeout.
const [rootSelector, skipIds, quietMs, timeoutMs, area, sinceActionMs, provisionalKey, leaveIfLoading] = arguments;
const reply = arguments[arguments.length - 1];
let deliver = reply;
const NAVIGATION_MS = 1000;
const start = performance.now();
let lastChange = Math.max(window.__rlsysLastChange ?? start, sinceActionMs === null ? -Infinity : start - sinceActionMs);
const observer = new MutationObserver(() => { lastChange = performance.now(); });
observer.observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
const changedAt = () => Math.max(lastChange, window.__rlsysLastChange ?? -Infinity);

// The element scan (elements.js) is the costly part of reading a page. Once the page is loaded and idle it runs
// while the quiet window is still being waited out, and is used if nothing that moves or restyles elements
// without changing the DOM happened after it began: those events, DOM changes and running animations send the
// page to a scan afresh, as does a scan that went into frames or shadow roots (their DOM is not observed here).
// It waits for a frame first, so that the scroll events of the env's own last action are behind it.
const finder = elementFinder(rootSelector, skipIds, area);
let early = null;  // {scanned, at}
let provisionalAt = null;
let disturbedAt = -Infinity, framed = false;
const DISTURBING = ["scroll", "load", "error", "resize", "focusin", "focusout", "mouseover", "mouseout",
  "transitionrun", "transitionstart", "transitionend", "transitioncancel",
  "animationstart", "animationend", "animationcancel", "contentvisibilityautostatechange"];
const disturb = () => { disturbedAt = performance.now(); };
for (const type of DISTURBING) window.addEventListener(type, disturb, true);
document.fonts?.addEventListener("loadingdone", disturb);
requestAnimationFrame(() => setTimeout(() => { framed = true; }, 0));
// Whether nothing that can move or restyle an element has happened since `at`, as far as this script can see.
function unchangedSince(at) {
  try {
    return disturbedAt < at && changedAt() < at && (document.fonts?.status ?? "loaded") === "loaded"
      && !document.getAnimations().some((animation) => animation.playState === "running");
  } catch (e) { return false; }  // a page that replaced what this asks
}
// Whether the page is still moving things by script, as the env's suite knows to ask (`busy_script`): ticks of a
// script animation may come further apart than the quiet window on a busy machine.
function animating() {
  try { return Boolean((() => { /*BUSY*/ })()); } catch (e) { return false; }
}
const earlyScanHolds = () => Boolean(early) && !early.scanned.opaque && unchangedSince(early.at);
let earlyScanUsed = false;
function elements() {
  earlyScanUsed = earlyScanHolds();
  return finder.list(earlyScanUsed ? early.scanned : finder.scan());
}

function stopWatching() {
  observer.disconnect();
  for (const type of DISTURBING) window.removeEventListener(type, disturb, true);
  document.fonts?.removeEventListener("loadingdone", disturb);
}

let looked = false;
(function check() {
  const now = performance.now();
  // a navigation the page started counts for at most NAVIGATION_MS: one that became a download or a 204 never
  // replaces the document
  const navigating = now - (window.__rlsysNavigating ?? -Infinity) < NAVIGATION_MS;
  if (leaveIfLoading && !looked && (navigating || document.readyState !== "complete")) {
    stopWatching();
    deliver({ loading: true });
    return;
  }
  looked = true;
  const idle = document.readyState === "complete" && !(window.__rlsysPending > 0) && !navigating && !animating();
  const quiet = idle && now - changedAt() >= quietMs;
  if (!quiet && now - start < timeoutMs) {
    if (idle && framed && provisionalKey && provisionalAt === null) {
      answerProvisionally();  // and scan on the next look, while the screenshot is being taken
    } else if (idle && framed && !early) {
      early = { at: performance.now(), scanned: finder.scan() };  // what happened before the scan is in it
    }
    // once idle, look again when the quiet window would end rather than up to 10 ms after
    setTimeout(check, idle ? Math.max(1, Math.min(10, quietMs - (performance.now() - changedAt()))) : 10);
    return;
  }
  stopWatching();
  deliver({
    settled: quiet,
    settle_ms: now - start,
    url: location.href,
    content_type: document.contentType,
    scroll: [scrollX, scrollY],
    elements: elements(),
    early_scan: earlyScanUsed,
    screenshot_holds: provisionalAt !== null && earlyScanUsed && unchangedSince(provisionalAt),
    extra: (() => { /*EXTRA*/ })(),
    events: (() => {  // what page_init.js noted since the last read: dialogs it answered, tabs the page opened
      const events = window.__rlsysEvents;
      return events ? { dialogs: events.dialogs.splice(0), opened: events.opened.splice(0) } : { dialogs: [], opened: [] };
    })(),
  });
})();

function answerProvisionally() {
  let describe;
  const described = new Promise((resolve) => { describe = resolve; });
  Object.defineProperty(window, provisionalKey, { value: described, configurable: true });  // not enumerable
  deliver = describe;
  provisionalAt = performance.now();
  reply({ provisional: true, scroll: [scrollX, scrollY] });
}
