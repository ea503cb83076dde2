"""Android action texts (envs/android/actions.py): AutoUI and CogAgent outputs, round trips, malformed text."""

from __future__ import annotations

import pytest

from rlsys.envs.android.actions import (
    FORMATS,
    KINDS,
    SWIPES,
    ActionParseError,
    AndroidAction,
    parse_action,
    render_action,
    to_pixels,
)

SCREEN = (1080, 2280)
NO_POINT = '"touch_point": "[-1.0, -1.0]", "lift_point": "[-1.0, -1.0]"'


def autoui(plan: str, action_type: str, touch: str = "[-1.0, -1.0]", lift: str = "[-1.0, -1.0]", text: str = ""):
    """Raw AutoUI-Base output; typed text goes in unescaped, as the model writes it."""
    return (
        f'Action Plan: {plan} ; Action Decision: "action_type": "{action_type}", "touch_point": "{touch}", '
        f'"lift_point": "{lift}", "typed_text": "{text}"'
    )


AUTOUI_CORPUS = [
    (
        'Action Plan: [DUAL_POINT,TYPE,PRESS_ENTER,STATUS_TASK_COMPLETE] ; Action Decision: "action_type": '
        '"DUAL_POINT", "touch_point": "[0.1347, 0.5004]", "lift_point": "[0.1347, 0.5004]", "typed_text": ""',
        AndroidAction("tap", point=(0.5004, 0.1347), thought="[DUAL_POINT,TYPE,PRESS_ENTER,STATUS_TASK_COMPLETE]"),
    ),
    (
        autoui("[TYPE,PRESS_ENTER,STATUS_TASK_COMPLETE]", "TYPE", text="best buy"),
        AndroidAction("type", text="best buy", thought="[TYPE,PRESS_ENTER,STATUS_TASK_COMPLETE]"),
    ),
    (
        autoui("[TYPE,PRESS_ENTER]", "TYPE", text='Paris", "London'),
        AndroidAction("type", text='Paris", "London', thought="[TYPE,PRESS_ENTER]"),
    ),
    (
        autoui("[TYPE]", "TYPE", text='the "best" pizza, near me'),
        AndroidAction("type", text='the "best" pizza, near me', thought="[TYPE]"),
    ),
    (
        autoui("[TYPE,PRESS_ENTER]", "TYPE", text="café 東京 🍕"),
        AndroidAction("type", text="café 東京 🍕", thought="[TYPE,PRESS_ENTER]"),
    ),
    (
        autoui("[TYPE]", "TYPE", text="AT&T store hours"),
        AndroidAction("type", text="AT&T store hours", thought="[TYPE]"),
    ),
    (
        autoui("[TYPE]", "TYPE", text="50%s off {0}"),
        AndroidAction("type", text="50%s off {0}", thought="[TYPE]"),
    ),
    (
        autoui("[PRESS_ENTER,STATUS_TASK_COMPLETE]", "PRESS_ENTER"),
        AndroidAction("enter", thought="[PRESS_ENTER,STATUS_TASK_COMPLETE]"),
    ),
    (
        autoui("[PRESS_HOME,DUAL_POINT]", "PRESS_HOME"),
        AndroidAction("home", thought="[PRESS_HOME,DUAL_POINT]"),
    ),
    (
        autoui("[PRESS_BACK,DUAL_POINT,STATUS_TASK_COMPLETE]", "PRESS_BACK"),
        AndroidAction("back", thought="[PRESS_BACK,DUAL_POINT,STATUS_TASK_COMPLETE]"),
    ),
    (
        autoui("[STATUS_TASK_COMPLETE]", "STATUS_TASK_COMPLETE"),
        AndroidAction("complete", thought="[STATUS_TASK_COMPLETE]"),
    ),
    (
        autoui("[TASK_IMPOSSIBLE]", "TASK_IMPOSSIBLE"),
        AndroidAction("impossible", thought="[TASK_IMPOSSIBLE]"),
    ),
    (  # scroll down the page: the finger moves up
        autoui("[DUAL_POINT,DUAL_POINT]", "DUAL_POINT", "[0.8, 0.5]", "[0.2, 0.5]"),
        AndroidAction("swipe", point=(0.5, 0.8), end=(0.5, 0.2), thought="[DUAL_POINT,DUAL_POINT]"),
    ),
    (
        autoui("[DUAL_POINT]", "DUAL_POINT", "[0.5, 0.9]", "[0.5, 0.1]"),
        AndroidAction("swipe", point=(0.9, 0.5), end=(0.1, 0.5), thought="[DUAL_POINT]"),
    ),
    (  # moves 0.108 px across and 0.456 px down: a tap at the touch point
        autoui("[DUAL_POINT,TYPE]", "DUAL_POINT", "[0.5123, 0.4321]", "[0.5125, 0.4322]"),
        AndroidAction("tap", point=(0.4321, 0.5123), thought="[DUAL_POINT,TYPE]"),
    ),
    (  # moves 4.56 px down: a swipe
        autoui("[DUAL_POINT,TYPE]", "DUAL_POINT", "[0.5123, 0.4321]", "[0.5143, 0.4321]"),
        AndroidAction("swipe", point=(0.4321, 0.5123), end=(0.4321, 0.5143), thought="[DUAL_POINT,TYPE]"),
    ),
    (  # no plan, lower-case type, odd spacing
        '"action_type" : "press_back" ,  "touch_point": "[-1.0, -1.0]", "lift_point": "[-1.0, -1.0]", "typed_text": ""',
        AndroidAction("back"),
    ),
]

