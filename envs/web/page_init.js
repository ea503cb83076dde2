// Runs before any script of each document. Counts fetch/XHR requests in flight so the env can
// wait until the page's own network activity is over.
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
})();
