"""Random grammars for the decoding and matcher tests: overlapping literals, heads that are prefixes of other heads
or of choices, non-printable characters, tiny rooms; and sequences of literals, choices, integers and free text."""

from __future__ import annotations

import random

from rlsys.core.grammar import Choice, Grammar, Int, Literal, Text

WORDS = ["click", "type", "Click", "Type", "scroll", "hello", "world", "red shoes", "Kasey", "ab", "a b", "é", "\t"]


def random_grammar(rng: random.Random) -> Grammar:
    def literal() -> str:
        kind = rng.random()
        if kind < 0.4:
            return f"{rng.choice(['click', 'type', 'Click'])} [{rng.randint(0, 30)}]"
        if kind < 0.7:
            return "".join(rng.choices("ab [1]", k=rng.randint(0, 5)))
        return " ".join(rng.choices(WORDS, k=rng.randint(1, 3)))

    choices = [literal() for _ in range(rng.randint(0, 12))]
    heads = [literal() + rng.choice(["", " "]) for _ in range(rng.randint(0, 3))]
    if heads and rng.random() < 0.3:  # a head that extends another head, and a choice that extends a head
        heads.append(heads[0] + rng.choice(WORDS))
        choices.append(heads[0] + rng.choice(WORDS))
    return Grammar(tuple(choices), tuple(heads), rng.randint(1, 10))


def random_sequence_grammar(rng: random.Random) -> Grammar:
    """Sequences that share their start (as every `pae` action shares its thought), literals that are
    prefixes of each other or begin with a character free text may hold, texts of few characters."""

    def literal():
        kind = rng.random()
        if kind < 0.4:
            return Literal(rng.choice(["Thought:", "\nAction: ", "Click [", "]", "; [", "ab", "a b", "é", " ", "x]"]))
        if kind < 0.7:
            return Choice(tuple(rng.sample(["up", "down", "WINDOW", "0.", "a", "ab", "", ":"], k=rng.randint(1, 3))))
        lo = rng.randint(0, 12)
        return Int(lo, lo + rng.randint(0, 15))

    def text():
        nonblank = rng.random() < 0.5
        if rng.random() < 0.3:
            return Text(rng.randint(1, 6), only=rng.choice(["0123456789", "ab ", "é1"]), nonblank=nonblank)
        return Text(rng.randint(0, 8), forbid=rng.choice(["", ":", "]", "] ", "a"]), nonblank=nonblank)

    sequences: list[tuple] = []
    for _ in range(rng.randint(1, 4)):
        segments = list(sequences[0][: rng.randint(0, 3)]) if sequences and rng.random() < 0.5 else []
        for _ in range(rng.randint(1, 4)):
            follows_text = bool(segments) and isinstance(segments[-1], Text)
            segments.append(text() if not follows_text and rng.random() < 0.4 else literal())
        sequences.append(tuple(segments))
    old = random_grammar(rng) if rng.random() < 0.3 else Grammar()
    return Grammar(old.choices, old.text_prefixes, old.max_text, tuple(sequences))
