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
- Errors. EnvBrokenError from reset or step per 1000 env calls (resets and steps); after one the
  env is closed and a new one built, as the runner does, and the walk goes on with the next page.
  Any other exception is recorded with its page and the benchmark goes on too.

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
from web_step_latency import machine

from rlsys.core.env import EnvBrokenError
from rlsys.core.types import Task

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


def click_action(env, obs, base_url: str, max_elements: int, rng: random.Random) -> str | None:
    matched = match_links(ground_truth(env), obs.extras["elements"], max_elements)
    targets = [
        m["element"] for m in matched if m["element"] is not None and same_site_page(m["link"]["href"], base_url)
    ]
    return f"Click [{rng.choice(targets)}]" if targets else None


def type_action(obs) -> str | None:
    boxes = [i for i, e in enumerate(obs.extras["elements"]) if e.get("editable")]
    return f"Type [{boxes[0]}]; [{SEARCH_QUERY}]" if boxes else None


def next_action(kind: str, env, obs, base_url: str, max_elements: int, rng: random.Random) -> str | None:
    if kind == "scroll down":
        return "Scroll [WINDOW]; [down]"
    if kind == "scroll up":
        return "Scroll [WINDOW]; [up]"
    if kind == "click":
        return click_action(env, obs, base_url, max_elements, rng)
    return type_action(obs)


WALK = ("scroll down", "scroll up", "click", "type")


def walk(env, obs, base_url: str, steps: int, max_elements: int, rng: random.Random, record: dict) -> None:
    """Timed steps from the page just observed until record["steps"] holds `steps` (kind, ms) pairs."""
    cycle = 0
    while len(record["steps"]) < steps:
        kind = WALK[cycle % len(WALK)]
        cycle += 1
        action = next_action(kind, env, obs, base_url, max_elements, rng)
        if action is None:  # nothing to click or type here: the scrolls still fill the walk
            continue
        before = obs.location
        result, ms = timed_step(env, action)
        obs = result.observation
        record["steps"].append((kind, ms))
        if kind in ("click", "type") and obs.location != before and len(record["steps"]) < steps:
            result, ms = timed_step(env, "GoBack")
            obs = result.observation
            record["steps"].append(("back", ms))


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

    def rebuild(self) -> None:
        close_quietly(self.env)
        self.env = make_env()

    def run_page(self, site: Site, page: Page, base_url: str) -> dict:
        record = {"site": site.name, "kind": page.kind, "path": page.path, "steps": [], "views": {}}
        phase = "reset"
        try:
            obs, record["reset_ms"] = timed_reset(self.env, f"{base_url}/{page.path}")
            record["settled"] = obs.extras.get("settled")
            phase = "coverage at the top"
            record["views"]["top"] = coverage(self.env, obs, self.max_elements)
            phase = "scroll"
            result, ms = timed_step(self.env, "Scroll [WINDOW]; [down]")
            record["steps"].append(("scroll down", ms))
            phase = "coverage after scrolling"
            record["views"]["scrolled"] = coverage(self.env, result.observation, self.max_elements)
            phase = "walk"
            walk(self.env, result.observation, base_url, self.steps_per_page, self.max_elements, self.rng, record)
        except EnvBrokenError as e:
            self.env_broken.append({"site": site.name, "page": page.path, "phase": phase, "error": str(e)[:300]})
            print(f"  EnvBrokenError during {phase}: {str(e)[:200]}; building a new env")
            self.rebuild()
        except Exception as e:  # recorded and reported; the next page starts with a reset
            self.unexpected.append(
                {"site": site.name, "page": page.path, "phase": phase, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            )
            print(f"  unexpected {type(e).__name__} during {phase}: {str(e)[:200]}")
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
    }


# -- report ---------------------------------------------------------------------------------


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def p50_p90(stats: dict | None) -> str:
    return "-" if not stats else f"{stats['p50']:.0f}/{stats['p90']:.0f}"


def print_report(results: dict) -> None:
    columns = ("links", "cover", "+text", "top", "scrl", "junk")
    print(f"\n{'site':<17} " + " ".join(f"{c:>6}" for c in columns) + f" {'reset':>11} {'step':>11}")
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
        print(
            f"{name:<17} "
            + " ".join(f"{c:>6}" for c in cells)
            + f" {p50_p90(s['reset_ms']):>11} {p50_p90(s['step_ms']):>11}"
        )
    print(
        "cover: visible links listed, both views; +text: listed with their text; top, scrl: cover per view;\n"
        "junk: listed elements with no text or only marks; reset, step: p50/p90 ms"
    )
    overall = results["overall"]
    print(
        "\nstep p50 ms by kind: "
        + ", ".join(f"{k} {p50_p90(v)} (n={v['n']})" for k, v in overall["step_ms_by_kind"].items())
    )
    errors = results["errors"]
    print(
        f"env calls {errors['env_calls']}: EnvBrokenError {len(errors['env_broken'])} "
        f"({errors['env_broken_per_1000_calls']} per 1000), other exceptions {len(errors['unexpected'])}"
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
    # the timed resets and steps, and the calls that broke (which have no time)
    env_calls = sum(len(page["steps"]) + ("reset_ms" in page) for page in pages) + len(bench.env_broken)
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
        },
        "pages": pages,
    }
    print_report(results)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"\nwrote {args.out} ({results['seconds']} s)")


if __name__ == "__main__":
    main()
