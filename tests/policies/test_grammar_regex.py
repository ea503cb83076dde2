"""The regex of a grammar full-matches exactly the strings the grammar accepts.

The reference is `Grammar.accepts` itself. Random grammars (every segment kind, both forms, the
characters that mean something in a regex, newlines, non-ASCII, tiny and multi-digit integer ranges,
free texts with `forbid`, `only` and `nonblank`) and the web spaces' real grammars are checked on strings
drawn from the grammar, on mutations of them (which land on both sides of every bound) and on random
strings. The regex is also checked to keep to the syntax Python's `re` and Rust's `regex` read alike.
"""

from __future__ import annotations

import json
import random
import re
import subprocess

import pytest

from rlsys.core.grammar import Choice, Grammar, Int, Literal, Text
from rlsys.envs.web.spaces import WebAction, coords, element, pae
from rlsys.policies.grammar_regex import NEVER, grammar_regex, grammar_regex_or_none

SPECIAL = '[]\\^-".*+?(){}|$#&~<>:; \n\té'
ALPHABET = "ab1" + SPECIAL


def random_string(rng: random.Random, alphabet: str, max_len: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, max_len)))


def random_int(rng: random.Random) -> Int:
    lo = rng.choice([0, 0, 1, 7, 9, 10, 99, -1, -12, rng.randint(-300, 3000)])
    span = rng.choice([0, 1, 5, 63, rng.randint(0, 40), rng.randint(0, 12000)])
    return Int(lo, lo + span)


def random_text(rng: random.Random) -> Text:
    max_len = rng.choice([0, 1, 2, 3, 5, 8])
    forbid = "".join(rng.sample(SPECIAL, rng.randint(0, 4))) if rng.random() < 0.5 else ""
    only = "".join(rng.sample("ab ]-\\^", rng.randint(1, 4))) if rng.random() < 0.3 else ""
    return Text(max_len, forbid, only, rng.random() < 0.5)


def random_segment(rng: random.Random):
    kind = rng.random()
    if kind < 0.3:
        return Literal(random_string(rng, ALPHABET, 4))
    if kind < 0.5:
        return Choice(tuple(random_string(rng, ALPHABET, 3) for _ in range(rng.randint(1, 3))))
    if kind < 0.7:
        return random_int(rng)
    return random_text(rng)


def random_sequence(rng: random.Random) -> tuple:
    """Segments whose literal runs stay small: the matcher writes out each run's product."""
    segments: list = []
    product = 1
    for _ in range(rng.randint(1, 4)):
        segment = random_segment(rng)
        if isinstance(segment, Text):
            if segments and isinstance(segments[-1], Text):
                segments.append(Literal(random_string(rng, ALPHABET, 2)))
            product = 1
        else:
            size = segment.hi - segment.lo + 1 if isinstance(segment, Int) else 3
            if product * size > 20_000:
                continue
            product *= size
        segments.append(segment)
    return tuple(segments) or (Literal(""),)


def random_grammar(rng: random.Random) -> Grammar:
    choices = tuple(random_string(rng, ALPHABET, 5) for _ in range(rng.randint(0, 3)))
    prefixes = tuple(random_string(rng, ALPHABET, 4) for _ in range(rng.randint(0, 2)))
    sequences = tuple(random_sequence(rng) for _ in range(rng.randint(0, 3)))
    if rng.random() < 0.3 and sequences:  # sequences that begin alike, as every `pae` action does
        head = sequences[0][:-1]
        tails = [random_segment(rng) for _ in range(2)]
        sequences += tuple((*head, Literal("-") if head and isinstance(head[-1], Text) else tail) for tail in tails)
    return Grammar(choices, prefixes, rng.choice([0, 1, 3, 6]), sequences)


def sample_text(rng: random.Random, text: Text) -> str | None:
    chars = sorted(text.chars)
    if not chars or text.max == 0:
        return None if text.nonblank else ""
    out = "".join(rng.choice(chars) for _ in range(rng.randint(0, text.max)))
    if text.nonblank and not out.strip(" "):
        solid = [c for c in chars if c != " "]
        if not solid:
            return None
        spot = rng.randint(0, max(0, len(out) - 1))
        out = out[:spot] + rng.choice(solid) + out[spot + 1 :]
    return out


def sample_segment(rng: random.Random, segment) -> str | None:
    if isinstance(segment, Literal):
        return segment.text
    if isinstance(segment, Choice):
        return rng.choice(segment.options)
    if isinstance(segment, Int):
        return str(rng.choice([segment.lo, segment.hi, rng.randint(segment.lo, segment.hi)]))
    return sample_text(rng, segment)


