"""The AutoUI action text format, shared by the web and Android envs:

    Action Plan: [DUAL_POINT,TYPE] ; Action Decision: "action_type": "DUAL_POINT", "touch_point": "[0.4325, 0.1234]",
    "lift_point": "[0.4325, 0.1234]", "typed_text": ""

Points are normalised [y, x]; non-touch actions carry "[-1.0, -1.0]".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

ACTION_TYPES = (
    "DUAL_POINT",  # touch_point -> lift_point: a tap or a swipe
    "TYPE",  # typed_text
    "PRESS_HOME",
    "PRESS_BACK",
    "PRESS_ENTER",
    "STATUS_TASK_COMPLETE",
    "TASK_IMPOSSIBLE",
)
FIELDS = ("action_type", "touch_point", "lift_point", "typed_text")
NO_POINT = "[-1.0, -1.0]"
TAP_MAX_PX = 10**0.5

_PLAN = re.compile(r"Action Plan:", re.IGNORECASE)
_DECISION = re.compile(r"Action Decision:", re.IGNORECASE)
_KEY = re.compile(r'\s*"([A-Za-z_]+)"\s*:\s*"')
# A value's closing quote is the first unescaped one followed by the next key or by the end of the text, so
# unescaped `", "` inside typed text (which models do emit) does not end the value.
_VALUE_END = re.compile(r'\s*(?:,\s*"[A-Za-z_]+"\s*:|\}?\s*\Z)')
_SEPARATOR = re.compile(r"\s*,")
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_POINT = re.compile(rf"\s*\[\s*({_NUMBER})\s*,\s*({_NUMBER})\s*\]\s*")
_ESCAPED = re.compile(r'\\(["\\])')


class AutoUIParseError(ValueError):
    """The text is not a valid AutoUI action."""


@dataclass(frozen=True)
class AutoUIAction:
    action_type: str
    touch_yx: tuple[float, float] | None = None
    lift_yx: tuple[float, float] | None = None
    typed_text: str = ""
    plan: str = ""

    def __post_init__(self) -> None:
        if self.action_type not in ACTION_TYPES:
            raise ValueError(f"unknown AutoUI action type {self.action_type!r}; expected one of {ACTION_TYPES}")
        has_points = self.touch_yx is not None and self.lift_yx is not None
        if has_points != (self.action_type == "DUAL_POINT") or (self.touch_yx is None) != (self.lift_yx is None):
            raise ValueError(f"DUAL_POINT, and only DUAL_POINT, has touch_yx and lift_yx: {self}")


def parse_autoui(text: str) -> AutoUIAction:
    text = text or ""
    decision = _DECISION.search(text)
    if decision:
        plan, body = _parse_plan(text[: decision.start()]), text[decision.end() :]
    elif _PLAN.search(text):
        raise AutoUIParseError(f"found `Action Plan:` but no `Action Decision:` in {text[:80]!r}")
    else:
        plan, body = "", text
    fields = _parse_fields(body)
    if "action_type" not in fields:
        raise AutoUIParseError(f'the action decision has no "action_type" in {body[:80]!r}')
    action_type = fields["action_type"].strip().upper()
    if action_type not in ACTION_TYPES:
        raise AutoUIParseError(f"unknown action type {fields['action_type']!r}; expected one of {ACTION_TYPES}")
    if action_type == "TYPE" and "typed_text" not in fields:
        raise AutoUIParseError('a TYPE action needs "typed_text"')
    touch_yx = lift_yx = None
    if action_type == "DUAL_POINT":
        touch_yx, lift_yx = _required_point(fields, "touch_point"), _required_point(fields, "lift_point")
    return AutoUIAction(action_type, touch_yx, lift_yx, fields.get("typed_text", ""), plan)


def render_autoui(action: AutoUIAction) -> str:
    if _DECISION.search(action.plan):
        raise ValueError(f"a plan may not contain `Action Decision:`: {action.plan[:80]!r}")
    values = (
        action.action_type,
        _format_point(action.touch_yx),
        _format_point(action.lift_yx),
        action.typed_text,
    )
    decision = ", ".join(f'"{key}": "{_escape(value)}"' for key, value in zip(FIELDS, values))
    prefix = f"Action Plan: {action.plan} ; " if action.plan else ""
    return f"{prefix}Action Decision: {decision}"


def is_tap(
    touch_yx: tuple[float, float],
    lift_yx: tuple[float, float],
    width: float,
    height: float,
    max_px: float = TAP_MAX_PX,
) -> bool:
    """Whether touch -> lift on a width x height screen moves at most `max_px` pixels (else it is a swipe)."""
    dy = (touch_yx[0] - lift_yx[0]) * height
    dx = (touch_yx[1] - lift_yx[1]) * width
    return math.hypot(dx, dy) <= max_px


def _parse_plan(head: str) -> str:
    marker = _PLAN.search(head)
    if not marker:
        return ""
    plan = head[marker.end() :].strip()
    return plan[:-1].rstrip() if plan.endswith(";") else plan


def _parse_fields(body: str) -> dict[str, str]:
    body = body.strip()
    pos = 1 if body.startswith("{") else 0
    fields: dict[str, str] = {}
    while True:
        key_match = _KEY.match(body, pos)
        if not key_match:
            raise AutoUIParseError(f'expected `"key": "value"` at {body[pos : pos + 60]!r} in {body[:80]!r}')
        key = key_match.group(1)
        if key not in FIELDS:
            raise AutoUIParseError(f"unknown key {key!r}; expected {FIELDS}")
        if key in fields:
            raise AutoUIParseError(f"key {key!r} appears twice")
        closing = _closing_quote(body, key_match.end())
        if closing is None:
            raise AutoUIParseError(f"the value of {key!r} has no closing quote: {body[key_match.end() :][:60]!r}")
        fields[key] = _ESCAPED.sub(r"\1", body[key_match.end() : closing])
        separator = _SEPARATOR.match(body, closing + 1)
        if not separator:
            return fields
        pos = separator.end()


def _closing_quote(body: str, start: int) -> int | None:
    quote = body.find('"', start)
    while quote != -1:
        if not _is_escaped(body, quote, start) and _VALUE_END.match(body, quote + 1):
            return quote
        quote = body.find('"', quote + 1)
    return None


def _is_escaped(body: str, index: int, start: int) -> bool:
    backslashes = 0
    while index - backslashes - 1 >= start and body[index - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _required_point(fields: dict[str, str], key: str) -> tuple[float, float]:
    if key not in fields:
        raise AutoUIParseError(f'a DUAL_POINT action needs "{key}"')
    match = _POINT.fullmatch(fields[key])
    if not match:
        raise AutoUIParseError(f'{key} must be "[y, x]" with two numbers, got {fields[key][:40]!r}')
    point = (float(match.group(1)), float(match.group(2)))
    if not all(0.0 <= v <= 1.0 for v in point):
        raise AutoUIParseError(f"{key} {fields[key].strip()} is outside [0, 1]")
    return point


def _format_point(yx: tuple[float, float] | None) -> str:
    if yx is None:
        return NO_POINT
    # repr is the shortest text that parses back to the same float
    return f"[{float(yx[0])!r}, {float(yx[1])!r}]"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