COGAGENT_CORPUS = [
    (
        "Plan: 1. Open Chrome. 2. Search for the weather.\nNext Action: Tap the Chrome icon on the home screen.\n"
        "Grounded Operation: tap [[521,862]]",
        AndroidAction(
            "tap",
            point=(0.521, 0.862),
            thought="Plan: 1. Open Chrome. 2. Search for the weather.\nNext Action: Tap the Chrome icon on the home "
            "screen.",
        ),
    ),
    (
        "Next Action: tap the search bar.  Grounded Operation:  Tap [[ 500 , 300 ]]  ",
        AndroidAction("tap", point=(0.5, 0.3), thought="Next Action: tap the search bar."),
    ),
    (
        'Next Action: type the query.\nGrounded Operation: type "weather in San Francisco"',
        AndroidAction("type", text="weather in San Francisco", thought="Next Action: type the query."),
    ),
    (
        'Next Action: type the quote.\nGrounded Operation: type "He said "hi", "bye" & 50%s"',
        AndroidAction("type", text='He said "hi", "bye" & 50%s', thought="Next Action: type the quote."),
    ),
    (
        "I am on the wrong app; go home first.\nGrounded Operation: press HOME",
        AndroidAction("home", thought="I am on the wrong app; go home first."),
    ),
    (
        "Next Action: go back.\nGrounded Operation: Press back",
        AndroidAction("back", thought="Next Action: go back."),
    ),
    (
        "Next Action: submit the search.\ngrounded operation: press enter",
        AndroidAction("enter", thought="Next Action: submit the search."),
    ),
    (
        "Next Action: scroll to see more results.\nGrounded Operation: swipe up",
        AndroidAction("swipe", point=(0.5, 0.5), end=(0.5, 0.2), thought="Next Action: scroll to see more results."),
    ),
    (
        "Next Action: scroll back.\nGrounded Operation: swipe down",
        AndroidAction("swipe", point=(0.5, 0.2), end=(0.5, 0.5), thought="Next Action: scroll back."),
    ),
    (
        "Grounded Operation: swipe Left",
        AndroidAction("swipe", point=(0.8, 0.5), end=(0.2, 0.5)),
    ),
    (
        "Next Action: previous page.\nGrounded Operation: swipe right",
        AndroidAction("swipe", point=(0.2, 0.5), end=(0.8, 0.5), thought="Next Action: previous page."),
    ),
    (
        "The weather is shown on the screen.\nGrounded Operation: task complete",
        AndroidAction("complete", thought="The weather is shown on the screen."),
    ),
    (
        "This phone has no such app.\nGrounded Operation: Task Impossible",
        AndroidAction("impossible", thought="This phone has no such app."),
    ),
    ("tap [[0,1000]]", AndroidAction("tap", point=(0.0, 1.0))),  # no marker: the whole text is the operation
]