def sample(rng: random.Random, grammar: Grammar) -> str | None:
    """A string the grammar accepts, or None when the drawn form accepts none."""
    forms = list(grammar.sequences)
    forms += [(Choice(grammar.choices),)] if grammar.choices else []
    forms += [(Choice(grammar.text_prefixes), Text(grammar.max_text, nonblank=True))] if grammar.text_prefixes else []
    if not forms:
        return None
    pieces = [sample_segment(rng, segment) for segment in rng.choice(forms)]
    return None if None in pieces else "".join(pieces)


def mutate(rng: random.Random, text: str, alphabet: str) -> str:
    spot = rng.randint(0, len(text))
    kind = rng.randrange(5)
    if kind == 0:
        return text[:spot] + rng.choice(alphabet) + text[spot:]
    if kind == 1:
        return text[:spot] + text[spot + 1 :]
    if kind == 2:
        return text[:spot] + rng.choice(alphabet) + text[spot + 1 :]
    if kind == 3:
        return text[:spot]
    return text + text[spot:]


def candidates(rng: random.Random, grammar: Grammar, count: int, alphabet: str) -> list[str]:
    accepted = [s for s in (sample(rng, grammar) for _ in range(count)) if s is not None]
    mutated = [mutate(rng, rng.choice(accepted), alphabet) for _ in range(count * 3)] if accepted else []
    return ["", *accepted, *mutated, *(random_string(rng, alphabet, 6) for _ in range(count))]


def assert_same_language(grammar: Grammar, strings: list[str]) -> tuple[int, int]:
    pattern = re.compile(grammar_regex(grammar))
    accepted = 0
    for s in strings:
        expected = grammar.accepts(s)
        assert (pattern.fullmatch(s) is not None) == expected, (grammar, pattern.pattern, s, expected)
        accepted += expected
    return accepted, len(strings) - accepted


def alphabet_of(grammar: Grammar) -> str:
    return ALPHABET + "".join(sorted(set(repr(grammar)) - set(ALPHABET)))


def test_random_grammars_match_exactly_what_they_accept():
    rng = random.Random(0)
    accepted = rejected = 0
    for _ in range(400):
        grammar = random_grammar(rng)
        a, r = assert_same_language(grammar, candidates(rng, grammar, 15, alphabet_of(grammar)))
        accepted, rejected = accepted + a, rejected + r
    assert accepted > 2000 and rejected > 2000  # both sides were exercised


@pytest.mark.parametrize(
    ("segment", "inside", "outside"),
    [
        (Int(0, 0), ["0"], ["", "00", "1", "-0"]),
        (Int(7, 7), ["7"], ["07", "6", "8"]),
        (Int(0, 149), ["0", "9", "10", "99", "100", "149"], ["00", "01", "150", "1000", "-1"]),
        (Int(37, 4321), ["37", "99", "100", "999", "1000", "4321", "4299"], ["36", "4322", "4400", "0037", "5000"]),
        (Int(-12, 7), ["-12", "-1", "0", "7"], ["-13", "-0", "8", "--1", "-01"]),
        (Int(-100, -3), ["-100", "-3", "-57"], ["-2", "-101", "3", "-1000"]),
        (Text(3, nonblank=True), ["x", "  x", " x ", "xyz"], ["", " ", "   ", "   x", "x   "]),
        (Text(3, only=" ", nonblank=True), [], ["", " ", "  "]),
        (Text(0, nonblank=True), [], ["", "a"]),
        (Text(2, forbid="] \\"), ["", "a", "ab"], [" ", "]", "\\", "abc"]),
        (Text(4, only="]^-\\"), ["", "]", "^-\\]"], ["a", "[", "]]]]]"]),
    ],
)
def test_bounds_of_each_segment(segment, inside, outside):
    grammar = Grammar(sequences=((Literal("<"), segment, Literal(">")),))
    for s in inside + outside:
        assert grammar.accepts(f"<{s}>") == (s in inside)  # the cases hold for the grammar itself
    assert_same_language(grammar, [f"<{s}>" for s in inside + outside])


def test_a_grammar_that_accepts_nothing_gets_a_regex_that_matches_nothing():
    for grammar in (Grammar(), Grammar(sequences=((Literal("a"), Text(3, only=" ", nonblank=True)),))):
        assert grammar_regex(grammar) == NEVER
        assert_same_language(grammar, ["", "a", "a ", " ", "\x00", chr(0x10FFFF)])


@pytest.mark.parametrize(
    "grammar",
    [
        Grammar(sequences=((),)),
        Grammar(sequences=((Choice(()),),)),
        Grammar(sequences=((Int(3, 2),),)),
        Grammar(sequences=((Text(3), Text(2)),)),
    ],
)
def test_grammars_the_matcher_refuses_are_refused(grammar):
    with pytest.raises(ValueError):
        grammar.accepts("")
    with pytest.raises(ValueError):
        grammar_regex(grammar)


