// Finds the interactive elements of the page in one call, numbered in document order.
// Interactive: visible (hit-tested at its centre), a form control, link, list or table cell,
// or anything with an onclick handler or a pointer cursor; only the innermost such elements
// are kept. The elements are remembered in window.__rlsysElements for the action that follows.
// Elements outside the viewport fail the hit test and are not listed.
function findElements(rootSelector, skipIds) {
const root = document.querySelector(rootSelector) || document.body;
const skip = new Set(skipIds);
const TAGS = new Set(["INPUT", "TEXTAREA", "SELECT", "BUTTON", "A", "IFRAME", "VIDEO", "LI", "TD", "OPTION"]);
const candidates = [];
for (const el of root.querySelectorAll("*")) {
  if (skip.has(el.id) || [...skip].some((id) => el.closest("#" + id))) continue;
  const interactive = TAGS.has(el.tagName) || el.onclick != null || el.hasAttribute("onclick")
    || getComputedStyle(el).cursor === "pointer";
  if (!interactive) continue;
  const r = el.getBoundingClientRect();
  if (r.width * r.height < 20) continue;
  const cx = r.left + r.width / 2, cy = r.top + r.height / 2;
  const hit = document.elementFromPoint(cx, cy);
  if (!hit || !(hit === el || el.contains(hit) || (el.labels && [...el.labels].includes(hit)))) continue;
  candidates.push(el);
}
const kept = candidates.filter((el) => !candidates.some((o) => o !== el && el.contains(o)));
const text = (el) => {
  let t = (el.labels && el.labels.length ? el.labels[0].innerText : el.innerText || el.value || "")
    || el.getAttribute("aria-label") || el.getAttribute("placeholder")
    || (el.closest("[title]") ? el.closest("[title]").getAttribute("title") : "");
  return t.replace(/\s+/g, " ").trim().slice(0, 60);
};
window.__rlsysElements = kept;
return kept.map((el) => {
  const r = el.getBoundingClientRect();
  const type = el.tagName === "INPUT" ? (el.type || "text") : "";
  const editable = el.tagName === "TEXTAREA" || el.isContentEditable
    || (el.tagName === "INPUT" && ["text", "search", "email", "password", "number", "tel", "url"].includes(type));
  return {tag: el.tagName.toLowerCase(), type: type, text: text(el), editable: editable,
          box: [Math.round(r.left), Math.round(r.top), Math.round(r.width), Math.round(r.height)]};
});
}
