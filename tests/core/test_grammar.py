"""The action grammar itself (rlsys.core.grammar): what the web action spaces' grammars accept and refuse, a prefix
matched at once against one stepped through character by character, and grammars as the dicts shards store."""

import random

import pytest

from rlsys.core.grammar import Grammar, Matcher
from rlsys.envs.web.spaces import ParseError, coords, pae
from tests.support.random_grammars import random_sequence_grammar


def test_a_prefix_matched_at_once_reaches_the_states_of_matching_it_character_by_character():
    """A grammar first met deep inside an action (a new page, teacher forcing) is matched from scratch, run
    by run; it must end where stepping through every character does."""
    rng = random.Random(7)
    pages = [[{"editable": i % 3 == 1} for i in range(n)] for n in (3, 12)]
    grammars = [random_sequence_grammar(rng) for _ in range(150)]
    grammars += [space.grammar(page, max_text=6, max_thought=40) for space in (pae, coords) for page in pages]
    for grammar in grammars:
        stepper = Matcher(grammar)
        text, states, expected = "", stepper.start, [stepper.start]
        while states and len(text) < 120:
            allowed = sorted(stepper.next_chars(states))
            char = rng.choice(allowed) if allowed and rng.random() < 0.9 else rng.choice('ab :]\n0é"')
            text, states = text + char, stepper.advance(states, char)
            expected.append(states)
        for cut in {len(text), len(text) - 1, rng.randint(0, len(text))} - {-1}:
            assert Matcher(grammar).states(text[:cut]) == expected[cut], (grammar, text[:cut])


@pytest.mark.parametrize(
    "space, text",
    [
        (pae, "Thought: fine\nAction: Click [2]"),
        (pae, "Thought:\nAction: Type [1]; [a b]"),
        (pae, "Thought: x\nAction: Scroll [WINDOW]; [down]"),
        (pae, "Thought: x\nAction: Goto [https://a.b/c]"),
        (pae, "Thought: x\nAction: ANSWER; []"),
        (pae, "Thought: x\nAction: GoBack"),
        (
            coords,
            'Action Plan: go ; Action Decision: "action_type": "DUAL_POINT", "touch_point": "[0.5, 0.25]", '
            '"lift_point": "[0.0, 0.9999]", "typed_text": ""',
        ),
        (
            coords,
            'Action Plan: x ; Action Decision: "action_type": "TYPE", "touch_point": "[-1.0, -1.0]", '
            '"lift_point": "[-1.0, -1.0]", "typed_text": "red shoes"',
        ),
    ],
)
def test_action_space_grammars_accept_what_render_writes(space, text):
    elements = [{"editable": i == 1} for i in range(3)]
    grammar = space.grammar(elements, max_text=16)
    assert grammar.accepts(text)
    assert grammar.accepts(space.render(space.parse(text, 3)))


@pytest.mark.parametrize(
    "space, text",
    [
        (pae, "Thought: fine\nAction: Click [3]"),  # no element 3
        (pae, "Thought: x\nAction: Type [2]; [a]"),  # not editable
        (pae, "Thought: x\nAction: Type [1]; [ ]"),  # blank
        (pae, "Thought: a: b\nAction: Wait"),  # a `:` in the thought
        (pae, "Thought: x\nAction: Goto [ftp://a]"),
        (pae, "Thought: x\nAction: Click [1] "),
        (
            coords,
            'Action Plan: go ; Action Decision: "action_type": "DUAL_POINT", "touch_point": "[1.5, 0.25]", '
            '"lift_point": "[0.0, 0.9]", "typed_text": ""',
        ),
        (
            coords,
            'Action Plan: go ; Action Decision: "action_type": "DUAL_POINT", "touch_point": "[0.12345, 0.2]", '
            '"lift_point": "[0.0, 0.9]", "typed_text": ""',
        ),
    ],
)
def test_action_space_grammars_refuse_invalid_actions(space, text):
    assert not space.grammar([{"editable": i == 1} for i in range(3)], max_text=16).accepts(text)


def test_grammar_dicts_round_trip_and_stored_ones_still_load():
    stored = {"choices": ["click [0]"], "text_prefixes": ["type [0] "], "max_text": 8}  # as shards hold them
    assert Grammar.from_dict(stored) == Grammar(("click [0]",), ("type [0] ",), 8)
    assert Grammar.from_dict(stored).to_dict() == stored
    grammar = pae.grammar([{"editable": True}, {}], max_text=4)
    assert Grammar.from_dict(grammar.to_dict()) == grammar
    with pytest.raises(ValueError, match="unknown grammar segment.*regex"):
        Grammar.from_dict({"sequences": [[{"regex": "a+"}]]})
    with pytest.raises(ParseError):  # the grammar is narrower than the parser, never wider
        pae.parse("Thought: x\nAction: Click [2]", 2)