def web_grammars():
    pages = [
        [{}],
        [{"editable": True}],
        [{"editable": i % 3 == 0} for i in range(12)],
        [{"editable": i % 7 == 2} for i in range(150)],
    ]
    for page in pages:
        for space in (element, pae, coords):
            yield space, page, space.grammar(page)
    yield pae, pages[2], pae.grammar(pages[2], max_text=200, max_thought=200)


def rendered_actions(space, page: list[dict]) -> list[str]:
    last = len(page) - 1
    if space is element:
        actions = [WebAction("click", last)] + [
            WebAction("type", i, "red shoes") for i, e in enumerate(page) if e.get("editable")
        ]
        return [space.render(a) for a in actions]
    if space is pae:
        actions = [
            WebAction("click", last, thought="The search box is [3]."),
            WebAction("scroll", direction="down", thought="more"),
            WebAction("goto", url="https://example.com/a?b=c", thought="go"),
            WebAction("answer", text="42 [approx", thought="done"),
        ]
        return [space.render(a) for a in actions]
    actions = [
        WebAction("tap", point=(0.25, 0.5), thought="tap it"),
        WebAction("type", text="red shoes", thought="type"),
    ]
    return [space.render(a) for a in actions]


@pytest.mark.parametrize(("space", "page", "grammar"), list(web_grammars()))
def test_web_space_grammars(space, page, grammar):
    rng = random.Random(len(page))
    rendered = rendered_actions(space, page)
    assert all(grammar.accepts(s) for s in rendered)
    strings = rendered + [mutate(rng, rng.choice(rendered), ALPHABET + "AXT[]0") for _ in range(200)]
    accepted, rejected = assert_same_language(grammar, strings + candidates(rng, grammar, 100, ALPHABET))
    assert accepted > 100 and rejected > 100


def test_long_free_texts_stay_compact():
    regex = grammar_regex(pae.grammar([{"editable": True}] * 150, max_text=200, max_thought=200))
    assert len(regex) < 20_000
    assert len(grammar_regex(element.grammar([{"editable": True}] * 150, max_text=200))) < 20_000


ESCAPE = re.compile(r"\\(x[0-9a-f]{2}|[ntr]|[!-/:-;=?-@\[-`{-~])")  # every ASCII punctuation but < and >


@pytest.mark.parametrize("seed", range(5))
def test_regex_keeps_to_syntax_python_and_rust_read_alike(seed):
    rng = random.Random(seed)
    grammars = [random_grammar(rng) for _ in range(50)] + [g for _, _, g in web_grammars()]
    for grammar in grammars:
        regex = grammar_regex(grammar)
        assert all(ESCAPE.match(regex, m.start()) for m in re.finditer(r"\\", regex) if not _escaped(regex, m.start()))
        assert "(?=" not in regex and "(?!" not in regex and "(?<" not in regex
        assert "(" not in regex.replace("(?:", "").replace("\\(", "")  # groups never capture


def _escaped(regex: str, index: int) -> bool:
    """Whether the backslash at `index` is itself escaped (an odd run of backslashes before it)."""
    run = 0
    while index - run - 1 >= 0 and regex[index - run - 1] == "\\":
        run += 1
    return run % 2 == 1


def test_grammar_dicts_and_none():
    grammar = pae.grammar([{"editable": True}, {}])
    assert grammar_regex_or_none(grammar.to_dict()) == grammar_regex(grammar)
    assert grammar_regex_or_none(grammar) == grammar_regex(grammar)
    assert grammar_regex_or_none(None) is None


LLGUIDANCE_CHECK = """
import json, sys
import llguidance
for regex in json.load(sys.stdin):
    error = llguidance.LLMatcher.validate_grammar(llguidance.grammar_from("regex", regex))
    print(json.dumps(error))
"""


def test_llguidance_compiles_the_web_regexes():
    """llguidance, which enforces them in vLLM, lives in the vLLM environment (scripts/setup-vllm.sh)."""
    from tests.actors.test_vllm_engine import vllm_python_or_skip

    python = vllm_python_or_skip()

    def errors(regexes: list[str]) -> list[str]:
        check = [python, "-c", LLGUIDANCE_CHECK]
        done = subprocess.run(check, input=json.dumps(regexes), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    regexes = [grammar_regex(grammar) for _, _, grammar in web_grammars()]
    assert errors(regexes) == [""] * len(regexes)
    assert errors(["[a-"]) != [""]  # a broken one is reported