@pytest.mark.parametrize("text, expected", AUTOUI_CORPUS)
def test_autoui_corpus(text, expected):
    assert parse_action(text, "autoui", SCREEN) == expected


@pytest.mark.parametrize("text, expected", COGAGENT_CORPUS)
def test_cogagent_corpus(text, expected):
    assert parse_action(text, "cogagent") == expected


@pytest.mark.parametrize("fmt, corpus", [("autoui", AUTOUI_CORPUS), ("cogagent", COGAGENT_CORPUS)])
def test_corpus_renders_back(fmt, corpus):
    for _, expected in corpus:
        assert parse_action(render_action(expected, fmt), fmt) == expected


def test_corpus_covers_every_kind():
    assert {a.kind for _, a in AUTOUI_CORPUS} == set(KINDS)
    assert {a.kind for _, a in COGAGENT_CORPUS} == set(KINDS)


def test_rendered_text():
    assert render_action(AndroidAction("tap", point=(0.5, 0.134)), "cogagent") == "Grounded Operation: tap [[500,134]]"
    assert render_action(AndroidAction("swipe", point=(0.5, 0.5), end=(0.5, 0.2), thought=" go "), "cogagent") == (
        "go\nGrounded Operation: swipe up"
    )
    assert render_action(AndroidAction("type", text='a "b"'), "cogagent") == 'Grounded Operation: type "a "b""'
    assert render_action(AndroidAction("tap", point=(0.5004, 0.1347), thought="[DUAL_POINT]"), "autoui") == (
        'Action Plan: [DUAL_POINT] ; Action Decision: "action_type": "DUAL_POINT", "touch_point": "[0.1347, 0.5004]", '
        '"lift_point": "[0.1347, 0.5004]", "typed_text": ""'
    )
    assert render_action(AndroidAction("complete"), "autoui") == (
        'Action Decision: "action_type": "STATUS_TASK_COMPLETE", ' + NO_POINT + ', "typed_text": ""'
    )


TEXTS = [
    "",
    "hello",
    'Paris", "London',
    '", "typed_text": "',
    'say "hi"',
    "back\\slash\\",
    "日本 🎉",
    "a\nb",
    "%s & {}",
]
THOUGHTS = ["", "[DUAL_POINT,TYPE]", "Next Action: tap the bar.\nthen type", "semi; colon inside"]


def _expressible(fmt):
    points = [(0.0, 0.0), (1.0, 1.0), (0.5, 0.134), (0.999, 0.001)]
    if fmt == "autoui":
        points += [(0.4321, 0.5123), (1 / 3, 2 / 3), (0.123456789, 0.987654321)]
    actions = [AndroidAction("tap", point=p) for p in points]
    actions += [AndroidAction("swipe", point=start, end=end) for start, end in SWIPES.values()]
    if fmt == "autoui":
        actions += [
            AndroidAction("swipe", point=(0.1, 0.9), end=(0.123456, 0.1)),
            AndroidAction("swipe", (0, 0), (1, 1)),
        ]
    actions += [AndroidAction("type", text=t) for t in TEXTS]
    actions += [AndroidAction(kind) for kind in ("home", "back", "enter", "complete", "impossible")]
    return [AndroidAction(a.kind, a.point, a.end, a.text, thought) for a in actions for thought in THOUGHTS]


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip(fmt):
    actions = _expressible(fmt)
    assert len(actions) > 80
    for action in actions:
        assert parse_action(render_action(action, fmt), fmt) == action


def test_round_trip_on_another_screen():
    swipe = AndroidAction("swipe", point=(0.5, 0.5), end=(0.503, 0.5))  # 3.24 px on 1080 wide, 2.16 on 720
    assert parse_action(render_action(swipe, "autoui"), "autoui") == swipe
    with pytest.raises(ValueError, match="is a tap"):
        render_action(swipe, "autoui", screen_size=(720, 1280))


