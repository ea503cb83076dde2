"""The web env on real documentation sites: does its element list cover the links a person sees,
how long do reset and step take, and how often does the browser break?

The sites are the HTML of Debian's documentation packages (see doc_sites.py), each served on
127.0.0.1 by this script. One `WebEnv` (PAE action space, 1024x768) visits every page:

- Coverage. After the reset, and again after one `Scroll [WINDOW]; [down]`, a script of this
  benchmark's own (not the env's elements.js) lists the ground truth: every `<a href>` with visible
  text (innerText, or an image's alt) that a person can see, i.e. one of its client rects meets
  the viewport and `elementFromPoint` at some point inside it (centre, inset corners) lands on the
  link or inside it. A link is listed when an element of `obs.extras["elements"]` that is an `a`
  (or carries the link's href) covers the visible part of the link, or one line of it, with an
  IoU of at least 0.5; listed with its text when that element's whitespace-normalised text agrees
  with the link's on their common prefix (the env truncates long texts). Misses are sorted into
  kinds: listed as another tag (a part of the link), past max_elements (the list is full and the
  link comes after the last listed one in document order), a wrapped link whose box centre is off
  it, and so on. Junk elements are listed ones whose text is empty or one or two marks such as
  "«" (unless they list a visible link of that text).
- Latency. The wall time of `env.reset` per page, and of `env.step` over a walk of
  --steps-per-page steps cycling `Scroll [WINDOW]; [down]`, `Scroll [WINDOW]; [up]`, `Click [N]` on
  a random listed same-site link and, where a search box is listed, `Type [N]; [query]` (which
  presses Enter); a click or search that changed the URL is followed by `GoBack`.
  Each page is first reset once untimed: training resets to the same start pages again and again,
  and without it the timed reset would pay for a first visit that the floor, coming after it,
  does not. The commands the env sends in each timed reset and step are counted: WebDriver
  commands (each goes through the driver's `execute`, chromedriver's CDP calls included) and,
  where the browser has a DevTools connection of its own, the commands sent over it.
- The floor. After the env's walk, the same page is reset and the walk replayed (the same scrolls,
  clicks and searches at the same viewport points, the same GoBacks) by a bare loop that does only
  what a step must: act over DevTools, wait until the page is idle, take one screenshot, list the
  elements once (web_floor.py defines it). It runs on the env's own browser, in the same run, so
  the env's latencies are reported beside the floor's and as multiples of them (p50 and p90, by
  step kind too). A replayed step that ends on another URL than the env's did is counted (a page
  that keeps changing can move a link between the two walks).
- Errors. EnvBrokenError from reset or step per 1000 env calls (resets, warm-ups included, and
  steps); after one the env is closed and a new one built, as the runner does, and the walk goes
  on with the next page. Any other exception is recorded with its page and the benchmark goes on
  too; so is a failure of the floor, apart.

    python benchmarks/web_real_pages.py --steps-per-page 10 --seed 0
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
from doc_sites import Page, Site, available_sites, serve
from web_floor import Floor, timed
from web_step_latency import machine

from rlsys.core.env import EnvBrokenError
from rlsys.core.types import Task
from rlsys.envs.web.webenv import viewport_point

VIEWPORT = [1024, 768]
MIN_IOU = 0.5  # an element "covers" a link when it overlaps the link's visible part at least this much
SEARCH_QUERY = "list"
CLICKABLE_SUFFIXES = {"", ".html", ".htm"}  # same-site links to pages, not downloads (.pdf, .gz, ...)
EXAMPLES = 5

# Ground truth, independent of the env's own element finder. Viewport = the layout viewport
# without scrollbars (documentElement.client*), where elementFromPoint answers.
GROUND_TRUTH_JS = """
const width = document.documentElement.clientWidth, height = document.documentElement.clientHeight;
const normalise = (s) => (typeof s === "string" ? s : "").replace(/\\s+/g, " ").trim();
const visibleText = (link) => {
  const text = normalise(link.innerText);
  if (text) return text;
  const img = link.querySelector("img[alt]");
  return img ? normalise(img.alt) : "";
};
const onLink = (link, x, y) => {
  const hit = document.elementFromPoint(x, y);
  return hit !== null && (hit === link || link.contains(hit));
};
const probes = (left, top, right, bottom) => {
  const cx = (left + right) / 2, cy = (top + bottom) / 2;
  const dx = Math.min(2, (right - left) / 4), dy = Math.min(2, (bottom - top) / 4);
  return [[cx, cy], [left + dx, top + dy], [right - dx, bottom - dy], [left + dx, bottom - dy],
          [right - dx, top + dy], [(left + cx) / 2, cy], [(cx + right) / 2, cy]];
};
const links = [];
document.querySelectorAll("a[href]").forEach((link, order) => {
  const all = [...link.getClientRects()];
  const visible = [];
  let clipped = false;
  for (const r of all) {
    const left = Math.max(r.left, 0), top = Math.max(r.top, 0);
    const right = Math.min(r.right, width), bottom = Math.min(r.bottom, height);
    if (right <= left || bottom <= top) continue;
    if (!probes(left, top, right, bottom).some(([x, y]) => onLink(link, x, y))) continue;
    clipped = clipped || left > r.left || top > r.top || right < r.right || bottom < r.bottom;
    visible.push([left, top, right - left, bottom - top]);
  }
  if (!visible.length) return;
  const text = visibleText(link);
  if (!text) return;
  const box = link.getBoundingClientRect();
  links.push({
    order: order, text: text, href: typeof link.href === "string" ? link.href : "",
    rects: visible, lines: new Set(all.map((r) => Math.round(r.top))).size, clipped: clipped,
    box_centre_on_link: onLink(link, box.left + box.width / 2, box.top + box.height / 2),
  });
});
return {width: width, height: height, links: links};
"""


# -- the env --------------------------------------------------------------------------------


def make_env():
    from rlsys.config import EnvConfig, build
    from rlsys.envs.web.webenv import WebEnv

    env = {
        "kind": "web",
        "action_space": "pae",
        "viewport": VIEWPORT,
        "max_steps": 100_000,
        # each site is served on its own 127.0.0.1 port: the task's start origin is what an episode may reach
        "chromium": shutil.which("chromium"),
        "chromedriver": shutil.which("chromedriver"),
    }
    return WebEnv(build(EnvConfig, env, "env"))


def close_quietly(env) -> None:
    try:
        env.close()
    except Exception as e:  # a broken browser may not close cleanly; a new one is built anyway
        print(f"  (closing the broken env: {type(e).__name__}: {e})")


def pae(action: str) -> str:
    return f"Thought: benchmark step.\nAction: {action}"


def timed_reset(env, url: str):
    task = Task(id=url, instruction="benchmark", suite="webvoyager", start=url)
    t0 = time.perf_counter()
    obs = env.reset(task)
    return obs, round((time.perf_counter() - t0) * 1000, 1)


def timed_step(env, action: str):
    t0 = time.perf_counter()
    result = env.step(pae(action))
    return result, round((time.perf_counter() - t0) * 1000, 1)


CHANNELS = ("webdriver", "devtools")


def count_commands(env, call, *args):
    """`call(env, *args)`'s result and ms, and the commands it sent by channel and name: through chromedriver
    ("webdriver"; a DevTools command sent that way as `executeCdpCommand Method`), every one of which goes through
    the driver's `execute`; and over the browser's own DevTools connection where it has one ("devtools"), every
    one of which goes through its `send`."""
    counts = {channel: Counter() for channel in CHANNELS}
    driver, devtools = env.driver, getattr(env.browser, "devtools", None)
    execute = driver.execute

    def counted_execute(command, params=None):
        counts["webdriver"][f"{command} {params['cmd']}" if command == "executeCdpCommand" else command] += 1
        return execute(command, params)

    driver.execute = counted_execute
    if devtools is not None:
        send = devtools.send

        def counted_send(method, *rest, **params):
            counts["devtools"][method] += 1
            return send(method, *rest, **params)

        devtools.send = counted_send
    try:
        result, ms = call(env, *args)
    finally:  # the classes' own again
        del driver.execute
        if devtools is not None:
            del devtools.send
    return result, ms, {channel: dict(c) for channel, c in counts.items()}


# -- coverage -------------------------------------------------------------------------------


def normalise(text) -> str:
    return " ".join(str(text or "").split())


Edges = tuple[float, float, float, float]  # left, top, right, bottom


def edges(box) -> Edges:
    """A box as the env and the ground truth give it, [left, top, width, height], as its edges."""
    left, top, width, height = box
    return left, top, left + width, top + height


def clip(box, width: float, height: float) -> Edges | None:
    """The part of a box inside the viewport, or None."""
    left, top, right, bottom = edges(box)
    clipped = (max(left, 0), max(top, 0), min(right, width), min(bottom, height))
    return clipped if clipped[2] > clipped[0] and clipped[3] > clipped[1] else None


def union(boxes: list) -> Edges:
    parts = [edges(b) for b in boxes]
    return min(p[0] for p in parts), min(p[1] for p in parts), max(p[2] for p in parts), max(p[3] for p in parts)


def area(a) -> float:
    return max(a[2] - a[0], 0) * max(a[3] - a[1], 0)


def intersection(a, b) -> float:
    return area((max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])))


def iou(a, b) -> float:
    inter = intersection(a, b)
    return inter / (area(a) + area(b) - inter) if inter else 0.0


def texts_agree(element_text: str, link_text: str) -> bool:
    n = min(len(element_text), len(link_text))
    return n >= 1 and element_text[:n] == link_text[:n]


def is_junk(element: dict) -> bool:
    text = normalise(element.get("text"))
    return not text or (len(text) <= 2 and not any(c.isalnum() for c in text))


def is_link_element(element: dict, link: dict) -> bool:
    return element.get("tag") == "a" or (bool(element.get("href")) and element.get("href") == link["href"])


def overlap(link: dict, box) -> float:
    """How well an element's box covers a link: its best IoU with the link's visible part as a whole
    (an element boxed like the link) or with one of its visible rects (boxed like one line of it)."""
    parts = [union(link["rects"]), *(edges(r) for r in link["rects"])]
    return max(iou(box, part) for part in parts)


def miss_kind(link: dict, boxes: list, elements: list[dict], cap_reached_after: int | None) -> str:
    """Why a visible link is not listed, as far as can be told from outside the env."""
    whole = union(link["rects"])
    for element, box in zip(elements, boxes):
        if not box or (overlap(link, box) < MIN_IOU and intersection(whole, box) < 0.8 * area(box)):
            continue
        if is_link_element(element, link):
            return "a listed link covers part of it"
        return f"listed as <{element.get('tag')}>"
    if cap_reached_after is not None and link["order"] > cap_reached_after:
        return "past max_elements"
    if link["lines"] > 1 and not link["box_centre_on_link"]:
        return "wrapped link, box centre off the link"
    if link["clipped"]:
        return "partly outside the viewport"
    if not link["box_centre_on_link"]:
        return "box centre covered or off the link"
    return "not listed"


def match_links(truth: dict, elements: list[dict], max_elements: int) -> list[dict]:
    """Each ground-truth link with the element that lists it (index or None) and a verdict."""
    boxes = [clip(e["box"], truth["width"], truth["height"]) if e.get("box") else None for e in elements]
    matched = []
    for link in truth["links"]:
        scores = [
            (overlap(link, box), i)
            for i, (element, box) in enumerate(zip(elements, boxes))
            if box and is_link_element(element, link)
        ]
        score, index = max(scores, default=(0.0, None))
        matched.append({"link": link, "element": index if score >= MIN_IOU else None})
    listed_orders = [m["link"]["order"] for m in matched if m["element"] is not None]
    cap_reached_after = max(listed_orders) if len(elements) >= max_elements and listed_orders else None
    for m in matched:
        link = m["link"]
        if m["element"] is None:
            m["verdict"] = miss_kind(link, boxes, elements, cap_reached_after)
            continue
        element_text = normalise(elements[m["element"]].get("text"))
        if texts_agree(element_text, link["text"]):
            m["verdict"] = "listed with text"
        else:
            m["verdict"] = "listed, empty text" if not element_text else "listed, other text"
            m["element_text"] = element_text
    return matched


def ground_truth(env) -> dict:
    return env.driver.execute_script(GROUND_TRUTH_JS)


def coverage(env, obs, max_elements: int) -> dict:
    """How well the elements of the view the env just observed cover its visible links."""
    elements = obs.extras["elements"]
    matched = match_links(ground_truth(env), elements, max_elements)
    verdicts = Counter(m["verdict"] for m in matched)
    listed = sum(m["element"] is not None for m in matched)
    # a link whose visible text is a mark (bash's index lists the builtins ".", ":", "[") is no junk
    true_links = {m["element"] for m in matched if m["verdict"] == "listed with text"}
    junk = [e for i, e in enumerate(elements) if is_junk(e) and i not in true_links]
    misses = [m for m in matched if m["element"] is None]
    wrong_text = [m for m in matched if m["verdict"].startswith("listed, ")]
    return {
        "links": len(matched),
        "listed": listed,
        "listed_with_text": verdicts["listed with text"],
        "elements": len(elements),
        "at_cap": len(elements) >= max_elements,
        "junk": len(junk),
        "verdicts": dict(verdicts),
        "miss_examples": [
            {"text": m["link"]["text"][:80], "href": path_of(m["link"]["href"]), "kind": m["verdict"]}
            for m in misses[:EXAMPLES]
        ],
        "text_miss_examples": [
            {"text": m["link"]["text"][:80], "element_text": m["element_text"][:80], "kind": m["verdict"]}
            for m in wrong_text[:EXAMPLES]
        ],
        "junk_examples": [{"tag": e.get("tag"), "text": e.get("text"), "box": e.get("box")} for e in junk[:EXAMPLES]],
    }


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"#{parts.fragment}" if parts.fragment else "") if parts.hostname == "127.0.0.1" else url


# -- the walk -------------------------------------------------------------------------------


def same_site_page(href: str, base_url: str) -> bool:
    return href.startswith(base_url + "/") and Path(urlsplit(href).path).suffix in CLICKABLE_SUFFIXES


def click_target(env, obs, base_url: str, max_elements: int, rng: random.Random) -> int | None:
    matched = match_links(ground_truth(env), obs.extras["elements"], max_elements)
    targets = [
        m["element"] for m in matched if m["element"] is not None and same_site_page(m["link"]["href"], base_url)
    ]
    return rng.choice(targets) if targets else None


def search_box(obs) -> int | None:
    boxes = [i for i, e in enumerate(obs.extras["elements"]) if e.get("editable")]
    return boxes[0] if boxes else None


def next_action(kind: str, env, obs, base_url: str, max_elements: int, rng: random.Random) -> dict | None:
    """The step of this kind to take on the page just observed: the env's action and what the floor needs to
    replay it (where the env clicks, in viewport pixels; the query); None where there is nothing to act on."""
    if kind == "scroll down":
        return {"kind": kind, "action": "Scroll [WINDOW]; [down]"}
    if kind == "scroll up":
        return {"kind": kind, "action": "Scroll [WINDOW]; [up]"}
    if kind == "back":
        return {"kind": kind, "action": "GoBack"}
    if kind == "click":
        index = click_target(env, obs, base_url, max_elements, rng)
        action = f"Click [{index}]"
    else:
        index = search_box(obs)
        action = f"Type [{index}]; [{SEARCH_QUERY}]"
    if index is None:
        return None
    point = viewport_point(obs.extras["elements"][index], env.area, env.scale)
    return {"kind": kind, "action": action, "point": point, **({"text": SEARCH_QUERY} if kind == "type" else {})}


WALK = ("scroll down", "scroll up", "click", "type")


def take_step(env, step: dict, record: dict):
    """Take one step, timed and with its commands counted; record it for the floor to replay."""
    result, ms, commands = count_commands(env, timed_step, step["action"])
    record["steps"].append((step["kind"], ms))
    for channel in CHANNELS:
        record[f"{channel}_commands"].append(commands[channel])
    record["replay"].append({**step, "url": result.observation.location})
    return result.observation


def walk(env, obs, base_url: str, steps: int, max_elements: int, rng: random.Random, record: dict) -> None:
    """Timed steps from the page just observed until record["steps"] holds `steps` (kind, ms) pairs."""
    cycle = 0
    while len(record["steps"]) < steps:
        kind = WALK[cycle % len(WALK)]
        cycle += 1
        step = next_action(kind, env, obs, base_url, max_elements, rng)
        if step is None:  # nothing to click or type here: the scrolls still fill the walk
            continue
        before = obs.location
        obs = take_step(env, step, record)
        if kind in ("click", "type") and obs.location != before and len(record["steps"]) < steps:
            obs = take_step(env, next_action("back", env, obs, base_url, max_elements, rng), record)


# -- the floor ------------------------------------------------------------------------------


def replay(floor: Floor, step: dict) -> tuple[dict, float]:
    """One step of the env's walk, as the floor takes it; the page it observed and the ms."""
    kind = step["kind"]
    if kind.startswith("scroll"):
        return timed(floor.scroll, -1 if kind == "scroll up" else 1)
    if kind == "click":
        return timed(floor.click, *step["point"])
    if kind == "type":
        return timed(floor.type, *step["point"], step["text"])
    return timed(floor.back)


