"""The AutoUI text format and the PAE and coords web action spaces: round trips and malformed text."""

from __future__ import annotations

import ast
import inspect
from dataclasses import replace

import pytest

import rlsys.envs.autoui_format as autoui
from rlsys.envs.autoui_format import AutoUIAction, AutoUIParseError, is_tap, parse_autoui, render_autoui
from rlsys.envs.web import spaces
from rlsys.envs.web.spaces import ParseError, WebAction
from rlsys.envs.web.spaces import coords as coords_space
from rlsys.envs.web.spaces import pae as pae_space

TRICKY_TEXTS = [
    "hello",
    "red, green, blue",
    'say "hi", ok',
    '", "typed_text": "',
    "back\\slash",
    "ends with a backslash\\",
    '\\"',
    "C:\\new\\table",
    "日本語 — émoji 🎉",
    "a]; [b]",
    "semi; colon",
    "line one\nline two",
    "Action Decision: nested",
    "  padded  ",
]

SAMPLE = (
    'Action Plan: [DUAL_POINT,TYPE] ; Action Decision: "action_type": "DUAL_POINT", '
    '"touch_point": "[0.4325, 0.1234]", "lift_point": "[0.4325, 0.1234]", "typed_text": ""'
)


def decision(action_type, touch="[-1.0, -1.0]", lift="[-1.0, -1.0]", typed=""):
    return (
        f'Action Decision: "action_type": "{action_type}", "touch_point": "{touch}", '
        f'"lift_point": "{lift}", "typed_text": "{typed}"'
    )


# ---------------------------------------------------------------- AutoUI format


def test_autoui_parses_the_model_format():
    action = parse_autoui(SAMPLE)
    assert action == AutoUIAction("DUAL_POINT", (0.4325, 0.1234), (0.4325, 0.1234), "", "[DUAL_POINT,TYPE]")
    assert render_autoui(action) == SAMPLE


def test_autoui_plan_is_optional_and_braces_are_accepted():
    assert parse_autoui(decision("PRESS_HOME")) == AutoUIAction("PRESS_HOME")
    bare = '{"action_type": "TYPE", "touch_point": "[-1.0, -1.0]", "lift_point": "[-1.0, -1.0]", "typed_text": "x"}'
    assert parse_autoui(bare) == AutoUIAction("TYPE", typed_text="x")


def test_autoui_keeps_commas_and_unescaped_quotes_in_model_text():
    assert parse_autoui(decision("TYPE", typed="red, green, blue")).typed_text == "red, green, blue"
    assert parse_autoui(decision("TYPE", typed='say "hi", ok')).typed_text == 'say "hi", ok'


def test_autoui_action_type_is_case_insensitive_and_points_are_ignored_for_non_touch_types():
    assert parse_autoui(decision("press_back", touch="junk")) == AutoUIAction("PRESS_BACK")


@pytest.mark.parametrize(
    "action",
    [
        AutoUIAction("DUAL_POINT", (0.4325, 0.1234), (0.4325, 0.1234)),
        AutoUIAction("DUAL_POINT", (0.0, 1.0), (1.0, 0.0), plan="swipe up"),
        AutoUIAction("DUAL_POINT", (1e-05, 0.1 + 0.2), (0.333333333333, 0.5)),
        *(AutoUIAction(t) for t in autoui.ACTION_TYPES if t != "DUAL_POINT"),
        *(AutoUIAction("TYPE", typed_text=text) for text in TRICKY_TEXTS),
        AutoUIAction("TYPE", typed_text=""),
        AutoUIAction("TYPE", typed_text="x", plan="[TYPE] ;"),
        AutoUIAction("STATUS_TASK_COMPLETE", plan='plan with "quotes", Action Plan: and ; semicolons'),
    ],
)
def test_autoui_round_trip(action):
    assert parse_autoui(render_autoui(action)) == action


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (decision("CLICK"), "unknown action type 'CLICK'"),
        (decision("DUAL_POINT", touch="[a, 0.2]", lift="[0.1, 0.2]"), "two numbers"),
        (decision("DUAL_POINT", touch="[0.5]", lift="[0.1, 0.2]"), "two numbers"),
        (decision("DUAL_POINT", touch="[0.1, 0.2]", lift="[0.1, 0.2, 0.3]"), "two numbers"),
        (decision("DUAL_POINT", touch="[nan, 0.2]", lift="[0.1, 0.2]"), "two numbers"),
        (decision("DUAL_POINT", touch="[1.5, 0.2]", lift="[0.1, 0.2]"), "outside [0, 1]"),
        (decision("DUAL_POINT"), "outside [0, 1]"),
        ('Action Decision: "action_type": "DUAL_POINT", "touch_point": "[0.1, 0.2]"', 'needs "lift_point"'),
        ('Action Decision: "action_type": "TYPE"', 'needs "typed_text"'),
        ('Action Decision: "typed_text": "x"', 'no "action_type"'),
        ('Action Decision: "action_type": "TYPE", "text": "x"', "unknown key 'text'"),
        ('Action Decision: "action_type": "TYPE", "action_type": "TYPE"', "appears twice"),
        ('Action Decision: "action_type": "TYPE', "no closing quote"),
        ('Action Decision: "action_type": "TYPE" trailing', "no closing quote"),
        ("Action Plan: [TYPE] ; the model stopped here", "no `Action Decision:`"),
        ("I will tap the search bar", "expected"),
        ("", "expected"),
    ],
)
def test_autoui_malformed_text_raises_with_a_useful_message(text, message):
    with pytest.raises(AutoUIParseError) as error:
        parse_autoui(text)
    assert message in str(error.value)
    assert isinstance(error.value, ValueError)


