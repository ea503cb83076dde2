"""The compact element space for small policies: `click [N]` and `type [N] text`."""

from __future__ import annotations

import re

from rlsys.core.grammar import Grammar
from rlsys.envs.web.spaces import ParseError, WebAction

_ACTION = re.compile(r"^\s*(click|type)\s*\[\s*(\d+)\s*\]\s*(.*?)\s*$", re.IGNORECASE | re.DOTALL)


def parse(text: str, num_elements: int) -> WebAction:
    m = _ACTION.match(text or "")
    if not m:
        raise ParseError(f"expected `click [N]` or `type [N] text`, got {(text or '')[:80]!r}")
    kind, index, rest = m.group(1).lower(), int(m.group(2)), m.group(3)
    if index >= num_elements:
        raise ParseError(f"element [{index}] does not exist (the page has {num_elements})")
    if kind == "click":
        if rest:
            raise ParseError(f"`click [N]` takes no text, got {rest[:40]!r}")
        return WebAction("click", index)
    if len(rest) >= 2 and rest[0] == rest[-1] and rest[0] in "\"'":
        rest = rest[1:-1]
    if not rest:
        raise ParseError("`type [N] text` needs text")
    return WebAction("type", index, rest)


def render(action: WebAction) -> str:
    if action.kind == "click":
        return f"click [{action.element}]"
    if action.kind == "type" and action.element is not None and not action.submit:
        return f"type [{action.element}] {action.text}"
    raise ValueError(f"the element space has no form for {action}")


def grammar(elements: list[dict], max_text: int = 32) -> Grammar:
    clickable = tuple(f"click [{i}]" for i in range(len(elements)))
    typeable = tuple(f"type [{i}] " for i, e in enumerate(elements) if e.get("editable"))
    return Grammar(clickable, typeable, max_text)
