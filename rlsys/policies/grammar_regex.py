"""An action grammar as one regular expression, for inference engines that constrain generation with a
regex (vLLM's structured outputs through llguidance) instead of rlsys.policies.grammar_decoding.

The regex full-matches exactly the strings `Grammar.accepts` accepts. It is read by Rust's `regex` syntax
there and by Python's `re` in the tests, so it uses only what both read the same way: non-capturing
groups, alternation, `?`, counted repetition and character classes; no `\\d`, `\\w`, `\\s` (Unicode in
one, ASCII in the other), no lookarounds. Every ASCII punctuation character is escaped with a backslash
(both accept that, inside classes too) but `<` and `>` (in Rust `\\<` and `\\>` are word boundaries);
spaces and control characters are written `\\x20`, `\\n`, ... ; other characters stand for themselves.

Sequences that begin with the same parts share them (every `pae` action shares its thought), so a
thought's free text is written once, as in the decoder's `Matcher`.
"""

from __future__ import annotations

from functools import lru_cache

from rlsys.core.grammar import Choice, Grammar, Int, Literal, Segment, Text

# A class of every character, negated: matches nothing. Only for a grammar that accepts no string.
NEVER = "[^\\x00-" + chr(0x10FFFF) + "]"
_CONTROL_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
_END = None  # the key, in the tree of parts, that marks where a sequence ends


def grammar_regex_or_none(grammar: Grammar | dict | None) -> str | None:
    """The regex of a grammar, or of its `to_dict()` form (what an observation's `extras["grammar"]`
    holds); None for None, an unconstrained action."""
    if grammar is None:
        return None
    return grammar_regex(grammar if isinstance(grammar, Grammar) else Grammar.from_dict(grammar))


@lru_cache(maxsize=256)  # pages of one site repeat their grammars
def grammar_regex(grammar: Grammar) -> str:
    """One regex that full-matches exactly the strings `grammar.accepts` accepts; `NEVER` when it accepts
    none. Raises ValueError where the grammar's matcher does (an empty choice or sequence, an empty
    integer range, two free texts in a row)."""
    sequences = [_sequence_parts(seq) for seq in grammar.sequences]
    if grammar.choices:
        sequences.append([_alternation(sorted({_literal(c) for c in grammar.choices}))])
    if grammar.text_prefixes:
        prefixes = _alternation(sorted({_literal(p) for p in grammar.text_prefixes}))
        sequences.append([prefixes, _text(Text(grammar.max_text, nonblank=True))])
    tree: dict = {}
    for parts in sequences:
        if any(part is None for part in parts):  # a part no string matches (a blank "nonblank" text)
            continue
        node = tree
        for part in parts:
            if part:  # an empty part ("" or an empty prefix) is matched by what follows it
                node = node.setdefault(part, {})
        node[_END] = {}
    return _tree_regex(tree) if tree else NEVER


def _tree_regex(node: dict) -> str:
    """The alternation of each part in `node` followed by what follows it; optional where a sequence may
    end here."""
    branches = [part + _tree_regex(rest) for part, rest in node.items() if part != _END]
    if not branches:
        return ""
    body = _alternation(branches)
    if _END not in node:
        return body
    return (body if len(branches) > 1 else f"(?:{body})") + "?"


def _sequence_parts(sequence: tuple[Segment, ...]) -> list[str | None]:
    """A sequence's parts: each run of literal segments as one regex, each free text as one."""
    if not sequence:
        raise ValueError("an empty grammar sequence")
    parts: list[str | None] = []
    run: list[str] = []
    previous: Segment | None = None
    for segment in sequence:
        if isinstance(segment, Text):
            if isinstance(previous, Text):
                raise ValueError(f"two free texts in a row in a grammar sequence: {sequence}")
            parts.append("".join(run))
            parts.append(_text(segment))
            run = []
        else:
            run.append(_segment(segment))
        previous = segment
    parts.append("".join(run))
    return parts


def _segment(segment: Literal | Choice | Int) -> str:
    if isinstance(segment, Literal):
        return _literal(segment.text)
    if isinstance(segment, Choice):
        if not segment.options:
            raise ValueError("a grammar choice with no options")
        return _alternation(sorted({_literal(option) for option in segment.options}))
    if segment.lo > segment.hi:
        raise ValueError(f"an empty integer range [{segment.lo}, {segment.hi}] in a grammar")
    return _int(segment.lo, segment.hi)


