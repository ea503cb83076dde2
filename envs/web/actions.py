"""The element action space: `click [N]` and `type [N] text`, on numbered page elements."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlsys.grammar import Grammar

_ACTION = re.compile(r"^\s*(click|type)\s*\[\s*(\d+)\s*\]\s*(.*?)\s*$", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class ElementAction:
    kind: str  # "click" | "type"
    element: int
    text: str = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "element": self.element, "text": self.text}


class ParseError(ValueError):
    pass


def parse(text: str, num_elements: int) -> ElementAction:
    m = _ACTION.match(text or "")
    if not m:
        raise ParseError(f"expected `click [N]` or `type [N] text`, got {text[:80]!r}")
    kind, index, rest = m.group(1).lower(), int(m.group(2)), m.group(3)
    if index >= num_elements:
        raise ParseError(f"element [{index}] does not exist (the page has {num_elements})")
    if kind == "click":
        if rest:
            raise ParseError(f"`click [N]` takes no text, got {rest[:40]!r}")
        return ElementAction("click", index)
    if len(rest) >= 2 and rest[0] == rest[-1] and rest[0] in "\"'":
        rest = rest[1:-1]
    if not rest:
        raise ParseError("`type [N] text` needs text")
    return ElementAction("type", index, rest)


def render(action: ElementAction) -> str:
    return f"click [{action.element}]" if action.kind == "click" else f"type [{action.element}] {action.text}"


def grammar(elements: list[dict], max_text: int = 32) -> Grammar:
    clickable = tuple(f"click [{i}]" for i in range(len(elements)))
    typeable = tuple(f"type [{i}] " for i, e in enumerate(elements) if e.get("editable"))
    return Grammar(clickable, typeable, max_text)


def try_parse(text: str, num_elements: int) -> tuple[ElementAction | None, str | None]:
    try:
        return parse(text, num_elements), None
    except ParseError as e:
        return None, str(e)