def test_autoui_action_rejects_inconsistent_fields():
    with pytest.raises(ValueError, match="unknown AutoUI action type"):
        AutoUIAction("SCROLL")
    with pytest.raises(ValueError, match="DUAL_POINT"):
        AutoUIAction("DUAL_POINT")
    with pytest.raises(ValueError, match="DUAL_POINT"):
        AutoUIAction("PRESS_HOME", (0.1, 0.1), (0.1, 0.1))


def test_autoui_render_rejects_a_plan_that_would_split_wrongly():
    with pytest.raises(ValueError, match="Action Decision"):
        render_autoui(AutoUIAction("PRESS_HOME", plan="then Action Decision: oops"))


@pytest.mark.parametrize(
    ("dx_px", "dy_px", "tap"),
    [
        (0, 0, True),
        (3.16, 0, True),
        (3.17, 0, False),
        (0, 3.16, True),
        (0, 3.17, False),
        (3, 0.99, True),
        (3, 1.01, False),
    ],
)
def test_is_tap_threshold_is_sqrt_10_pixels(dx_px, dy_px, tap):
    width, height = 1000, 500
    touch = (0.5, 0.5)
    lift = (0.5 + dy_px / height, 0.5 + dx_px / width)
    assert is_tap(touch, lift, width, height) is tap
    assert is_tap(lift, touch, width, height) is tap


def test_is_tap_scales_y_by_height_and_x_by_width():
    # 0.004 of 1000 px is 4 px (a swipe) but 0.004 of 500 px is 2 px (a tap)
    assert not is_tap((0.5, 0.5), (0.5, 0.504), 1000, 500)
    assert is_tap((0.5, 0.5), (0.504, 0.5), 1000, 500)
    assert is_tap((0.5, 0.5), (0.5, 0.504), 1000, 500, max_px=5)


def test_autoui_imports_nothing_web_specific():
    imported = set()
    for node in ast.walk(ast.parse(inspect.getsource(autoui))):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert not [name for name in imported if "web" in name or name.startswith(("envs", "rlsys"))]


# ---------------------------------------------------------------- the PAE space

PAE_ACTIONS = [
    WebAction("click", element=0),
    WebAction("click", element=9, thought="The login button is [9]."),
    *(WebAction("type", element=3, text=text, submit=True, thought="type it") for text in TRICKY_TEXTS),
    WebAction("scroll", element=4, direction="down"),
    WebAction("scroll", element=None, direction="up", thought="see more"),
    WebAction("wait"),
    WebAction("back", thought="wrong page"),
    WebAction("google"),
    WebAction("goto", url="https://example.com/a?b=[1]&c=d"),
    WebAction("goto", url="http://localhost:8000/"),
    *(WebAction("answer", text=text) for text in TRICKY_TEXTS),
    WebAction("answer", text=""),
    WebAction("click", element=1, thought="multi\nline thought with [brackets]; Thought: and ANSWER; [x]"),
]


@pytest.mark.parametrize("action", PAE_ACTIONS)
def test_pae_round_trip(action):
    assert pae_space.parse(pae_space.render(action), 10) == action


