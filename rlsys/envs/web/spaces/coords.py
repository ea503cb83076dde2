"""The AutoUI coordinate format (see envs/autoui.py) on a web page. AutoUI text gives points as [y, x];
`WebAction` points are (x, y), both as fractions of the screenshot (the viewport, or the part of it a
suite shows: MiniWoB++'s task area)."""

from __future__ import annotations

from dataclasses import replace

from rlsys.core.grammar import Choice, Grammar, Literal, Segment, Text
from rlsys.envs.autoui_format import (
    ACTION_TYPES,
    NO_POINT,
    AutoUIAction,
    AutoUIParseError,
    is_tap,
    parse_autoui,
    render_autoui,
)
from rlsys.envs.web.spaces import ParseError, WebAction, checked_render

# Only decides tap vs swipe; points stay fractions of whatever the real viewport is.
VIEWPORT = (1024, 768)

_SIMPLE_TO_WEB = {
    "PRESS_BACK": WebAction("back"),
    "PRESS_HOME": WebAction("home"),
    "PRESS_ENTER": WebAction("key", text="Enter"),
    "STATUS_TASK_COMPLETE": WebAction("answer", text=""),
    "TASK_IMPOSSIBLE": WebAction("impossible"),
}
_SIMPLE_FROM_WEB = {action: action_type for action_type, action in _SIMPLE_TO_WEB.items()}


def parse(text: str, num_elements: int) -> WebAction:
    try:
        action = parse_autoui(text)
    except AutoUIParseError as e:
        raise ParseError(str(e)) from e
    return replace(_to_web(action), thought=action.plan)


def render(action: WebAction) -> str:
    return checked_render("coords", render_autoui(_to_autoui(action)), action, parse, 0)


def grammar(elements: list[dict], max_text: int = 32, max_thought: int = 200) -> Grammar:
    """Every AutoUI action, after a plan of at most `max_thought` characters, written as `render` writes
    it. Narrower than `parse`: the plan has no `:` (so it never holds `Action Decision:`), points are
    `[0.d, 0.d]` with one to four decimals (in [0, 1)), typed text is not blank and has no `"` or `\\`."""
    fraction = ("0.", Text(4, only="0123456789", nonblank=True))
    point = ("[", *fraction, ", ", *fraction, "]")
    plan = ("Action Plan:", Text(max_thought, forbid=":"), ' ; Action Decision: "action_type": ')
    no_points = f'"touch_point": "{NO_POINT}", "lift_point": "{NO_POINT}", "typed_text": "'
    forms = [
        ('"DUAL_POINT", "touch_point": "', *point, '", "lift_point": "', *point, '", "typed_text": ""'),
        (f'"TYPE", {no_points}', Text(max_text, forbid='"\\', nonblank=True), '"'),
        (Choice(tuple(f'"{name}", {no_points}"' for name in ACTION_TYPES[2:])),),
    ]
    return Grammar(sequences=tuple(_segments(*plan, *form) for form in forms))


def _segments(*parts: str | Segment) -> tuple[Segment, ...]:
    """Strings in a row joined into one `Literal`."""
    out: list[Segment] = []
    for part in parts:
        if isinstance(part, str):
            if out and isinstance(out[-1], Literal):
                out[-1] = Literal(out[-1].text + part)
            else:
                out.append(Literal(part))
        else:
            out.append(part)
    return tuple(out)


def _to_web(action: AutoUIAction) -> WebAction:
    if action.action_type == "DUAL_POINT":
        (y, x), (end_y, end_x) = action.touch_yx, action.lift_yx
        if is_tap(action.touch_yx, action.lift_yx, *VIEWPORT):
            return WebAction("tap", point=(x, y))
        return WebAction("swipe", point=(x, y), end=(end_x, end_y))
    if action.action_type == "TYPE":
        return WebAction("type", text=action.typed_text)
    return _SIMPLE_TO_WEB[action.action_type]


def _to_autoui(action: WebAction) -> AutoUIAction:
    plan = action.thought.strip()
    if action.kind in ("tap", "swipe") and action.point is not None:
        x, y = action.point
        end_x, end_y = action.end if action.kind == "swipe" and action.end is not None else action.point
        return AutoUIAction("DUAL_POINT", touch_yx=(y, x), lift_yx=(end_y, end_x), plan=plan)
    if action.kind == "type":
        return AutoUIAction("TYPE", typed_text=action.text, plan=plan)
    simple = _SIMPLE_FROM_WEB.get(replace(action, thought=""))
    if simple is None:
        raise ValueError(f"the coords space has no form for {action}")
    return AutoUIAction(simple, plan=plan)