def floor_run(env, url: str, record: dict) -> None:
    """The floor on the env's browser: a reset to the page, then the env's steps replayed in order. A step whose
    page is at another URL than the env's was is counted: the two walks parted ways."""
    floor = Floor(env.browser, env.cfg.settle_quiet_ms, env.cfg.settle_timeout_s)
    try:
        # from about:blank, untimed, as the env's reset leaves its last page: going from the page to its own URL
        # with another #fragment would only scroll (bash's manual is one page with four of them)
        floor.reset("about:blank")
        _, record["floor_reset_ms"] = timed(floor.reset, url)
        for step in record["replay"]:
            page, ms = replay(floor, step)
            record["floor_steps"].append((step["kind"], ms))
            record["floor_url_mismatches"] += page["url"] != step["url"]
    finally:
        floor.close()


# -- one page -------------------------------------------------------------------------------


class Bench:
    """The env, rebuilt after it breaks, and everything measured so far."""

    def __init__(self, steps_per_page: int, seed: int):
        self.steps_per_page = steps_per_page
        self.rng = random.Random(seed)
        self.env = make_env()
        self.max_elements = self.env.cfg.max_elements
        self.env_broken: list[dict] = []
        self.unexpected: list[dict] = []
        self.floor_errors: list[dict] = []

    def rebuild(self) -> None:
        close_quietly(self.env)
        self.env = make_env()

    def run_page(self, site: Site, page: Page, base_url: str) -> dict:
        url = f"{base_url}/{page.path}"
        record = {
            "site": site.name,
            "kind": page.kind,
            "path": page.path,
            "steps": [],
            "views": {},
            "webdriver_commands": [],  # per step, by command
            "devtools_commands": [],
            "replay": [],  # per step, what the floor replays
            "floor_steps": [],
            "floor_url_mismatches": 0,
        }
        phase = "warm-up reset"
        try:
            timed_reset(self.env, url)  # not timed: training resets to the same start pages again and again
            record["warmed_up"] = True
            phase = "reset"
            obs, record["reset_ms"], commands = count_commands(self.env, timed_reset, url)
            for channel in CHANNELS:
                record[f"reset_{channel}_commands"] = commands[channel]
            record["settled"] = obs.extras.get("settled")
            phase = "coverage at the top"
            record["views"]["top"] = coverage(self.env, obs, self.max_elements)
            phase = "scroll"
            scroll = next_action("scroll down", self.env, obs, base_url, self.max_elements, self.rng)
            obs = take_step(self.env, scroll, record)
            phase = "coverage after scrolling"
            record["views"]["scrolled"] = coverage(self.env, obs, self.max_elements)
            phase = "walk"
            walk(self.env, obs, base_url, self.steps_per_page, self.max_elements, self.rng, record)
        except EnvBrokenError as e:
            self.env_broken.append({"site": site.name, "page": page.path, "phase": phase, "error": str(e)[:300]})
            print(f"  EnvBrokenError during {phase}: {str(e)[:200]}; building a new env")
            self.rebuild()
            return record
        except Exception as e:  # recorded and reported; the next page starts with a reset
            self.unexpected.append(
                {"site": site.name, "page": page.path, "phase": phase, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            )
            print(f"  unexpected {type(e).__name__} during {phase}: {str(e)[:200]}")
            return record
        try:
            floor_run(self.env, url, record)
        except Exception as e:  # the floor's own failure: reported apart from the env's errors
            self.floor_errors.append({"site": site.name, "page": page.path, "error": f"{type(e).__name__}: {e}"[:300]})
            print(f"  the floor failed: {type(e).__name__}: {str(e)[:200]}")
        return record


# -- summaries ------------------------------------------------------------------------------


def percentiles(values: list[float]) -> dict | None:
    if not values:
        return None
    p50, p90 = np.percentile(values, [50, 90])
    return {"p50": round(float(p50), 1), "p90": round(float(p90), 1), "n": len(values)}


def ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def coverage_summary(views: list[dict]) -> dict:
    links = sum(v["links"] for v in views)
    listed = sum(v["listed"] for v in views)
    with_text = sum(v["listed_with_text"] for v in views)
    return {
        "links": links,
        "coverage": ratio(listed, links),
        "coverage_with_text": ratio(with_text, links),
        "elements_per_view": round(sum(v["elements"] for v in views) / len(views), 1) if views else None,
        "views_at_max_elements": sum(v["at_cap"] for v in views),
        "junk_elements": sum(v["junk"] for v in views),
    }


def verdict_examples(pages: list[dict], per_verdict: int = 3) -> dict[str, list[str]]:
    """A few links of each kind of miss, from the examples the pages kept."""
    examples: dict[str, list[str]] = {}
    for page in pages:
        for view in page["views"].values():
            for miss in view["miss_examples"] + view["text_miss_examples"]:
                shown = repr(miss["text"]) + (f" as {miss['element_text']!r}" if "element_text" in miss else "")
                kind_examples = examples.setdefault(miss["kind"], [])
                if len(kind_examples) < per_verdict:
                    kind_examples.append(f"{shown} ({page['path']})")
    return examples


def summarise(pages: list[dict]) -> dict:
    """Coverage (top view, scrolled view, both), latency and miss kinds over some pages."""
    top = [p["views"]["top"] for p in pages if "top" in p["views"]]
    scrolled = [p["views"]["scrolled"] for p in pages if "scrolled" in p["views"]]
    verdicts = Counter()
    for view in top + scrolled:
        verdicts.update(view["verdicts"])
    steps = [s for p in pages for s in p["steps"]]
    step_kinds = sorted({kind for kind, _ in steps})
    return {
        "pages": len(pages),
        "coverage": {
            "both_views": coverage_summary(top + scrolled),
            "top": coverage_summary(top),
            "scrolled": coverage_summary(scrolled),
        },
        "verdicts": dict(verdicts.most_common()),
        "examples_by_verdict": verdict_examples(pages),
        "reset_ms": percentiles([p["reset_ms"] for p in pages if "reset_ms" in p]),
        "step_ms": percentiles([ms for _, ms in steps]),
        "step_ms_by_kind": {kind: percentiles([ms for k, ms in steps if k == kind]) for kind in step_kinds},
        **floor_summary(pages, step_kinds),
        **{f"{channel}_commands": command_summary(pages, channel) for channel in CHANNELS},
    }


def floor_summary(pages: list[dict], step_kinds: list[str]) -> dict:
    """The floor's latencies over the same pages and steps, and the env's p50 and p90 as multiples of the floor's."""
    steps = [s for p in pages for s in p.get("floor_steps", [])]
    env_steps = [s for p in pages for s in p["steps"]]
    summary = {
        "floor_reset_ms": percentiles([p["floor_reset_ms"] for p in pages if "floor_reset_ms" in p]),
        "floor_step_ms": percentiles([ms for _, ms in steps]),
        "floor_step_ms_by_kind": {kind: percentiles([ms for k, ms in steps if k == kind]) for kind in step_kinds},
        "floor_url_mismatches": sum(p.get("floor_url_mismatches", 0) for p in pages),
    }
    env_by_kind = {kind: percentiles([ms for k, ms in env_steps if k == kind]) for kind in step_kinds}
    summary["ratio_to_floor"] = {
        "reset": times(percentiles([p["reset_ms"] for p in pages if "reset_ms" in p]), summary["floor_reset_ms"]),
        "step": times(percentiles([ms for _, ms in env_steps]), summary["floor_step_ms"]),
        "step_by_kind": {kind: times(env_by_kind[kind], summary["floor_step_ms_by_kind"][kind]) for kind in step_kinds},
    }
    return summary


def times(env: dict | None, floor: dict | None) -> dict | None:
    """env's p50 and p90 over floor's."""
    if not env or not floor:
        return None
    return {q: round(env[q] / floor[q], 2) if floor[q] else None for q in ("p50", "p90")}


def median_total(counts: list[dict]) -> float | None:
    """The median over `counts` of each one's total."""
    return float(np.median([sum(c.values()) for c in counts])) if counts else None


def command_summary(pages: list[dict], channel: str) -> dict | None:
    """The commands the env sent on one channel (count_commands) per timed step and reset: the median count, per
    step kind too, and the mean per step of each command."""
    per_step = [
        (kind, commands) for p in pages for (kind, _), commands in zip(p["steps"], p.get(f"{channel}_commands", []))
    ]
    resets = [p[f"reset_{channel}_commands"] for p in pages if f"reset_{channel}_commands" in p]
    if not per_step:
        return None
    by_command, reset_by_command = Counter(), Counter()
    for _, commands in per_step:
        by_command.update(commands)
    for commands in resets:
        reset_by_command.update(commands)
    return {
        "step_p50": median_total([c for _, c in per_step]),
        "reset_p50": median_total(resets),
        "step_p50_by_kind": {
            kind: median_total([c for k, c in per_step if k == kind]) for kind in sorted({k for k, _ in per_step})
        },
        "by_command": {name: round(n / len(per_step), 2) for name, n in by_command.most_common()},
        "reset_by_command": {name: round(n / len(resets), 2) for name, n in reset_by_command.most_common()},
        "steps": len(per_step),
        "resets": len(resets),
    }


# -- report ---------------------------------------------------------------------------------


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def p50_ratio(ratios: dict | None) -> str:
    return "-" if not ratios else f"{ratios['p50']:.2f}"


def p50_p90(stats: dict | None) -> str:
    return "-" if not stats else f"{stats['p50']:.0f}/{stats['p90']:.0f}"


def print_report(results: dict) -> None:
    columns = ("links", "cover", "+text", "top", "scrl", "junk")
    latency = ("reset", "floor", "x", "step", "floor", "x")
    print(f"\n{'site':<17} " + " ".join(f"{c:>6}" for c in columns) + " " + " ".join(f"{c:>9}" for c in latency))
    for name, s in [*results["sites"].items(), ("overall", results["overall"])]:
        both, top, scrolled = (s["coverage"][view] for view in ("both_views", "top", "scrolled"))
        cells = (
            both["links"],
            percent(both["coverage"]),
            percent(both["coverage_with_text"]),
            percent(top["coverage"]),
            percent(scrolled["coverage"]),
            both["junk_elements"],
        )
        ratios = s["ratio_to_floor"]
        times_cells = (
            p50_p90(s["reset_ms"]),
            p50_p90(s["floor_reset_ms"]),
            p50_ratio(ratios["reset"]),
            p50_p90(s["step_ms"]),
            p50_p90(s["floor_step_ms"]),
            p50_ratio(ratios["step"]),
        )
        print(f"{name:<17} " + " ".join(f"{c:>6}" for c in cells) + " " + " ".join(f"{c:>9}" for c in times_cells))
    print(
        "cover: visible links listed, both views; +text: listed with their text; top, scrl: cover per view;\n"
        "junk: listed elements with no text or only marks; reset, step: the env's p50/p90 ms; floor: the floor's\n"
        "p50/p90 ms on the same pages and steps; x: the env's p50 over the floor's"
    )
    overall = results["overall"]
    print("\nby step kind, p50/p90 ms: env, floor, env/floor at p50 and p90")
    for kind, env in overall["step_ms_by_kind"].items():
        floor, ratios = overall["floor_step_ms_by_kind"][kind], overall["ratio_to_floor"]["step_by_kind"][kind]
        shown = "-" if not ratios else f"{ratios['p50']}x / {ratios['p90']}x"
        print(f"  {kind:<12} {p50_p90(env):>9} {p50_p90(floor):>9}  {shown}  (n={env['n']})")
    if overall["floor_url_mismatches"]:
        print(f"floor steps that ended on another URL than the env's: {overall['floor_url_mismatches']}")
    for channel, label in (("webdriver", "WebDriver"), ("devtools", "DevTools (the env's own connection)")):
        commands = overall[f"{channel}_commands"]
        if commands and commands["by_command"]:
            print(
                f"{label} commands per step p50 {commands['step_p50']:g}, per reset p50 {commands['reset_p50']:g}; "
                "per step: " + ", ".join(f"{name} {n:g}" for name, n in commands["by_command"].items())
            )
    errors = results["errors"]
    print(
        f"env calls {errors['env_calls']}: EnvBrokenError {len(errors['env_broken'])} "
        f"({errors['env_broken_per_1000_calls']} per 1000), other exceptions {len(errors['unexpected'])}, "
        f"floor failures {len(errors['floor'])}"
    )
    print("\nverdicts on visible links, with examples:")
    for name, s in results["sites"].items():
        print(f"  {name}: " + ", ".join(f"{k} {n}" for k, n in s["verdicts"].items()))
        for kind, examples in s["examples_by_verdict"].items():
            print(f"    {kind}: " + "; ".join(examples))


# -- main -----------------------------------------------------------------------------------


def run(sites: list[Site], steps_per_page: int, seed: int) -> tuple[list[dict], Bench]:
    bench = Bench(steps_per_page, seed)
    pages = []
    try:
        for site in sites:
            server, base_url = serve(site.root)
            try:
                for page in site.pages:
                    record = bench.run_page(site, page, base_url)
                    top = record["views"].get("top", {})
                    print(
                        f"{site.name}/{page.path}: reset {record.get('reset_ms', 0):.0f} ms, "
                        f"{top.get('listed', '-')}/{top.get('links', '-')} visible links listed, "
                        f"{len(record['steps'])} steps"
                    )
                    pages.append(record)
            finally:
                server.shutdown()
                server.server_close()
    finally:
        close_quietly(bench.env)
    return pages, bench


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--steps-per-page",
        type=int,
        default=10,
        help="steps on each page, the scroll before the second coverage view included",
    )
    p.add_argument("--sites", nargs="+", help="a subset of the sites (default: all that are installed)")
    p.add_argument("--seed", type=int, default=0, help="seeds the choice of links to click")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "web_real_pages.json"))
    args = p.parse_args()
    sites, missing = available_sites(args.sites)
    if not sites:
        raise SystemExit("none of the documentation sites is installed")
    t0, load_before = time.monotonic(), os.getloadavg()[0]
    pages, bench = run(sites, args.steps_per_page, args.seed)
    # the warm-up and timed resets, the timed steps, and the calls that broke (which have no time)
    env_calls = sum(len(page["steps"]) + ("reset_ms" in page) + page.get("warmed_up", False) for page in pages) + len(
        bench.env_broken
    )
    results = {
        "command": shlex.join(["python", "benchmarks/web_real_pages.py", *sys.argv[1:]]),
        "machine": machine(),
        "seconds": round(time.monotonic() - t0, 1),
        "load_avg_before": load_before,
        "load_avg_after": os.getloadavg()[0],
        "viewport": VIEWPORT,
        "max_elements": bench.max_elements,
        "steps_per_page": args.steps_per_page,
        "seed": args.seed,
        "sites_missing": [site.name for site in missing],
        "overall": summarise(pages),
        "sites": {site.name: summarise([p for p in pages if p["site"] == site.name]) for site in sites},
        "page_kinds": {
            kind: summarise([p for p in pages if p["kind"] == kind]) for kind in sorted({p["kind"] for p in pages})
        },
        "errors": {
            "env_calls": env_calls,
            "env_broken": bench.env_broken,
            "env_broken_per_1000_calls": round(1000 * len(bench.env_broken) / max(env_calls, 1), 2),
            "unexpected": bench.unexpected,
            "floor": bench.floor_errors,
        },
        "pages": pages,
    }
    print_report(results)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"\nwrote {args.out} ({results['seconds']} s)")


if __name__ == "__main__":
    main()
