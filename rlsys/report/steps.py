"""What the report shows of a step besides its stored fields: where its action lands on the screenshot, the
inputs its policy was given, its page location shortened against the step before, and its timings rounded.
Points and boxes are in the screenshot's pixels: a web element's box as the env recorded it, an (x, y)
fraction of the screen (a tap, a swipe, an Android action) times the screenshot's size."""

from __future__ import annotations

import os

from rlsys.core.types import Observation
from rlsys.report.page import is_number

SCROLL_ARROW = 0.2  # of the screenshot's shorter side
DIRECTIONS = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}
LABEL_TEXT = 80  # characters of typed or answered text in an action's label
MIN_ELIDED = 16  # characters of a location's shared prefix worth replacing by "…"
SIGNIFICANT = 3  # digits of a timing


def element_box(elements: list, index: int) -> list[float] | None:
    element = elements[index] if 0 <= index < len(elements) else None
    box = element.get("box") if isinstance(element, dict) else None
    if isinstance(box, list) and len(box) == 4 and all(is_number(v) for v in box):
        return [float(v) for v in box]
    return None


def click_point(element: dict, box: list[float]) -> list[float]:
    """Where the web env clicks an element: the point of it that the page's hit test reached, else its box's
    centre."""
    point = element.get("point")
    if isinstance(point, list) and len(point) == 2 and all(is_number(v) for v in point):
        return [float(v) for v in point]
    return [box[0] + box[2] / 2, box[1] + box[3] / 2]


def screen_point(fraction, size: tuple[int, int]) -> list[float] | None:
    if isinstance(fraction, list | tuple) and len(fraction) == 2 and all(is_number(v) for v in fraction):
        return [fraction[0] * size[0], fraction[1] * size[1]]
    return None


def action_label(action: dict) -> str:
    """The action in a few words: `click [3]`, `type [1] "hello" + Enter`, `scroll down`, `tap (0.25, 0.50)`."""
    shown = lambda text: f'"{text[:LABEL_TEXT]}{"…" if len(text) > LABEL_TEXT else ""}"'
    fraction = lambda p: f"({p[0]:.2f}, {p[1]:.2f})" if screen_point(p, (1, 1)) else ""
    element = action.get("element")
    parts = [
        str(action.get("kind")),
        f"[{element}]" if is_number(element) else "",
        str(action.get("direction") or ""),
        fraction(action.get("point")),
        "→ " + fraction(action.get("end")) if action.get("end") else "",
        shown(str(action["text"])) if action.get("text") else "",
        str(action.get("url") or ""),
        "+ Enter" if action.get("submit") else "",
    ]
    return " ".join(p for p in parts if p)


def action_overlay(action, elements: list, size: tuple[int, int]) -> dict | None:
    """What to draw over a step's screenshot of `size` (width, height): the action's label; the acted-on
    element's box; the point a click, type or tap lands on; the arrow of a swipe (finger from point to end) or of
    a scroll (from the element's centre, or the screen's, in its direction); the typed text."""
    if not isinstance(action, dict) or not action.get("kind"):
        return None
    kind, width, height = action["kind"], *size
    overlay: dict = {"label": action_label(action)}
    element, box = action.get("element"), None
    if is_number(element):
        box = element_box(elements, int(element))
        if box is None and elements:  # an observation without its element list (imported data) says nothing
            overlay["label"] += f" (no element [{element}] on this screen)"
        elif box is not None:
            overlay["box"] = box
            if kind in ("click", "type"):
                overlay["point"] = click_point(elements[int(element)], box)
    point, end = screen_point(action.get("point"), size), screen_point(action.get("end"), size)
    if point:
        overlay["point"] = point
        if end:
            overlay["arrow"] = point + end
    dx, dy = DIRECTIONS.get(action.get("direction"), (0, 0))
    if kind == "scroll" and (dx or dy):
        x, y = (box[0] + box[2] / 2, box[1] + box[3] / 2) if box else (width / 2, height / 2)
        length = SCROLL_ARROW * min(width, height)
        overlay["arrow"] = [x, y, x + dx * length, y + dy * length]
    if kind == "type" and action.get("text"):
        overlay["text"] = str(action["text"]) + (" ⏎" if action.get("submit") else "")
    for name in ("box", "point", "arrow"):
        if name in overlay:
            overlay[name] = [round(v, 1) for v in overlay[name]]
    return overlay


def policy_input(obs: Observation) -> dict:
    """What the policy was given at this step, besides the screenshot and the element list: the instruction, its
    earlier actions in this episode (the runner's list, else the env's recent history) and the feedback on the
    last one. A policy with a prompt built it from these (the step's info keeps the prompt as the model read it);
    element_pointer reads them without one."""
    extras = obs.extras
    earlier = extras.get("previous_actions")
    if not isinstance(earlier, list):
        history = extras.get("history") if isinstance(extras.get("history"), list) else []
        earlier = [h.get("action", "") for h in history if isinstance(h, dict)]
    return {"instruction": obs.task, "earlier": [str(a) for a in earlier], "feedback": extras.get("feedback")}


def shortened_locations(locations: list[str | None]) -> list[str | None]:
    """Each location as shown under its step: `same as step N` where it is the step before's (N the first step
    of the run of them), the rest after a long prefix it shares with the step before's (`…/shoes?page=2`),
    else in full."""
    shown, first = [], 0
    for i, location in enumerate(locations):
        before = locations[i - 1] if i else None
        if location and location == before:
            shown.append(f"same as step {first}")
            continue
        first = i
        cut = os.path.commonprefix([location or "", before or ""]).rfind("/")
        shown.append("…" + location[cut:] if location and cut >= MIN_ELIDED else location)
    return shown


def rounded(timings: dict | None) -> dict | None:
    """Timings to SIGNIFICANT digits (the page shows each in ms or s)."""
    if not timings:
        return None
    return {k: float(f"{v:.{SIGNIFICANT}g}") if is_number(v) else v for k, v in timings.items()}
