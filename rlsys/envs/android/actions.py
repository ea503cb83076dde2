"""Android in the Wild action texts: what a model emits <-> `AndroidAction`. Two formats.

AutoUI (envs/autoui.py; points are [y, x] fractions, a DUAL_POINT is a tap or a swipe by how far it moves):

    Action Plan: [DUAL_POINT,TYPE,PRESS_ENTER] ; Action Decision: "action_type": "DUAL_POINT",
    "touch_point": "[0.1347, 0.5004]", "lift_point": "[0.1347, 0.5004]", "typed_text": ""

CogAgent (reasoning, then the operation; taps are [[x,y]] on a 0-1000 grid, swipes are four fixed vectors):

    Next action: open the search bar. Grounded Operation: tap [[500,134]]

`AndroidAction` points are (x, y) fractions of the screen.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace

from rlsys.envs.autoui_format import TAP_MAX_PX, AutoUIAction, AutoUIParseError, is_tap, parse_autoui, render_autoui

KINDS = ("tap", "swipe", "type", "home", "back", "enter", "complete", "impossible")
FORMATS = ("autoui", "cogagent")
SCREEN = (1080, 2280)  # (width, height) in device pixels

# (start, end) as (x, y) fractions: the fixed vectors CogAgent's AitW setup swipes along.
SWIPES = {
    "up": ((0.5, 0.5), (0.5, 0.2)),
    "down": ((0.5, 0.2), (0.5, 0.5)),
    "left": ((0.8, 0.5), (0.2, 0.5)),
    "right": ((0.2, 0.5), (0.8, 0.5)),
}
_SWIPE_DIRECTION = {vector: direction for direction, vector in SWIPES.items()}
_AUTOUI_TYPE = {
    "home": "PRESS_HOME",
    "back": "PRESS_BACK",
    "enter": "PRESS_ENTER",
    "complete": "STATUS_TASK_COMPLETE",
    "impossible": "TASK_IMPOSSIBLE",
}
_AUTOUI_KIND = {action_type: kind for kind, action_type in _AUTOUI_TYPE.items()}
_COGAGENT_OP = {
    "home": "press home",
    "back": "press back",
    "enter": "press enter",
    "complete": "task complete",
    "impossible": "task impossible",
}
_COGAGENT_KIND = {op: kind for kind, op in _COGAGENT_OP.items()}

_GRID = 1000
_MARKER = re.compile(r"grounded\s+operation\s*:", re.IGNORECASE)
_TAP = re.compile(r"tap\s*\[\[\s*(-?\d+)\s*,\s*(-?\d+)\s*\]\]", re.IGNORECASE)
# Greedy: the text runs from the first quote to the last, so it may itself hold quotes.
_TYPE = re.compile(r'type\s*"(.*)"', re.IGNORECASE | re.DOTALL)
_WORDS = re.compile(r"(press|task|swipe)\s+([a-z]+)", re.IGNORECASE)


class ActionParseError(ValueError):
    """The model's text is not a valid action; the env treats it as a no-op and records the message."""


@dataclass(frozen=True)
class AndroidAction:
    kind: str
    point: tuple[float, float] | None = None  # (x, y) fractions of the screen; tap and swipe
    end: tuple[float, float] | None = None  # swipe
    text: str = ""  # type
    thought: str = ""  # AutoUI's action plan / CogAgent's reasoning before the operation

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown action kind {self.kind!r}; expected one of {KINDS}")
        for name in ("point", "end"):
            if getattr(self, name) is not None:
                x, y = (float(v) for v in getattr(self, name))  # lists too, as `to_dict` writes them
                if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):
                    raise ValueError(f"{name} {(x, y)} is not a fraction of the screen")
                object.__setattr__(self, name, (x, y))
        has_point, has_end = self.point is not None, self.end is not None
        if has_point != (self.kind in ("tap", "swipe")) or has_end != (self.kind == "swipe"):
            raise ValueError(f"tap and swipe, and only they, have a point; only swipe has an end: {self}")
        if self.text and self.kind != "type":
            raise ValueError(f"only type has text: {self}")

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if v not in (None, "")}


# What `examples` offers: one action of each kind (every swipe), at the centre of the screen where there is a point.
_EXAMPLES = (
    AndroidAction("tap", point=(0.5, 0.5)),
    *(AndroidAction("swipe", point=start, end=end) for start, end in SWIPES.values()),
    AndroidAction("type", text="text"),
    *(AndroidAction(kind) for kind in ("home", "back", "enter", "complete", "impossible")),
)


def examples(fmt: str, screen_size: tuple[int, int] = SCREEN) -> list[str]:
    """Texts in `fmt` of actions the env carries out: one of each kind the format can write."""
    texts = []
    for action in _EXAMPLES:
        try:
            texts.append(render_action(action, fmt, screen_size))
        except ValueError:  # a kind the format has no form for
            continue
    return texts


def parse_action(text: str, fmt: str, screen_size: tuple[int, int] = SCREEN) -> AndroidAction:
    """`screen_size` (width, height) only decides whether an AutoUI DUAL_POINT is a tap or a swipe."""
    _check_format(fmt)
    if not text or not text.strip():
        raise ActionParseError("the action text is empty")
    return _parse_autoui(text, screen_size) if fmt == "autoui" else _parse_cogagent(text)