@pytest.mark.parametrize(
    ("action", "text"),
    [
        (WebAction("click", element=3, thought="t"), "Thought: t\nAction: Click [3]"),
        (WebAction("type", element=2, text="x", submit=True), "Thought: \nAction: Type [2]; [x]"),
        (WebAction("scroll", direction="down"), "Thought: \nAction: Scroll [WINDOW]; [down]"),
        (WebAction("scroll", element=1, direction="up"), "Thought: \nAction: Scroll [1]; [up]"),
        (WebAction("wait"), "Thought: \nAction: Wait"),
        (WebAction("back"), "Thought: \nAction: GoBack"),
        (WebAction("google"), "Thought: \nAction: Google"),
        (WebAction("goto", url="https://a.b"), "Thought: \nAction: Goto [https://a.b]"),
        (WebAction("answer", text="42"), "Thought: \nAction: ANSWER; [42]"),
    ],
)
def test_pae_render_format(action, text):
    assert pae_space.render(action) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Thought:I see it.\nAction:  click[ 3 ]  ", WebAction("click", element=3, thought="I see it.")),
        ("Thought: x Action: CLICK [3]", WebAction("click", element=3, thought="x")),
        ("Thought: x\nAction: type [2] ; [a]; [b]]", WebAction("type", 2, "a]; [b]", submit=True, thought="x")),
        ("Thought: x\nAction: SCROLL [window] ; [ Down ]", WebAction("scroll", direction="down", thought="x")),
        ("Thought: x\nAction: Go Back", WebAction("back", thought="x")),
        ("Thought: x\nAction: goback", WebAction("back", thought="x")),
        ("Thought: x\nAction: GOOGLE", WebAction("google", thought="x")),
        ("Thought: x\nAction: wait", WebAction("wait", thought="x")),
        ("Thought: x\nAction: goto [ HTTPS://a.b/c ]", WebAction("goto", url="HTTPS://a.b/c", thought="x")),
        ("Thought: x\nAction: answer;[42]", WebAction("answer", text="42", thought="x")),
        ("Sure.\nThought:\n  x  \nAction: Wait", WebAction("wait", thought="x")),
    ],
)
def test_pae_parse_is_flexible_about_case_and_whitespace(text, expected):
    assert pae_space.parse(text, 5) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Action: Click [1]", "no `Thought:`"),
        ("Click [1]", "no `Thought:`"),
        ("Thought: I should click", "no `Action:`"),
        ("Action: Click [1] Thought: because", "`Thought:` must come before `Action:`"),
        ("Thought: x Action: Hover [1]", "unknown action 'Hover [1]'"),
        ("Thought: x Action: Clicking [1]", "unknown action"),
        ("Thought: x Action: ", "unknown action"),
        ("Thought: x Action: Click [5]", "element [5] does not exist (the page has 5 elements)"),
        ("Thought: x Action: Type [7]; [hi]", "element [7] does not exist"),
        ("Thought: x Action: Scroll [5]; [up]", "element [5] does not exist"),
        ("Thought: x Action: Scroll [1]; [left]", "up or down, got 'left'"),
        ("Thought: x Action: Scroll [WINDOW]", "malformed Scroll"),
        ("Thought: x Action: Goto [ftp://example.com]", "http:// or https://"),
        ("Thought: x Action: Goto [www.example.com]", "http:// or https://"),
        ("Thought: x Action: Type [1]; []", "needs text"),
        ("Thought: x Action: Type [1] hello", "malformed Type"),
        ("Thought: x Action: Click 3", "malformed Click"),
        ("Thought: x Action: Click [3] please", "malformed Click"),
        ("Thought: x Action: Click [-1]", "malformed Click"),
        ("Thought: x Action: Wait a bit", "malformed Wait"),
        ("Thought: x Action: ANSWER [42]", "malformed ANSWER"),
        ("", "no `Thought:`"),
        ("\x00garbage ]]][[[", "no `Thought:`"),
    ],
)
def test_pae_malformed_text_raises_with_a_useful_message(text, message):
    with pytest.raises(ParseError) as error:
        pae_space.parse(text, 5)
    assert message in str(error.value)


@pytest.mark.parametrize(
    "action",
    [
        WebAction("tap", point=(0.1, 0.2)),
        WebAction("swipe", point=(0.1, 0.2), end=(0.5, 0.5)),
        WebAction("key", text="Enter"),
        WebAction("home"),
        WebAction("impossible"),
        WebAction("click"),
        WebAction("type", element=1, text="x", submit=False),
        WebAction("type", element=None, text="x", submit=True),
        WebAction("type", element=1, text="", submit=True),
        WebAction("scroll", element=1, direction="left"),
        WebAction("goto", url="example.com"),
        WebAction("click", element=1, text="stray"),
        WebAction("click", element=1, thought="my plan. Action: Click [2]"),
    ],
)
def test_pae_render_rejects_what_it_cannot_express(action):
    with pytest.raises(ValueError, match="PAE space"):
        pae_space.render(action)


# ---------------------------------------------------------------- the coords space


def test_coords_dual_point_converts_yx_text_to_xy_points():
    tap = coords_space.parse(decision("DUAL_POINT", touch="[0.2, 0.7]", lift="[0.2, 0.7]"), 0)
    assert tap == WebAction("tap", point=(0.7, 0.2))
    swipe = coords_space.parse(decision("DUAL_POINT", touch="[0.2, 0.7]", lift="[0.8, 0.6]"), 0)
    assert swipe == WebAction("swipe", point=(0.7, 0.2), end=(0.6, 0.8))


