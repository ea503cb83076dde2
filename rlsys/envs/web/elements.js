// Lists the page's interactive elements in one call, in document order, named and given roles the way
// assistive technology names them (aria-labelledby, aria-label, <label>, alt text, content).
//
// Interactive: a control (link, button, form field, summary, an element with a widget role, contenteditable),
// or a list item, table cell, element with an onclick handler or a pointer cursor.
// Nested: a link, button, summary or option absorbs everything inside it (a link's <code> and <span>s are the
// link); an element with a widget role absorbs what is inside it except native controls. Of the rest, only the
// innermost are kept (a button, not the clickable card around it; a link, not the <li> around it).
// Visible: some client rect of the element (a link wrapping onto two lines has two) intersects the viewport and
// hit-tests to the element at one of a few points in it, so elements scrolled away or covered (by a sticky
// header, a dialog) are left out. The box is the first visible rect, the point the first that hit-tested.
// Same-origin iframes and open shadow roots are searched as part of the page. With `area` ([left, top, width,
// height] of the viewport) given, only what is visible in that part of the viewport counts, boxes clipped to it.
// The elements are remembered in window.__rlsysElements for the action that follows.
//
// Two phases, so that the costly one can run while the page is still being waited on (observe.js): scan()
// walks the whole tree for what is visible and may be listed (on a reference page of 17k nodes nearly all the
// time goes here), list() nests and names what it found, reading names and values as they are at that moment.
function findElements(rootSelector, skipIds, area) {
  const finder = elementFinder(rootSelector, skipIds, area);
  return finder.list(finder.scan());
}
function elementFinder(rootSelector, skipIds, area) {
const MIN_AREA = 20;  // px²: smaller rects are specks, not targets
const MAX_TEXT = 80;
const CONTROLS = new Set(["A", "BUTTON", "INPUT", "SELECT", "TEXTAREA", "SUMMARY", "OPTION", "IFRAME", "VIDEO"]);
const WIDGET_ROLES = new Set(["button", "link", "checkbox", "radio", "switch", "tab", "menuitem", "menuitemcheckbox",
  "menuitemradio", "option", "textbox", "searchbox", "combobox", "slider", "spinbutton", "treeitem"]);
// Controls whose name comes from their content: what is inside them is part of them.
const ABSORBING_TAGS = new Set(["A", "BUTTON", "SUMMARY", "OPTION"]);
const NATIVE = new Set(["A", "BUTTON", "INPUT", "SELECT", "TEXTAREA", "SUMMARY", "OPTION", "IFRAME", "VIDEO"]);
const ABSORBING_ROLES = new Set(["button", "link", "tab", "menuitem", "menuitemcheckbox", "menuitemradio", "option",
  "treeitem", "checkbox", "radio", "switch"]);
const WEAK_TAGS = new Set(["LI", "TD", "A"]);  // <a> without href: clickable only by script
const FIELD_ROLE = {checkbox: "checkbox", radio: "radio", range: "slider", number: "spinbutton", search: "searchbox",
  button: "button", submit: "button", reset: "button", image: "button", file: "button"};
const TEXT_INPUTS = new Set(["text", "search", "email", "password", "number", "tel", "url"]);
const vw = innerWidth, vh = innerHeight;
const clean = (s) => (s || "").replace(/\s+/g, " ").trim();
const explicitRole = (el) => (el.getAttribute("role") || "").trim().split(/\s+/)[0].toLowerCase();

function isControl(el) {
  if (el.tagName === "A") return el.hasAttribute("href");
  if (el.tagName === "INPUT") return el.type !== "hidden";
  return CONTROLS.has(el.tagName) || WIDGET_ROLES.has(explicitRole(el)) || el.isContentEditable
    && !(el.parentElement && el.parentElement.isContentEditable);
}
const isNative = (el) => NATIVE.has(el.tagName) && isControl(el);
const absorbsAll = (el) => ABSORBING_TAGS.has(el.tagName) && isControl(el);  // all inside is part of it
const absorbsParts = (el) => ABSORBING_ROLES.has(explicitRole(el));  // all inside but native controls
const ABSORBER_SELECTOR = "a[href], button, summary, option";
function isInteractive(el) {
  return isControl(el) || WEAK_TAGS.has(el.tagName) || el.onclick != null || el.hasAttribute("onclick")
    || getComputedStyle(el).cursor === "pointer";
}

// -- where things are: each document (the page, a same-origin iframe) is a context ----------------
function deepHit(root, x, y) {
  let hit = root.elementFromPoint(x, y);
  while (hit && hit.shadowRoot) {
    const inner = hit.shadowRoot.elementFromPoint(x, y);
    if (!inner || inner === hit) break;
    hit = inner;
  }
  return hit;
}
function composedParent(node) {
  return node.parentNode instanceof ShadowRoot ? node.parentNode.host : node.parentElement;
}
function owns(el, hit) {
  for (let n = hit; n; n = composedParent(n)) if (n === el) return true;
  return Boolean(el.labels && [...el.labels].some((label) => label === hit || label.contains(hit)));
}
function makeContext(doc, frame, parent) {
  let dx = 0, dy = 0, clip = [0, 0, vw, vh];
  if (!frame && area) {
    clip = [Math.max(0, area[0]), Math.max(0, area[1]), Math.min(vw, area[0] + area[2]), Math.min(vh, area[1] + area[3])];
  }
  if (frame) {
    const r = frame.getBoundingClientRect();
    dx = parent.dx + r.left + frame.clientLeft;
    dy = parent.dy + r.top + frame.clientTop;
    clip = [Math.max(parent.clip[0], dx), Math.max(parent.clip[1], dy),
            Math.min(parent.clip[2], dx + frame.clientWidth), Math.min(parent.clip[3], dy + frame.clientHeight)];
  }
  return {doc, frame, parent, dx, dy, clip,
    // is `el` what a click at top-level viewport point (x, y) reaches?
    reaches(el, x, y) {
      if (!owns(el, deepHit(doc, x - dx, y - dy))) return false;
      return !parent || deepHit(parent.doc, x - parent.dx, y - parent.dy) === frame && parent.reaches(frame, x, y);
    }};
}
// The first rect of `el` that is visible, clipped to what can be seen, and the point in it that hit-tested.
function visibleSpot(el, ctx) {
  const [cl, ct, cr, cb] = ctx.clip;
  for (const r of el.getClientRects()) {
    const left = Math.max(r.left + ctx.dx, cl), top = Math.max(r.top + ctx.dy, ct);
    const right = Math.min(r.right + ctx.dx, cr), bottom = Math.min(r.bottom + ctx.dy, cb);
    if (right <= left || bottom <= top || (right - left) * (bottom - top) < MIN_AREA) continue;
    const w = right - left, h = bottom - top;
    for (const [fx, fy] of [[0.5, 0.5], [0.25, 0.5], [0.75, 0.5], [0.5, 0.2], [0.5, 0.8]]) {
      const x = left + w * fx, y = top + h * fy;
      if (ctx.reaches(el, x, y)) return {box: [left, top, w, h].map(Math.round), point: [x, y].map(Math.round)};
    }
  }
  return null;
}

// -- names and roles ----------------------------------------------------------------------------
function contentText(el) {
  if (!el.querySelector("img, svg, input, select, textarea, [aria-label], [aria-hidden]")) return el.innerText;
  const parts = [];
  (function walk(node) {
    for (const child of node.childNodes) {
      if (child.nodeType === Node.TEXT_NODE) { parts.push(child.data); continue; }
      if (child.nodeType !== Node.ELEMENT_NODE || child.getAttribute("aria-hidden") === "true") continue;
      if (child.checkVisibility && !child.checkVisibility({visibilityProperty: true})) continue;
      const label = child.getAttribute("aria-label");
      if (label) parts.push(" " + label + " ");
      else if (child.tagName === "IMG") parts.push(" " + (child.alt || "") + " ");
      else if (child.tagName === "svg") parts.push(" " + (child.querySelector("title")?.textContent || "") + " ");
      else if (["INPUT", "SELECT", "TEXTAREA"].includes(child.tagName)) parts.push(" " + (child.value || "") + " ");
      else { parts.push(" "); walk(child); parts.push(" "); }
    }
  })(el);
  return parts.join("");
}
function labelText(el) {
  const ids = (el.getAttribute("aria-labelledby") || "").split(/\s+/).filter(Boolean);
  const byIds = ids.map((id) => el.getRootNode().getElementById?.(id) || document.getElementById(id));
  const labelled = clean(byIds.filter(Boolean).map((n) => n.innerText || n.textContent).join(" "));
  if (labelled) return labelled;
  const aria = clean(el.getAttribute("aria-label"));
  if (aria) return aria;
  if (el.labels && el.labels.length) return clean([...el.labels].map((l) => l.innerText).join(" "));
  return "";
}
function describe(el, spot) {
  const tag = el.tagName.toLowerCase();
  const type = el.tagName === "INPUT" ? (el.type || "text") : "";
  const field = ["INPUT", "SELECT", "TEXTAREA"].includes(el.tagName);
  const editable = el.tagName === "TEXTAREA" || el.isContentEditable || (type !== "" && TEXT_INPUTS.has(type));
  let name = labelText(el);
  if (!name && type === "image") name = clean(el.alt);
  if (!name && ["button", "submit", "reset"].includes(type)) {
    name = clean(el.value) || (type === "reset" ? "Reset" : "Submit");
  }
  if (!name && !field && !el.isContentEditable) name = clean(contentText(el));
  // a name of marks only ("«", ">>>") says less than the tooltip of the control it belongs to
  if (!/[\p{L}\p{N}]/u.test(name)) {
    name = clean(el.getAttribute("placeholder") || el.getAttribute("title") || el.closest("[title]")?.title) || name;
  }
  if (!name && el.tagName === "A" && el.hasAttribute("href")) name = linkTarget(el);  // an image without alt
  const toggle = type === "checkbox" || type === "radio";
  let value = "";
  if (el.isContentEditable) value = clean(el.innerText);
  else if (el.tagName === "SELECT") value = clean(el.selectedOptions[0]?.text);
  else if (toggle) value = el.value === "on" ? "" : clean(el.value);  // "on" is the default, says nothing
  else if (field && !["button", "submit", "reset", "image"].includes(type)) value = clean(el.value);
  const labelled = labelText(el);
  return {
    tag, type, role: roleOf(el, type), name: name.slice(0, MAX_TEXT), value: value.slice(0, MAX_TEXT),
    // what the PAE rendering shows: a field's label, else what was typed into it, else its placeholder
    text: (field ? labelled || value || name : name || value).slice(0, MAX_TEXT),
    editable, checked: toggle ? el.checked : null, disabled: Boolean(el.disabled),
    href: el.tagName === "A" && el.hasAttribute("href") ? el.href : null, box: spot.box, point: spot.point,
  };
}
function linkTarget(a) {
  try {
    const url = new URL(a.href);
    return decodeURIComponent(url.pathname.split("/").filter(Boolean).pop() || url.host);
  } catch (e) { return ""; }
}
// A list item or table cell that shows nothing and has no sign of a handler is layout. (An empty <a> without
// href stays: icon buttons such as jQuery UI's spinner arrows are made so.)
const isLayout = (el, name) => !name && (el.tagName === "LI" || el.tagName === "TD") && !isControl(el)
  && el.onclick == null && !el.hasAttribute("onclick") && getComputedStyle(el).cursor !== "pointer";
function roleOf(el, type) {
  const role = explicitRole(el);
  if (role) return role;
  switch (el.tagName) {
    case "A": return el.hasAttribute("href") ? "link" : "generic";
    case "BUTTON": case "SUMMARY": return "button";
    case "INPUT": return FIELD_ROLE[type] || "textbox";
    case "TEXTAREA": return "textbox";
    case "SELECT": return el.multiple || el.size > 1 ? "listbox" : "combobox";
    case "OPTION": return "option";
    case "LI": return "listitem";
    case "TD": return "cell";
    case "IFRAME": return "iframe";
    case "VIDEO": return "video";
    default: return el.isContentEditable ? "textbox" : "generic";
  }
}

// -- the walk -----------------------------------------------------------------------------------
const skipRoots = new Set(skipIds.map((id) => document.getElementById(id)).filter(Boolean));
const isAbsorber = (el) => el.matches(ABSORBER_SELECTOR);
let opaque = false;  // whether the scan went into a frame or a shadow root, whose changes observe.js does not see
// Pre-order over `root`'s descendants (a shadow root's content just before its host), never into a skipped
// subtree; `absorbed`: a link or button of the same tree contains the children (the shadow root or frame that
// is entered begins a tree of its own).
function visit(root, ctx, absorbed, candidates) {
  for (let el = root.firstElementChild; el; el = el.nextElementSibling) {
    if (skipRoots.has(el)) continue;
    const inner = el.tagName === "IFRAME" ? sameOriginBody(el) : null;
    if (inner) {  // the frame's page is searched as part of this one, the frame itself is not listed
      opaque = true;
      visit(inner, makeContext(inner.ownerDocument, el, ctx), inner.closest(ABSORBER_SELECTOR) !== null, candidates);
    } else {
      if (el.shadowRoot) {
        opaque = true;
        visit(el.shadowRoot, ctx, false, candidates);
      }
      // Cheap tests before layout is asked: part of a link or button, or not interactive at all.
      if (!absorbed && isInteractive(el)) {
        const r = el.getBoundingClientRect();
        const spot = !(r.right + ctx.dx <= ctx.clip[0] || r.left + ctx.dx >= ctx.clip[2]
          || r.bottom + ctx.dy <= ctx.clip[1] || r.top + ctx.dy >= ctx.clip[3]) && visibleSpot(el, ctx);
        if (spot) candidates.push({el, spot});
      }
    }
    if (el.firstElementChild) visit(el, ctx, absorbed || isAbsorber(el), candidates);
  }
  return candidates;
}
function sameOriginBody(frame) {
  try { return frame.contentDocument?.body || null; } catch (e) { return null; }  // cross-origin
}
// What may be listed, {candidates: [{el, spot}], opaque}.
function scan() {
  const root = document.querySelector(rootSelector) || document.body;
  opaque = false;
  if (!root || [...skipRoots].some((skipped) => skipped.contains(root))) return {candidates: [], opaque};
  const found = visit(root, makeContext(document, null, null), root.closest(ABSORBER_SELECTOR) !== null, []);
  return {candidates: found, opaque};
}

function list(scanned) {
  const candidates = scanned.candidates;
  // Walks each candidate's ancestors once (a pairwise test took tens of ms on pages with 150 candidates).
  const byElement = new Map(candidates.map((c) => [c.el, c]));
  const standing = candidates.filter((c) => {
    const native = isNative(c.el);
    for (let n = composedParent(c.el); n; n = composedParent(n)) {
      if (byElement.has(n) && (absorbsAll(n) || (!native && absorbsParts(n)))) return false;
    }
    return true;
  });
  const standingElements = new Set(standing.map((c) => c.el));
  const holdsOne = new Set();  // standing candidates with another standing candidate inside
  for (const c of standing) {
    for (let n = composedParent(c.el); n && !holdsOne.has(n); n = composedParent(n)) {
      if (standingElements.has(n)) holdsOne.add(n);
    }
  }
  const kept = standing.filter((c) => isNative(c.el) || !holdsOne.has(c.el));
  const listed = kept.map((c) => [c.el, describe(c.el, c.spot)]).filter(([el, d]) => !isLayout(el, d.text));
  window.__rlsysElements = listed.map(([el]) => el);
  return listed.map(([, d]) => d);
}
return {scan, list};
}
