"""Pluggable web action spaces. Each module turns model text into a `WebAction` and back:

parse(text, num_elements) -> WebAction   (raises ParseError on malformed text)
render(action) -> str                    (parse(render(a)) == a)
grammar(elements) -> Grammar | None      (for constrained decoding, where the space has one)
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, replace
from types import ModuleType

SPACES = ("element", "pae", "coords")

# What the env does for each kind of action.
KINDS = (
    "click",  # element
    "type",  # element (None: the focused element), text, submit (press Enter afterwards)
    "scroll",  # element (None: the window), direction up|down|left|right
    "wait",
    "back",
    "goto",  # url
    "google",  # the configured search engine
    "home",  # the task's start page
    "key",  # text: a key name, e.g. "Enter"
    "tap",  # point (x, y) as fractions of the screenshot
    "swipe",  # point -> end, fractions of the screenshot
    "answer",  # text; ends the episode
    "impossible",  # the agent gives up; ends the episode
)
TERMINAL = frozenset({"answer", "impossible"})


class ParseError(ValueError):
    """The model's text is not a valid action; the env reports it to the agent and the step counts."""


@dataclass(frozen=True)
class WebAction:
    kind: str
    element: int | None = None
    text: str = ""
    submit: bool = False
    direction: str = ""
    url: str = ""
    point: tuple[float, float] | None = None
    end: tuple[float, float] | None = None
    thought: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown action kind {self.kind!r}; expected one of {KINDS}")
        for name in ("point", "end"):
            if getattr(self, name) is not None:  # lists too, as `to_dict` writes them
                object.__setattr__(self, name, tuple(float(v) for v in getattr(self, name)))

    def to_dict(self) -> dict:
        """The fields that are set; `WebAction(**d)` gives the action back. Compared by identity, not `==`:
        element 0 and coordinate 0 are values (`0 == False`), only None, False and "" are unset."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if not _unset(v)}


def _unset(value) -> bool:
    return value is None or value is False or (isinstance(value, str) and not value)


# What `examples` offers besides the elements: one action of each element-free kind a space may write.
_ELEMENT_FREE = (
    WebAction("scroll", direction="down"),
    WebAction("wait"),
    WebAction("back"),
    WebAction("google"),
    WebAction("home"),
    WebAction("key", text="Enter"),
    WebAction("tap", point=(0.5, 0.5)),
    WebAction("swipe", point=(0.5, 0.8), end=(0.5, 0.2)),
    WebAction("type", text="text"),  # into the focused element
    WebAction("answer", text="done"),
    WebAction("answer"),
    WebAction("impossible"),
)


def examples(space: ModuleType, elements: list[dict]) -> list[str]:
    """Texts in `space` of actions the env carries out on a page with these elements: a click on each element,
    text typed into each editable one, and one of each element-free kind the space can write."""
    actions = [WebAction("click", i) for i in range(len(elements))]
    for i in (i for i, e in enumerate(elements) if e.get("editable")):  # a space types with Enter after, or not
        actions += [WebAction("type", i, text="text"), WebAction("type", i, text="text", submit=True)]
    texts = []
    for action in (*actions, *_ELEMENT_FREE):
        try:
            text = space.render(action)
            space.parse(text, len(elements))
        except ValueError:  # a kind the space has no form for (ParseError is a ValueError too)
            continue
        texts.append(text)
    return texts


def get(name: str) -> ModuleType:
    if name not in SPACES:
        raise ValueError(f"unknown action space {name!r}; expected one of {SPACES}")
    return importlib.import_module(f"rlsys.envs.web.spaces.{name}")


def try_parse(space: ModuleType, text: str, num_elements: int) -> tuple[WebAction | None, str | None]:
    try:
        return space.parse(text, num_elements), None
    except ParseError as e:
        return None, str(e)


def checked_render(space: str, text: str, action: WebAction, parse, num_elements: int) -> str:
    """`text` if it parses back to `action`; what does not survive the round trip (an empty text,
    a swipe shorter than a tap, ...) is something the space cannot express."""
    try:
        parsed = parse(text, num_elements)
    except ParseError as e:
        raise ValueError(f"the {space} space cannot express {action}: {e}") from e
    if parsed != replace(action, thought=action.thought.strip()):
        raise ValueError(f"the {space} space cannot express {action}")
    return text