@pytest.mark.parametrize(
    ("dx_px", "dy_px", "kind"),
    [(3.1, 0, "tap"), (3.2, 0, "swipe"), (0, 3.1, "tap"), (0, 3.2, "swipe"), (3, 0.99, "tap"), (3, 1.01, "swipe")],
)
def test_coords_tap_or_swipe_on_a_1024x768_viewport(dx_px, dy_px, kind):
    assert coords_space.VIEWPORT == (1024, 768)
    lift = f"[{0.5 + dy_px / 768!r}, {0.5 + dx_px / 1024!r}]"
    assert coords_space.parse(decision("DUAL_POINT", touch="[0.5, 0.5]", lift=lift), 0).kind == kind


@pytest.mark.parametrize(
    ("action_type", "expected"),
    [
        ("PRESS_BACK", WebAction("back")),
        ("PRESS_HOME", WebAction("home")),
        ("PRESS_ENTER", WebAction("key", text="Enter")),
        ("STATUS_TASK_COMPLETE", WebAction("answer", text="")),
        ("TASK_IMPOSSIBLE", WebAction("impossible")),
        ("TYPE", WebAction("type", element=None, text="red, green, blue")),
    ],
)
def test_coords_maps_each_autoui_type(action_type, expected):
    text = "Action Plan: [PLAN] ; " + decision(action_type, typed="red, green, blue")
    assert coords_space.parse(text, 0) == replace(expected, thought="[PLAN]")


COORDS_ACTIONS = [
    WebAction("tap", point=(0.1234, 0.4325)),
    WebAction("tap", point=(0.0, 1.0), thought="[DUAL_POINT]"),
    WebAction("swipe", point=(0.5, 0.9), end=(0.5, 0.1), thought="scroll down"),
    WebAction("swipe", point=(0.5, 0.5), end=(0.5 + 4 / 1024, 0.5)),
    *(WebAction("type", text=text) for text in TRICKY_TEXTS),
    WebAction("back"),
    WebAction("home"),
    WebAction("key", text="Enter"),
    WebAction("answer", text="", thought="done"),
    WebAction("impossible"),
]


@pytest.mark.parametrize("action", COORDS_ACTIONS)
def test_coords_round_trip(action):
    assert coords_space.parse(coords_space.render(action), 0) == action


def test_coords_render_tap_has_touch_equal_to_lift_in_yx_order():
    rendered = parse_autoui(coords_space.render(WebAction("tap", point=(0.25, 0.75), thought="p")))
    assert rendered == AutoUIAction("DUAL_POINT", (0.75, 0.25), (0.75, 0.25), plan="p")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (decision("LONG_PRESS"), "unknown action type 'LONG_PRESS'"),
        (decision("DUAL_POINT", touch="[0.1, 1.2]", lift="[0.1, 0.2]"), "outside [0, 1]"),
        (decision("DUAL_POINT", touch="[0.1, x]", lift="[0.1, 0.2]"), "two numbers"),
        ("tap the button", "expected"),
    ],
)
def test_coords_malformed_text_raises_parse_error(text, message):
    with pytest.raises(ParseError) as error:
        coords_space.parse(text, 3)
    assert message in str(error.value)


@pytest.mark.parametrize(
    "action",
    [
        WebAction("click", element=1),
        WebAction("type", element=1, text="x"),
        WebAction("type", text="x", submit=True),
        WebAction("swipe", point=(0.5, 0.5), end=(0.5 + 2 / 1024, 0.5)),
        WebAction("swipe", point=(0.5, 0.5)),
        WebAction("tap"),
        WebAction("tap", point=(1.5, 0.5)),
        WebAction("answer", text="42"),
        WebAction("key", text="Tab"),
        WebAction("scroll", direction="down"),
        WebAction("google"),
    ],
)
def test_coords_render_rejects_what_it_cannot_express(action):
    with pytest.raises(ValueError, match="coords space"):
        coords_space.render(action)


# ---------------------------------------------------------------- registry


def test_spaces_registry_returns_these_modules_with_grammars():
    assert spaces.get("pae") is pae_space
    assert spaces.get("coords") is coords_space
    assert pae_space.grammar([{"editable": True}]).accepts("Thought: x\nAction: Type [0]; [a]")
    assert coords_space.grammar([{"editable": True}]).accepts(coords_space.render(WebAction("back", thought="x")))
    action, error = spaces.try_parse(pae_space, "Thought: x Action: Click [9]", 2)
    assert action is None and "element [9]" in error