def render_action(action: AndroidAction, fmt: str, screen_size: tuple[int, int] = SCREEN) -> str:
    """The text a model would emit for `action` (its thought stripped); ValueError for what `fmt` cannot express."""
    _check_format(fmt)
    action = replace(action, thought=action.thought.strip())
    try:
        text = _render_autoui(action, screen_size) if fmt == "autoui" else _render_cogagent(action)
        parsed = parse_action(text, fmt, screen_size)
    except ValueError as e:
        raise ValueError(f"the {fmt} format cannot express {action}: {e}") from e
    # Whatever does not survive the round trip (e.g. a thought holding the format's marker) is not expressible.
    if parsed != action:
        raise ValueError(f"the {fmt} format cannot express {action}; it renders as {parsed}")
    return text


def to_pixels(point: tuple[float, float], screen_size: tuple[int, int]) -> tuple[int, int]:
    """(x, y) fractions -> the nearest integer pixel on a (width, height) screen, clamped onto it."""
    x, y = (min(max(round(v * size), 0), size - 1) for v, size in zip(point, screen_size))
    return x, y


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown action format {fmt!r}; expected one of {FORMATS}")


def _parse_autoui(text: str, screen_size: tuple[int, int]) -> AndroidAction:
    try:
        action = parse_autoui(text)
    except AutoUIParseError as e:
        raise ActionParseError(str(e)) from e
    plan = action.plan
    if action.action_type == "DUAL_POINT":
        (y, x), (end_y, end_x) = action.touch_yx, action.lift_yx
        if is_tap(action.touch_yx, action.lift_yx, *screen_size):
            return AndroidAction("tap", point=(x, y), thought=plan)
        return AndroidAction("swipe", point=(x, y), end=(end_x, end_y), thought=plan)
    if action.action_type == "TYPE":
        return AndroidAction("type", text=action.typed_text, thought=plan)
    return AndroidAction(_AUTOUI_KIND[action.action_type], thought=plan)


def _render_autoui(action: AndroidAction, screen_size: tuple[int, int]) -> str:
    plan = action.thought
    if action.kind in ("tap", "swipe"):
        (x, y), (end_x, end_y) = action.point, action.end or action.point
        if action.kind == "swipe" and is_tap((y, x), (end_y, end_x), *screen_size):
            raise ValueError(f"a move of at most {TAP_MAX_PX:.3g} px on a {screen_size} screen is a tap")
        return render_autoui(AutoUIAction("DUAL_POINT", (y, x), (end_y, end_x), plan=plan))
    if action.kind == "type":
        return render_autoui(AutoUIAction("TYPE", typed_text=action.text, plan=plan))
    return render_autoui(AutoUIAction(_AUTOUI_TYPE[action.kind], plan=plan))


def _parse_cogagent(text: str) -> AndroidAction:
    marker = _MARKER.search(text)
    thought, op = (text[: marker.start()].strip(), text[marker.end() :].strip()) if marker else ("", text.strip())
    if match := _TAP.fullmatch(op):
        x, y = int(match[1]), int(match[2])
        if not (0 <= x <= _GRID and 0 <= y <= _GRID):
            raise ActionParseError(f"tap coordinates must be 0-{_GRID}, got {op!r}")
        return AndroidAction("tap", point=(x / _GRID, y / _GRID), thought=thought)
    if match := _TYPE.fullmatch(op):
        return AndroidAction("type", text=match[1], thought=thought)
    if match := _WORDS.fullmatch(op):
        verb, word = match[1].lower(), match[2].lower()
        if verb == "swipe" and word in SWIPES:
            start, end = SWIPES[word]
            return AndroidAction("swipe", point=start, end=end, thought=thought)
        if f"{verb} {word}" in _COGAGENT_KIND:
            return AndroidAction(_COGAGENT_KIND[f"{verb} {word}"], thought=thought)
    raise ActionParseError(
        f'not a CogAgent operation: {op[:80]!r}; expected tap [[x,y]], type "text", press home|back|enter, '
        "swipe up|down|left|right or task complete|impossible"
    )


def _render_cogagent(action: AndroidAction) -> str:
    if action.kind == "tap":
        x, y = (round(v * _GRID) for v in action.point)
        if (x / _GRID, y / _GRID) != action.point:
            raise ValueError(f"CogAgent taps lie on a 0-{_GRID} grid")
        op = f"tap [[{x},{y}]]"
    elif action.kind == "swipe":
        if (action.point, action.end) not in _SWIPE_DIRECTION:
            raise ValueError(f"CogAgent swipes only along {SWIPES}")
        op = f"swipe {_SWIPE_DIRECTION[action.point, action.end]}"
    elif action.kind == "type":
        op = f'type "{action.text}"'
    else:
        op = _COGAGENT_OP[action.kind]
    return f"{action.thought}\nGrounded Operation: {op}" if action.thought else f"Grounded Operation: {op}"
