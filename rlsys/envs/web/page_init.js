// Runs before any script of each document. Counts fetch/XHR requests in flight so the env can
// wait until the page's own network activity is over. Answers the page's dialogs itself (a real
// one blocks the page, and a page that shows one after another stalls every WebDriver command)
// and notes the URLs of the tabs it opens (a new tab's URL stays empty until its server
// answers); the env reads and empties window.__rlsysEvents after each step.
(() => {
  if (window.__rlsysPending !== undefined) return;
  window.__rlsysPending = 0;
  const done = () => { window.__rlsysPending = Math.max(0, window.__rlsysPending - 1); };
  const fetch = window.fetch;
  if (fetch) {
    window.fetch = function (...args) {
      window.__rlsysPending++;
      return fetch.apply(this, args).finally(done);
    };
  }
  const send = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.send = function (...args) {
    window.__rlsysPending++;
    this.addEventListener("loadend", done, { once: true });
    return send.apply(this, args);
  };

  // When the document last changed, for the env's settle wait (observe.js): from DOMContentLoaded on, so the
  // parser's own insertions cost nothing, and a static page that finished loading a while ago is settled at once.
  window.__rlsysLastChange = performance.now();
  document.addEventListener("DOMContentLoaded", () => {
    window.__rlsysLastChange = performance.now();
    new MutationObserver(() => { window.__rlsysLastChange = performance.now(); })
      .observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
  }, { once: true });
  // Style rules added or removed through the CSSOM restyle the page without changing the DOM: changes too.
  const changed = () => { window.__rlsysLastChange = performance.now(); };
  for (const name of ["insertRule", "deleteRule", "addRule", "removeRule", "replace", "replaceSync"]) {
    const original = CSSStyleSheet.prototype[name];
    if (!original) continue;
    CSSStyleSheet.prototype[name] = function (...args) {
      const result = original.apply(this, args);
      changed();
      if (result instanceof Promise) result.then(changed, changed);  // replace() applies once imports load
      return result;
    };
  }

  // A navigation this document started (a link, a form, `location = ...`, a meta refresh) is noted: until the
  // document is replaced, the page has not settled (its request now takes a hop through the env's proxy).
  if (window.navigation) {
    navigation.addEventListener("navigate", (event) => {
      if (!event.destination.sameDocument) window.__rlsysNavigating = performance.now();
    });
  }

  const MAX_EVENTS = 20;  // per kind between two reads: a page in an alert loop shows thousands
  const events = window.__rlsysEvents = { dialogs: [], opened: [] };
  const record = (kind, value) => {
    let sink = events;
    try { sink = window.top.__rlsysEvents || events; } catch (e) {}  // a frame's go to the page's, which the env reads
    if (sink[kind].length < MAX_EVENTS) sink[kind].push(value);
  };
  const text = (message) => (message === undefined ? "" : String(message));
  window.alert = (message) => { record("dialogs", text(message)); };
  window.confirm = (message) => { record("dialogs", text(message)); return true; };
  window.prompt = (message, value) => { record("dialogs", text(message)); return text(value); };
  window.print = () => { record("dialogs", "window.print()"); };
  // Registered before any of the page's handlers, so none of them gets to ask "Leave site?".
  window.addEventListener("beforeunload", (event) => event.stopImmediatePropagation(), true);
  const open = window.open;
  window.open = function (url, ...rest) {
    let href = "about:blank";
    if (url !== undefined && String(url) !== "") {
      try { href = new URL(url, document.baseURI).href; } catch (e) { href = String(url); }
    }
    record("opened", href);
    return open.call(this, url, ...rest);
  };
  document.addEventListener("click", (event) => {  // a link with a target opens its tab without window.open
    const link = event.target.closest && event.target.closest("a[href][target]");
    if (link && !/^_(self|parent|top)$/i.test(link.target)) record("opened", link.href);
  }, true);
})();