@pytest.mark.parametrize(
    "action, fmt, reason",
    [
        (AndroidAction("swipe", point=(0.5, 0.5), end=(0.5, 0.1)), "cogagent", "swipes only along"),
        (AndroidAction("swipe", point=(0.5, 0.2), end=(0.5, 0.5 + 1e-9)), "cogagent", "swipes only along"),
        (AndroidAction("tap", point=(0.1347, 0.5)), "cogagent", "0-1000 grid"),
        (AndroidAction("tap", point=(0.5, 0.5005)), "cogagent", "0-1000 grid"),
        (AndroidAction("swipe", point=(0.5, 0.5), end=(0.5 + 3 / 1080, 0.5)), "autoui", "is a tap"),
        (AndroidAction("swipe", point=(0.5, 0.5), end=(0.5, 0.5)), "autoui", "is a tap"),
        (AndroidAction("home", thought="x Grounded Operation: tap [[1,1]]"), "cogagent", "not a CogAgent operation"),
        # the thought's marker comes first, so the text parses as a different action
        (AndroidAction("type", text="b", thought='Grounded Operation: type "a'), "cogagent", "renders as"),
        (AndroidAction("home", thought="x Action Decision: y"), "autoui", "Action Decision"),
    ],
)
def test_inexpressible_actions(action, fmt, reason):
    with pytest.raises(ValueError, match=reason) as error:
        render_action(action, fmt)
    assert not isinstance(error.value, ActionParseError)
    assert f"the {fmt} format cannot express {action}" in str(error.value)


def test_tap_vs_swipe_threshold():
    touch = "[0.5, 0.5]"
    cases = [
        (f"[0.5, {0.5 + 3 / 1080!r}]", "tap"),  # 3 px across
        (f"[0.5, {0.5 + 4 / 1080!r}]", "swipe"),  # 4 px across
        (f"[{0.5 + 3 / 2280!r}, 0.5]", "tap"),  # 3 px down
        (f"[{0.5 - 4 / 2280!r}, 0.5]", "swipe"),  # 4 px up
        (f"[{0.5 + 2 / 2280!r}, {0.5 - 2 / 1080!r}]", "tap"),  # 2.83 px diagonally
        (f"[{0.5 + 3 / 2280!r}, {0.5 + 2 / 1080!r}]", "swipe"),  # 3.61 px diagonally
    ]
    for lift, kind in cases:
        action = parse_action(autoui("[DUAL_POINT]", "DUAL_POINT", touch, lift), "autoui", SCREEN)
        assert action.kind == kind, lift
        assert action.point == (0.5, 0.5)
    # the screen size decides: 3 px on 1080 wide is 6 px on 2160 wide
    three_px = autoui("[DUAL_POINT]", "DUAL_POINT", touch, f"[0.5, {0.5 + 3 / 1080!r}]")
    assert parse_action(three_px, "autoui", (2160, 2280)).kind == "swipe"
    assert parse_action(three_px, "autoui", (1080, 2280)).kind == "tap"
    assert parse_action(three_px, "autoui").kind == "tap"  # the default screen is 1080x2280


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("   \n", "empty"),
        (autoui("[CLICK]", "CLICK"), "unknown action type 'CLICK'"),
        ('Action Decision: "action_type": "DUAL_POINT", "touch_point": "[0.5, 0.5]"', "lift_point"),
        ('Action Decision: "action_type": "TYPE", ' + NO_POINT, "typed_text"),
        ('Action Decision: "touch_point": "[0.5, 0.5]", "lift_point": "[0.5, 0.5]"', "action_type"),
        (autoui("[DUAL_POINT]", "DUAL_POINT", "[1.2, 0.5]", "[1.2, 0.5]"), "outside"),
        (autoui("[DUAL_POINT]", "DUAL_POINT", "[0.5, -0.1]", "[0.5, 0.5]"), "outside"),
        (autoui("[DUAL_POINT]", "DUAL_POINT", "[0.5]", "[0.5, 0.5]"), "two numbers"),
        (autoui("[DUAL_POINT]", "DUAL_POINT", "[a, b]", "[0.5, 0.5]"), "two numbers"),
        ("Action Plan: [DUAL_POINT,TYPE]", "no `Action Decision:`"),
        ("I will tap the search bar.", "expected"),
        ('Action Decision: "action_type": "TYPE", "typed_text": "unterminated', "no closing quote"),
    ],
)
def test_malformed_autoui(text, message):
    with pytest.raises(ActionParseError, match=message):
        parse_action(text, "autoui")


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("Grounded Operation: tap [[1200, 5]]", r"must be 0-1000, got 'tap \[\[1200, 5\]\]'"),
        ("Grounded Operation: tap [[500, 1001]]", "must be 0-1000"),
        ("Grounded Operation: tap [[-5, 10]]", "must be 0-1000"),
        ("Grounded Operation: tap [[500]]", r"not a CogAgent operation: 'tap \[\[500\]\]'"),
        ("Grounded Operation: tap [[500.5, 300]]", "not a CogAgent operation"),
        ("Grounded Operation: tap [500, 300]", "not a CogAgent operation"),
        ("Grounded Operation: tap [[500, 300]] then type", "not a CogAgent operation"),
        ("Next Action: scroll.\nGrounded Operation: swipe diagonal", "not a CogAgent operation: 'swipe diagonal'"),
        ("Grounded Operation: swipe", "not a CogAgent operation"),
        ("Grounded Operation: press menu", "'press menu'"),
        ("Grounded Operation: task done", "'task done'"),
        ("Grounded Operation: click [[1,2]]", "not a CogAgent operation"),
        ("Grounded Operation: type hello", "not a CogAgent operation"),
        ('Grounded Operation: type "unterminated', "not a CogAgent operation"),
        ('Grounded Operation: type "a" and more', "not a CogAgent operation"),
        ("Grounded Operation:", "not a CogAgent operation: ''"),
        ("Next Action: I should tap the search bar.", "not a CogAgent operation"),
        ("Grounded Operation: pressHOME", "not a CogAgent operation"),
    ],
)
def test_malformed_cogagent(text, message):
    with pytest.raises(ActionParseError, match=message):
        parse_action(text, "cogagent")


