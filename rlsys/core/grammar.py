"""Action grammars for constrained decoding.

An env describes the actions valid in the current observation. The compact form lists complete
strings (`click [3]`) and heads followed by free text that ends the action (`type [2] `). The
general form is a set of sequences, each a run of segments (`Literal`, `Choice`, `Int`, `Text`):
`Thought:`, a free thought without `:`, then `\\nAction: Click [`, an element id, `]`. A policy
that decodes under the grammar can only emit parseable actions, so RL can start from an untrained
model.

Both forms are matched character by character (`Matcher`): literal segments next to each other are
one literal (their product), and free text sits between literals. A token never spans a literal and
free text: the decoder (rlsys.policies.grammar_decoding) allows, after a prefix, the tokens that
continue a literal or that are free text on their own.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache
from itertools import product

PRINTABLE = frozenset(chr(c) for c in range(32, 127))
LAST_CHAR = chr(0x10FFFF)  # `text + LAST_CHAR` sorts after the strings that begin with `text` (but those holding it)
MAX_CACHED_PREFIXES = 8192  # per grammar: a few generations' prefixes, character by character


@dataclass(frozen=True)
class Literal:
    text: str


@dataclass(frozen=True)
class Choice:
    options: tuple[str, ...]


@dataclass(frozen=True)
class Int:
    """A decimal integer in [lo, hi], written without leading zeros."""

    lo: int
    hi: int


@dataclass(frozen=True)
class Text:
    """Free text of at most `max` characters: printable ones not in `forbid`, or only those in `only`;
    `nonblank`: it must hold a character other than a space."""

    max: int
    forbid: str = ""
    only: str = ""
    nonblank: bool = False

    @property
    def chars(self) -> frozenset[str]:
        return _chars(self.forbid, self.only)


Segment = Literal | Choice | Int | Text


@lru_cache(maxsize=256)
def _chars(forbid: str, only: str) -> frozenset[str]:
    return frozenset(only) & PRINTABLE if only else PRINTABLE - set(forbid)


@dataclass(frozen=True)
class Grammar:
    choices: tuple[str, ...] = ()
    text_prefixes: tuple[str, ...] = ()
    max_text: int = 32
    sequences: tuple[tuple[Segment, ...], ...] = ()

    def matcher(self) -> Matcher:
        return _matcher(self)

    def allowed_next(self, prefix: str) -> tuple[frozenset[str], bool]:
        """Characters that may follow `prefix`, and whether the action may end here."""
        matcher = self.matcher()
        states = matcher.states(prefix)
        return matcher.next_chars(states), matcher.can_end(states)

    def accepts(self, text: str) -> bool:
        matcher = self.matcher()
        return matcher.can_end(matcher.states(text))

    def to_dict(self) -> dict:
        d = {"choices": list(self.choices), "text_prefixes": list(self.text_prefixes), "max_text": self.max_text}
        if self.sequences:
            d["sequences"] = [[_segment_to_dict(s) for s in seq] for seq in self.sequences]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Grammar:
        sequences = tuple(tuple(_segment_from_dict(s) for s in seq) for seq in d.get("sequences", ()))
        return cls(tuple(d.get("choices", ())), tuple(d.get("text_prefixes", ())), d.get("max_text", 32), sequences)


def _segment_to_dict(segment: Segment) -> dict:
    if isinstance(segment, Literal):
        return {"literal": segment.text}
    if isinstance(segment, Choice):
        return {"choice": list(segment.options)}
    if isinstance(segment, Int):
        return {"int": [segment.lo, segment.hi]}
    d = {"text": segment.max}
    if segment.forbid:
        d["forbid"] = segment.forbid
    if segment.only:
        d["only"] = segment.only
    if segment.nonblank:
        d["nonblank"] = True
    return d


def _segment_from_dict(d: dict) -> Segment:
    if "literal" in d:
        return Literal(d["literal"])
    if "choice" in d:
        return Choice(tuple(d["choice"]))
    if "int" in d:
        lo, hi = d["int"]
        return Int(int(lo), int(hi))
    if "text" in d:
        return Text(int(d["text"]), d.get("forbid", ""), d.get("only", ""), bool(d.get("nonblank", False)))
    raise ValueError(f"unknown grammar segment {d!r}: expected one of the keys literal, choice, int, text")


# -- matching


@dataclass(frozen=True)
class Node:
    """One part of one or more sequences (those that agree up to it): a sorted tuple of literals, or free
    text; `nexts`: the parts that may follow; `final`: whether a sequence ends with it."""

    part: tuple[str, ...] | Text
    nexts: tuple[int, ...]
    final: bool


# A state is (node, typed) inside a node's literals, or (node, length, seen) inside free text: `length`
# characters written, `seen` whether one was not a space.
State = tuple


class Matcher:
    """The grammar's sequences as a tree of parts (literals, then free text, then literals, ...), shared
    where sequences agree (every `pae` action shares its thought). A prefix's states are every place in the
    tree it may have reached."""

    def __init__(self, grammar: Grammar):
        sequences = [_parts(seq) for seq in grammar.sequences]
        if grammar.choices:
            sequences.append((tuple(sorted(set(grammar.choices))),))
        if grammar.text_prefixes:
            sequences.append((tuple(sorted(set(grammar.text_prefixes))), Text(grammar.max_text, nonblank=True)))
        ids: dict[tuple, int] = {}
        parts: list = []
        nexts: list[list[int]] = [[]]  # [0]: the root, before any part
        finals: set[int] = set()
        for seq in sequences:
            parent = 0
            for part in seq:
                child = ids.setdefault((parent, part), len(nexts))  # a part of hundreds of literals: hashed once
                if child == len(nexts):
                    parts.append(part)
                    nexts.append([])
                    nexts[parent].append(child)
                parent = child
            finals.add(parent)
        self.nodes = [Node((), tuple(nexts[0]), False)] + [
            Node(part, tuple(nexts[i + 1]), i + 1 in finals) for i, part in enumerate(parts)
        ]
        self._first: dict[int, frozenset[str]] = {}  # per literal node met: the characters its literals begin with
        self._exit_states: dict[int, frozenset[State]] = {}
        self._run_stops: dict[int, frozenset[str] | None] = {}
        self.start = self._exits(0)
        self._states: dict[str, frozenset[State]] = {"": self.start}

    def states(self, prefix: str) -> frozenset[State]:
        """Where `prefix` may have led; empty when it left the grammar."""
        known = self._states.get(prefix)
        if known is not None:
            return known
        cut = len(prefix) - 1
        while prefix[:cut] not in self._states:
            cut -= 1
        states, end = self._states[prefix[:cut]], cut
        while end < len(prefix):
            run = self._free_run(states, prefix, end) or self._literal_run(states, prefix, end)
            if run is None:
                states, end = self.advance(states, prefix[end]), end + 1
            else:
                states, end = run
            if len(self._states) < MAX_CACHED_PREFIXES:
                self._states[prefix[:end]] = states
        return states

    def _free_run(self, states: frozenset[State], prefix: str, start: int) -> tuple[frozenset[State], int] | None:
        """Where `prefix[start:]` leads in one move while it is free text that cannot begin what follows the
        text: a thought is matched run by run, not character by character. The states must be one free text
        and the starts of the literals after it; None when they are not, or when the run is empty."""
        texts = [s for s in states if len(s) == 3]
        if len(texts) != 1:
            return None
        node, length, seen = text = texts[0]
        stops = self._stops(node)
        if stops is None or not states - {text} <= self._exits(node):
            return None
        part, end = self.nodes[node].part, start
        chars, last = part.chars, min(len(prefix), start + part.max - length)
        while end < last and prefix[end] in chars and prefix[end] not in stops:
            end += 1
        if end == start:
            return None
        text = (node, length + end - start, seen or bool(prefix[start:end].strip(" ")))
        return (self._closure({text}), end)

    def _literal_run(self, states: frozenset[State], prefix: str, start: int) -> tuple[frozenset[State], int] | None:
        """Where `prefix[start:]` leads in one move while every state is inside a literal, up to the first
        place one of them is complete: `\\nAction: Cli` is matched in one move. None for other states."""
        if any(len(s) == 3 for s in states):
            return None
        rest = prefix[start:]
        walks = {state: self._literal_walk(state, rest) for state in states}
        end = min([len(rest), *(taken for taken, complete in walks.values() if complete)])
        moved = {(node, typed + rest[:end]) for (node, typed), (taken, _) in walks.items() if taken >= end}
        return self._closure(moved), start + end

    def _literal_walk(self, state: State, text: str) -> tuple[int, bool]:
        """How many characters of `text` the literal state takes: up to the first that no literal of its part
        continues, or up to where one of them is complete (then True)."""
        typed, part, taken = state[1], self.nodes[state[0]].part, 0
        while taken < len(text):
            i = bisect_left(part, typed + text[: taken + 1])
            if i == len(part) or not part[i].startswith(typed + text[: taken + 1]):
                return taken, False
            # the first literal that goes on so is the shortest: no other is complete before it
            literal = part[i]
            low, high = taken + 1, min(len(text), len(literal) - len(typed))
            while low < high:  # how far `text` goes along it
                mid = (low + high + 1) // 2
                low, high = (mid, high) if literal.startswith(text[:mid], len(typed)) else (low, mid - 1)
            if low == len(literal) - len(typed):
                return low, True
            taken = low
        return len(text), False

    def _stops(self, node: int) -> frozenset[str] | None:
        """The characters that may begin a literal after the free text `node`; None when a free text may
        follow it directly (a run past its start would need that text's states too)."""
        if node not in self._run_stops:
            exits = self._exits(node)
            literal = all(len(s) == 2 for s in exits)
            self._run_stops[node] = frozenset().union(*(self._first_chars(s[0]) for s in exits)) if literal else None
        return self._run_stops[node]

    def advance(self, states: frozenset[State], char: str) -> frozenset[State]:
        out: set[State] = set()
        nodes = self.nodes
        for state in states:
            part = nodes[state[0]].part
            if len(state) == 2:
                if not state[1] and char not in self._first_chars(state[0]):
                    continue
                typed = state[1] + char
                i = bisect_left(part, typed)
                if i < len(part) and part[i].startswith(typed):
                    out.add((state[0], typed))
            elif state[1] < part.max and char in part.chars:
                out.add((state[0], state[1] + 1, state[2] or char != " "))
        return self._closure(out) if out else frozenset()

    def _closure(self, states: set[State]) -> frozenset[State]:
        """Add where a finished part leads: a complete literal into the text after it, a text that may
        end into the literals after it."""
        out = set(states)
        for state in states:
            if self.part_done(state):
                out |= self._exits(state[0])
        return frozenset(out)

    def _exits(self, node: int) -> frozenset[State]:
        """Where a node leads once its part is done: the start of each part after it, and on through the
        parts that are done at their start (an empty literal, a text that may be empty)."""
        exits = self._exit_states.get(node)
        if exits is None:
            starts = [
                (n, 0, False) if isinstance(self.nodes[n].part, Text) else (n, "") for n in self.nodes[node].nexts
            ]
            seen = set(starts)
            for state in starts:
                if self.part_done(state):
                    seen |= self._exits(state[0])
            exits = self._exit_states[node] = frozenset(seen)
        return exits

    def _first_chars(self, node: int) -> frozenset[str]:
        first = self._first.get(node)
        if first is None:
            first = self._first[node] = frozenset(self.literal_rests(frozenset({(node, "")}), limit=1))
        return first

    def part_done(self, state: State) -> bool:
        part = self.nodes[state[0]].part
        if len(state) == 2:
            i = bisect_left(part, state[1])
            return i < len(part) and part[i] == state[1]
        return state[2] or not part.nonblank

    def can_end(self, states: frozenset[State]) -> bool:
        return any(self.nodes[s[0]].final and self.part_done(s) for s in states)

    def literal_rests(self, states: frozenset[State], limit: int | None = None) -> list[str]:
        """What may complete the literals `states` are in: every literal they may be, less what was typed,
        cut to its first `limit` characters. A cut rest is listed once per state: the sorted literals that
        share it are skipped, so the first characters of `Click [0]` ... `Click [149]` cost one lookup."""
        rests = []
        for state in states:
            if len(state) == 2:
                part, typed = self.nodes[state[0]].part, state[1]
                i = bisect_left(part, typed)
                while i < len(part) and part[i].startswith(typed):
                    rest = part[i][len(typed) : None if limit is None else len(typed) + limit]
                    if rest:
                        rests.append(rest)
                    i += 1
                    if limit is not None and len(rest) == limit:  # skip the literals that begin with it too
                        i = bisect_left(part, typed + rest + LAST_CHAR, i)
        return rests

    def text_rooms(self, states: frozenset[State]) -> set[tuple[frozenset[str], int]]:
        """(allowed characters, room left) of each free text `states` are in, where there is room."""
        rooms = set()
        for state in states:
            if len(state) == 3 and (part := self.nodes[state[0]].part).max > state[1]:
                rooms.add((part.chars, part.max - state[1]))
        return rooms

    def next_chars(self, states: frozenset[State]) -> frozenset[str]:
        chars = set(self.literal_rests(states, limit=1))
        for text_chars, _ in self.text_rooms(states):
            chars |= text_chars
        return frozenset(chars)


@lru_cache(maxsize=1024)  # pages share most sequences (`Wait`, `Goto [...]`), and pages of one size all
def _parts(sequence: tuple[Segment, ...]) -> tuple[tuple[str, ...] | Text, ...]:
    """Literal segments in a row become one sorted set of literals (their product); free text stays apart.
    Every sequence starts with literals (maybe only ""), and literals and free text alternate."""
    parts: list[tuple[str, ...] | Text] = []
    run: list[Segment] = []
    for segment in (*sequence, None):
        if isinstance(segment, Text) or segment is None:
            if run or (segment is not None and not parts):
                literals = {"".join(p) for p in product(*map(_options, run))}
                parts.append(tuple(sorted(literals)))
            elif segment is not None:
                raise ValueError(f"two free texts in a row in a grammar sequence: {sequence}")
            if segment is not None:
                parts.append(segment)
            run = []
        else:
            run.append(segment)
    if not sequence:
        raise ValueError("an empty grammar sequence")
    return tuple(parts)


@lru_cache(maxsize=1024)
def _options(segment: Segment) -> tuple[str, ...]:
    if isinstance(segment, Literal):
        return (segment.text,)
    if isinstance(segment, Choice):
        if not segment.options:
            raise ValueError("a grammar choice with no options")
        return tuple(segment.options)
    if segment.lo > segment.hi:
        raise ValueError(f"an empty integer range [{segment.lo}, {segment.hi}] in a grammar")
    return tuple(str(i) for i in range(segment.lo, segment.hi + 1))


_MATCHERS: dict[Grammar, Matcher] = {}


def _matcher(grammar: Grammar) -> Matcher:
    matcher = _MATCHERS.get(grammar)
    if matcher is None:
        if len(_MATCHERS) >= 256:
            _MATCHERS.clear()
        matcher = _MATCHERS[grammar] = Matcher(grammar)
    return matcher