def _alternation(options: list[str]) -> str:
    """Any one of `options`, safe to follow by more regex (a group where it has several branches)."""
    nonempty = [o for o in options if o != ""]
    if not nonempty:
        return ""
    if len(nonempty) == 1 and len(nonempty) == len(options) and _is_atom(nonempty[0]):
        return nonempty[0]
    group = f"(?:{'|'.join(nonempty)})"
    return group + "?" if len(nonempty) < len(options) else group


def _is_atom(regex: str) -> bool:
    """Whether `regex` needs no group around it before more regex follows it: it has no top-level `|`.
    Branches are built here from escaped literals and groups, so an unescaped `|` outside `(?:...)`
    and `[...]` is top level."""
    depth, escaped, in_class = 0, False, False
    for char in regex:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            return False
    return True


def _char(char: str) -> str:
    if not char.isascii() or char.isalnum() or char in "<>":
        return char
    if char in _CONTROL_ESCAPES:
        return _CONTROL_ESCAPES[char]
    if char == " " or not char.isprintable():
        return f"\\x{ord(char):02x}"
    return "\\" + char


def _literal(text: str) -> str:
    return "".join(map(_char, text))


def _char_class(chars: frozenset[str]) -> str | None:
    """One atom matching any of `chars` (ASCII), ranges where three or more codes run on; None when empty."""
    if not chars:
        return None
    codes = sorted(map(ord, chars))
    if len(codes) == 1:
        return _char(chr(codes[0]))
    runs: list[list[int]] = []
    for code in codes:
        if runs and runs[-1][1] == code - 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    members = []
    for lo, hi in runs:
        if hi - lo >= 2:
            members.append(f"{_char(chr(lo))}-{_char(chr(hi))}")
        else:
            members.extend(_char(chr(c)) for c in range(lo, hi + 1))
    return f"[{''.join(members)}]"


def _repeat(atom: str, lo: int, hi: int) -> str:
    if hi <= 0:
        return ""
    if lo == hi:
        return atom if lo == 1 else f"{atom}{{{lo}}}"
    return f"{atom}{{{lo},{hi}}}"


def _text(text: Text) -> str | None:
    """At most `text.max` of its characters; with `nonblank`, one of them not a space. None when no
    string fits (a nonblank text with no room, or with only spaces to write)."""
    chars = text.chars
    any_char = _char_class(chars)
    if not text.nonblank:
        return _repeat(any_char, 0, text.max) if any_char else ""
    non_space = _char_class(chars - {" "})
    if non_space is None or text.max < 1:
        return None
    if " " not in chars:
        return _repeat(non_space, 1, text.max)
    # k spaces, the first other character, then anything up to the bound: one branch per k keeps the
    # bound exact (a regex cannot tie the length of the tail to the number of spaces before it).
    branches = [_repeat("\\x20", k, k) + non_space + _repeat(any_char, 0, text.max - 1 - k) for k in range(text.max)]
    return _alternation(branches)


def _int(lo: int, hi: int) -> str:
    """The decimal integers in [lo, hi], as `str` writes them (no leading zeros, `-` before negatives)."""
    branches = []
    if lo < 0:
        branches.append("\\-" + _natural(max(1, -hi), -lo))
    if hi >= 0:
        branches.append(_natural(max(0, lo), hi))
    return _alternation(branches)


def _natural(lo: int, hi: int) -> str:
    """The integers in [lo, hi], 0 <= lo <= hi: one branch per number of digits."""
    branches = []
    for digits in range(len(str(lo)), len(str(hi)) + 1):
        low = max(lo, 10 ** (digits - 1) if digits > 1 else 0)
        high = min(hi, 10**digits - 1)
        if low <= high:
            branches.append(_same_length(str(low), str(high)))
    return _alternation(branches)


def _same_length(low: str, high: str) -> str:
    """The digit strings of one length from `low` to `high`, digit by digit: `low`'s first digit then the
    rest of its range, the first digits between with any rest, `high`'s first digit then the rest up to it."""
    if low == high:
        return low
    head_low, head_high, rest = int(low[0]), int(high[0]), len(low) - 1
    if head_low == head_high:
        return low[0] + _same_length(low[1:], high[1:])
    low_is_round, high_is_round = low[1:] == "0" * rest, high[1:] == "9" * rest
    branches = []
    if not low_is_round:
        branches.append(low[0] + _same_length(low[1:], "9" * rest))
    first, last = head_low + (not low_is_round), head_high - (not high_is_round)
    if first <= last:
        heads = _char_class(frozenset(str(d) for d in range(first, last + 1)))
        branches.append(heads + _repeat("[0-9]", rest, rest))
    if not high_is_round:
        branches.append(high[0] + _same_length("0" * rest, high[1:]))
    return _alternation(branches)