def test_unknown_format():
    for call in (lambda: parse_action("tap [[1,1]]", "seeclick"), lambda: render_action(AndroidAction("home"), "x")):
        with pytest.raises(ValueError, match="unknown action format") as error:
            call()
        assert not isinstance(error.value, ActionParseError)


def test_android_action_validation():
    with pytest.raises(ValueError, match="unknown action kind 'click'"):
        AndroidAction("click", point=(0.5, 0.5))
    for bad in (
        dict(kind="tap"),
        dict(kind="swipe", point=(0.5, 0.5)),
        dict(kind="tap", point=(0.5, 0.5), end=(0.5, 0.6)),
        dict(kind="home", point=(0.5, 0.5)),
        dict(kind="back", text="x"),
        dict(kind="tap", point=(1.5, 0.5)),
        dict(kind="swipe", point=(0.5, 0.5), end=(0.5, -0.01)),
        dict(kind="tap", point=(0.5, float("nan"))),
    ):
        with pytest.raises(ValueError):
            AndroidAction(**bad)


def test_to_dict():
    swipe = AndroidAction("swipe", point=(0.5, 0.8), end=(0.5, 0.2), thought="scroll")
    assert swipe.to_dict() == {"kind": "swipe", "point": [0.5, 0.8], "end": [0.5, 0.2], "thought": "scroll"}
    assert AndroidAction("type", text="hi").to_dict() == {"kind": "type", "text": "hi"}
    assert AndroidAction("type").to_dict() == {"kind": "type"}
    assert AndroidAction("home").to_dict() == {"kind": "home"}
    assert AndroidAction(**swipe.to_dict()) == swipe  # lists come back as tuples of floats
    assert AndroidAction("tap", point=[1, 0]).point == (1.0, 0.0)


def test_to_pixels():
    assert to_pixels((0.5, 0.5), SCREEN) == (540, 1140)
    assert to_pixels((0.0, 0.0), SCREEN) == (0, 0)
    assert to_pixels((1.0, 1.0), SCREEN) == (1079, 2279)
    assert to_pixels((-0.2, 1.7), SCREEN) == (0, 2279)
    assert to_pixels((0.5004, 0.1347), SCREEN) == (540, 307)
    assert all(isinstance(v, int) for v in to_pixels((0.5004, 0.1347), SCREEN))
    # fractions made from pixels (as AitW's are) come back to the same pixels
    for px in range(1080):
        assert to_pixels((px / 1080, px / 2280), SCREEN) == (px, px)
