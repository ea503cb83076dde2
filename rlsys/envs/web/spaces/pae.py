"""The PAE (WebVoyager-style) space: `Thought: <free text> Action: <action>`, e.g.

Thought: The search box is [3].
Action: Type [3]; [red shoes]
"""

from __future__ import annotations

import re
from dataclasses import replace

from rlsys.core.grammar import Choice, Grammar, Int, Literal, Text
from rlsys.envs.web.spaces import ParseError, WebAction, checked_render

USAGE = (
    "Click [N], Type [N]; [text], Scroll [N or WINDOW]; [up or down], Wait, GoBack, Google, Goto [url], ANSWER; [text]"
)
DIRECTIONS = ("up", "down")

_FLAGS = re.IGNORECASE | re.DOTALL
_THOUGHT = re.compile(r"Thought:")
_ACTION = re.compile(r"Action:")
_VERB = re.compile(r"\s*(click|type|scroll|wait|go\s*back|goto|google|answer)(?![a-z])", _FLAGS)
# The rest of the action after each verb; free text runs to the last `]`, so it may contain `]` and `;`.
_FORMS = {
    "click": (re.compile(r"\s*\[\s*(\d+)\s*\]\s*", _FLAGS), "Click [N]"),
    "type": (re.compile(r"\s*\[\s*(\d+)\s*\]\s*;\s*\[(.*)\]\s*", _FLAGS), "Type [N]; [text]"),
    "scroll": (re.compile(r"\s*\[\s*(\d+|window)\s*\]\s*;\s*\[\s*([^\]]*?)\s*\]\s*", _FLAGS), "Scroll [N]; [up]"),
    "wait": (re.compile(r"\s*"), "Wait"),
    "goback": (re.compile(r"\s*"), "GoBack"),
    "google": (re.compile(r"\s*"), "Google"),
    "goto": (re.compile(r"\s*\[(.*)\]\s*", _FLAGS), "Goto [url]"),
    "answer": (re.compile(r"\s*;\s*\[(.*)\]\s*", _FLAGS), "ANSWER; [text]"),
}


def parse(text: str, num_elements: int) -> WebAction:
    thought, action_text = _split(text or "")
    verb_match = _VERB.match(action_text)
    if not verb_match:
        raise ParseError(f"unknown action {action_text.strip()[:60]!r}; expected one of: {USAGE}")
    verb = re.sub(r"\s+", "", verb_match.group(1).lower())
    pattern, usage = _FORMS[verb]
    args = pattern.fullmatch(action_text, verb_match.end())
    if not args:
        raise ParseError(f"malformed {usage.split()[0]}: expected `{usage}`, got {action_text.strip()[:80]!r}")
    return _build(verb, args.groups(), num_elements, thought)


def render(action: WebAction) -> str:
    text = f"Thought: {action.thought}\nAction: {_render_action(action)}"
    return checked_render("PAE", text, action, parse, (action.element or 0) + 1)


def grammar(elements: list[dict], max_text: int = 32, max_thought: int = 200) -> Grammar:
    """Every action valid on the page after a thought of at most `max_thought` characters. The grammar
    is narrower than `parse`: the thought has no `:` (so it never holds `Action:`), bracketed text no `]`,
    typed text and URLs are not blank, and every action is written as `render` writes it."""
    ids = tuple(str(i) for i in range(len(elements)))
    editable = tuple(str(i) for i, e in enumerate(elements) if e.get("editable"))
    bracketed = Text(max_text, forbid="]")
    forms = [
        (Literal("Click ["), Int(0, len(ids) - 1), Literal("]")) if ids else None,
        (Literal("Type ["), Choice(editable), Literal("]; ["), replace(bracketed, nonblank=True), Literal("]"))
        if editable
        else None,
        (Literal("Scroll ["), Choice(("WINDOW", *ids)), Literal("]; ["), Choice(DIRECTIONS), Literal("]")),
        (Choice(("Wait", "GoBack", "Google")),),
        (Literal("Goto ["), Choice(("http://", "https://")), Text(max_text, forbid="] ", nonblank=True), Literal("]")),
        (Literal("ANSWER; ["), bracketed, Literal("]")),
    ]
    thought = (Literal("Thought:"), Text(max_thought, forbid=":"), Literal("\nAction: "))
    return Grammar(sequences=tuple((*thought, *form) for form in forms if form is not None))


def _split(text: str) -> tuple[str, str]:
    thought = _THOUGHT.search(text)
    if not thought:
        raise ParseError(f"expected `Thought: ... Action: ...`; there is no `Thought:` in {text[:80]!r}")
    action = _ACTION.search(text, thought.end())
    if not action:
        if _ACTION.search(text):
            raise ParseError("`Thought:` must come before `Action:`")
        raise ParseError(f"expected `Thought: ... Action: ...`; there is no `Action:` in {text[:80]!r}")
    return text[thought.end() : action.start()].strip(), text[action.end() :]


def _build(verb: str, groups: tuple[str, ...], num_elements: int, thought: str) -> WebAction:
    if verb == "click":
        return WebAction("click", element=_element(groups[0], num_elements), thought=thought)
    if verb == "type":
        if not groups[1]:
            raise ParseError("`Type [N]; [text]` needs text")
        element = _element(groups[0], num_elements)
        return WebAction("type", element=element, text=groups[1], submit=True, thought=thought)
    if verb == "scroll":
        target, direction = groups[0], groups[1].lower()
        if direction not in DIRECTIONS:
            raise ParseError(f"scroll direction must be up or down, got {groups[1][:20]!r}")
        element = None if target.lower() == "window" else _element(target, num_elements)
        return WebAction("scroll", element=element, direction=direction, thought=thought)
    if verb == "goto":
        url = groups[0].strip()
        if not url.lower().startswith(("http://", "https://")):
            raise ParseError(f"Goto needs an http:// or https:// URL, got {url[:80]!r}")
        return WebAction("goto", url=url, thought=thought)
    if verb == "answer":
        return WebAction("answer", text=groups[0], thought=thought)
    return WebAction({"wait": "wait", "goback": "back", "google": "google"}[verb], thought=thought)


def _element(number: str, num_elements: int) -> int:
    index = int(number)
    if index >= num_elements:
        raise ParseError(f"element [{index}] does not exist (the page has {num_elements} elements)")
    return index


def _render_action(action: WebAction) -> str:
    kind = action.kind
    if kind == "click":
        return f"Click [{action.element}]"
    if kind == "type":
        return f"Type [{action.element}]; [{action.text}]"
    if kind == "scroll":
        target = "WINDOW" if action.element is None else action.element
        return f"Scroll [{target}]; [{action.direction}]"
    if kind == "goto":
        return f"Goto [{action.url}]"
    if kind == "answer":
        return f"ANSWER; [{action.text}]"
    simple = {"wait": "Wait", "back": "GoBack", "google": "Google"}
    if kind in simple:
        return simple[kind]
    raise ValueError(f"the PAE space has no form for {kind!r} actions: {action}")
