"""Constrained decoding allows exactly the tokens that keep the text inside the grammar.

The reference here decodes every candidate token after the prefix with the tokenizer itself and checks
the resulting text against the grammar's definition; the code under test works from a per-token table
and boolean masks. Both run over random grammars (overlapping literals, heads that are prefixes of
other heads or of choices, non-printable characters, tiny rooms) and four tokenizers built offline:
ByT5's bytes, the presets' byte-level BPE, a byte-level BPE and a SentencePiece-style BPE, both
trained here on action-like text.
"""

from __future__ import annotations

import random

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import ByT5Tokenizer, PreTrainedTokenizerFast

from rlsys.core.grammar import PRINTABLE, Choice, Grammar, Int, Literal, Text
from rlsys.envs.web.spaces import coords, pae
from rlsys.policies.grammar_decoding import GrammarLogitsProcessor, TokenTable, grammar_token_mask
from rlsys.policies.presets import byte_tokenizer
from rlsys.policies.sampling import scored_tokens
from tests.support.random_grammars import WORDS, random_grammar, random_sequence_grammar

PROSE = "the search box is empty so type the name then press enter and wait for the results page to load"


def corpus(rng: random.Random) -> list[str]:
    lines = [f"click [{i}]" for i in range(40)] + [f"type [{i}] " + rng.choice(WORDS) for i in range(40)]
    words = WORDS + PROSE.split()
    return lines + [" ".join(rng.choices(words, k=8)) for _ in range(2000)]


def trained_byte_bpe() -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.BPE(unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<pad>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(corpus(random.Random(0)), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", pad_token="<pad>")


def trained_sentencepiece() -> PreTrainedTokenizerFast:
    """BPE over `▁`-marked words, as Llama's SentencePiece tokenizer: a word's leading space is in its token."""
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    alphabet = sorted(PRINTABLE) + ["é", "\t", "\n"]
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<pad>", "</s>", "<unk>"], initial_alphabet=alphabet)
    backend.train_from_iterator(corpus(random.Random(1)), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", pad_token="<pad>", unk_token="<unk>")


TOKENIZERS = {
    "byt5": ByT5Tokenizer,
    "preset-bytes": lambda: byte_tokenizer("qwen2_vl"),
    "byte-bpe": trained_byte_bpe,
    "sentencepiece": trained_sentencepiece,
}


@pytest.fixture(scope="module", params=sorted(TOKENIZERS))
def tokenizer(request):
    return TOKENIZERS[request.param]()


@pytest.fixture(scope="module")
def table(tokenizer):
    return TokenTable(tokenizer)


class Reference:
    """The allowed set by its definition: a token may follow a prefix if the text it adds is not empty and
    the prefix plus that text still begins a choice or a head, or, after a head, is printable free text
    within `max_text`; EOS where the text so far is a choice or a head with non-blank text after it, or
    where nothing else may follow; after EOS, only EOS and padding. Special tokens are never text.
    A sequence grammar's token lies inside one literal run or one free text (`places`)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.anchor = tokenizer.encode("a", add_special_tokens=False)[-1]
        added = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
        self.special = set(tokenizer.all_special_ids) | added

    def text(self, ids: list[int]) -> str:
        return self.tokenizer.decode([self.anchor, *ids])[len(self.tokenizer.decode([self.anchor])) :]

    def allowed(self, grammar: Grammar, generated: list[int], width: int) -> set[int]:
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        if eos in generated:
            return {eos, pad}
        prefix = self.text(generated)
        spots = [(parts, list(places(parts, prefix))) for parts in map(runs, grammar.sequences)]
        allowed = {i for i, added in self.additions(generated).items() if self.continues(grammar, prefix, added, spots)}
        if self.may_end(grammar, prefix, spots) or not allowed:
            allowed.add(eos)
        return {i for i in allowed if i < width}

    def additions(self, generated: list[int]) -> dict[int, str]:
        """The text each non-special token adds when decoded after `generated` (its last 8 tokens: more than
        any character's bytes or a word's pieces, and what keeps long actions quick to check)."""
        generated = generated[-8:]
        candidates = [i for i in range(len(self.tokenizer)) if i not in self.special]
        texts = self.tokenizer.batch_decode([[self.anchor, *generated, i] for i in candidates])
        anchored = self.tokenizer.decode([self.anchor, *generated])
        return {i: text[len(anchored) :] for i, text in zip(candidates, texts)}

    @staticmethod
    def continues(grammar: Grammar, prefix: str, added: str, spots: list) -> bool:
        text = prefix + added
        literal = any(s.startswith(text) for s in grammar.choices + grammar.text_prefixes)
        free = any(
            prefix.startswith(head) and set(added) <= PRINTABLE and len(text) - len(head) <= grammar.max_text
            for head in grammar.text_prefixes
        )
        in_sequence = any(
            (isinstance(part, Text) and set(added) <= chars(part) and len(written + added) <= part.max)
            or (not isinstance(part, Text) and any(lit.startswith(written + added) for lit in part))
            for parts, found in spots
            for part, written in ((parts[i], w) for i, w in found)
        )
        return bool(added) and (literal or free or in_sequence)

    @staticmethod
    def may_end(grammar: Grammar, prefix: str, spots: list) -> bool:
        return (
            prefix in grammar.choices
            or any(prefix.startswith(h) and prefix[len(h) :].strip() for h in grammar.text_prefixes)
            or any(i == len(parts) - 1 and done(parts[i], written) for parts, found in spots for i, written in found)
        )


def chars(text: Text) -> set[str]:
    return set(text.only) & PRINTABLE if text.only else PRINTABLE - set(text.forbid)


def runs(sequence) -> list:
    """A sequence as lists of literals (segments in a row multiplied out) and free texts."""
    out: list = []
    for segment in sequence:
        if isinstance(segment, Text):
            out += [[""]] * (not out) + [segment]
            continue
        options = {
            Literal: lambda s: [s.text],
            Choice: lambda s: list(s.options),
            Int: lambda s: [str(i) for i in range(s.lo, s.hi + 1)],
        }[type(segment)](segment)
        if out and isinstance(out[-1], list):
            out[-1] = [a + b for a in out[-1] for b in options]
        else:
            out.append(options)
    return out


def done(part, written: str) -> bool:
    if isinstance(part, Text):
        return not part.nonblank or bool(written.strip())
    return written in part


def places(parts: list, text: str, start: int = 0):
    """Every (part index, what of `text` was written in that part) where `text` may stop, trying every split."""
    part = parts[start]
    if isinstance(part, Text):
        cuts = [k for k in range(min(len(text), part.max) + 1) if set(text[:k]) <= chars(part)]
    else:
        cuts = [len(lit) for lit in part if text.startswith(lit)]
        if any(lit.startswith(text) for lit in part):
            yield start, text
    for cut in cuts:
        if isinstance(part, Text) and cut == len(text):
            yield start, text
        if start + 1 < len(parts) and done(part, text[:cut]):
            yield from places(parts, text[cut:], start + 1)


def walk(reference: Reference, grammar: Grammar, rng: random.Random, width: int, steps: int = 14):
    """A random path through the reference's allowed sets: (generated so far, allowed set) at each step."""
    generated: list[int] = []
    for _ in range(steps):
        allowed = reference.allowed(grammar, generated, width)
        yield list(generated), allowed
        token = rng.choice(sorted(allowed))
        generated.append(token)
        if token == reference.tokenizer.eos_token_id and rng.random() < 0.5:
            yield list(generated), reference.allowed(grammar, generated, width)  # finished: EOS and padding
            return


def as_set(mask) -> set[int]:
    return set(torch.as_tensor(mask).nonzero().flatten().tolist())


def check_walk(reference: Reference, table: TokenTable, grammar: Grammar, rng: random.Random, steps: int = 14) -> int:
    """The decoder's allowed set at each step of a random `walk`, checked against the reference; the step count."""
    checked = 0
    for generated, expected in walk(reference, grammar, rng, table.size, steps):
        assert as_set(table.next_tokens(grammar, generated, table.size)) == expected, (grammar, generated)
        checked += 1
    return checked


def test_allowed_sets_match_the_reference_over_random_grammars(tokenizer, table):
    reference = Reference(tokenizer)
    rng = random.Random(0)
    steps = sum(check_walk(reference, table, random_grammar(rng), rng) for _ in range(25))
    assert steps > 100


def test_element_grammar_paths_match_the_reference(tokenizer, table):
    """The grammar the element space publishes, walked to the end of free text."""
    reference = Reference(tokenizer)
    rng = random.Random(1)
    grammar = Grammar(tuple(f"click [{i}]" for i in range(12)), ("type [0] ", "type [11] "), max_text=6)
    texts = []
    for _ in range(6):
        path = list(walk(reference, grammar, rng, table.size, steps=30))
        for generated, expected in path:
            assert as_set(table.next_tokens(grammar, generated, table.size)) == expected, generated
        texts.append(reference.text(path[-1][0]))
    assert any(t.startswith("type [") for t in texts) or any(t.startswith("click [") for t in texts), texts


def steer(reference: Reference, grammar: Grammar, text: str, width: int):
    """The path that writes as much of `text` as the grammar lets through, in the longest tokens allowed."""
    generated: list[int] = []
    while True:
        allowed = reference.allowed(grammar, generated, width)
        yield list(generated), allowed
        rest = text[len(reference.text(generated)) :]
        fitting = [
            (len(a), i) for i, a in reference.additions(generated).items() if i in allowed and rest.startswith(a)
        ]
        if not rest or not fitting:
            return
        generated.append(max(fitting)[1])


@pytest.mark.parametrize(
    "text",
    ["type [1]  ", "type [1]    x", "type [1] abcdefg", "type [1] ab  ", "click [1]", "click [10]", "click [1"],
)
def test_edge_paths_match_the_reference(tokenizer, table, text):
    """Blank typed text (no end), text that fills the room exactly or overflows it, a head that extends
    another head, a choice that is a prefix of another."""
    reference = Reference(tokenizer)
    grammar = Grammar(("click [1]", "click [10]"), ("type [1] ", "type [1] ab"), max_text=4)
    path = list(steer(reference, grammar, text, table.size))
    for generated, expected in path:
        assert as_set(table.next_tokens(grammar, generated, table.size)) == expected, reference.text(generated)
    assert len(path) > 1


def test_processor_masks_each_row_by_its_grammar_and_leaves_free_rows_alone(tokenizer, table):
    """A batch as `generate` sees it: a prompt before the generated tokens, logits wider than the
    tokenizer, a row without grammar, a finished row."""
    reference = Reference(tokenizer)
    rng = random.Random(2)
    width = table.size + 5
    grammars = [random_grammar(rng) for _ in range(4)]
    paths = [list(walk(reference, g, rng, width, steps=6)) for g in grammars]
    length = min(len(path) for path in paths) - 1  # at least 1: every walk takes a step
    eos = tokenizer.eos_token_id
    generated = [path[length][0] for path in paths] + [[eos] * length, [3] * length]
    grammars += [grammars[0], None]  # a finished row, a free row
    prompt = [7, 8, 9]
    input_ids = torch.tensor([prompt + ids for ids in generated])
    scores = torch.randn(len(grammars), width)
    out = GrammarLogitsProcessor(grammars, table, prompt_len=len(prompt))(input_ids, scores)
    assert torch.equal(out[-1], scores[-1])
    assert as_set(out[-2] > float("-inf")) == {eos, tokenizer.pad_token_id}
    for row, grammar in enumerate(grammars[:-1]):
        expected = reference.allowed(grammar, generated[row], width)
        assert as_set(out[row] > float("-inf")) == expected, (grammar, generated[row])
        assert torch.equal(out[row, sorted(expected)], scores[row, sorted(expected)])


def test_teacher_forcing_mask_is_the_sampling_mask_at_every_position(tokenizer, table):
    reference = Reference(tokenizer)
    rng = random.Random(3)
    grammars = [random_grammar(rng) for _ in range(4)] + [None]
    paths = [list(walk(reference, g, rng, table.size)) if g else [([1, 2], None)] for g in grammars]
    sequences = [path[-1][0] for path in paths]
    longest = max(map(len, sequences)) + 1
    targets = torch.full((len(grammars), longest + 1), -100)
    mask = torch.zeros_like(targets, dtype=torch.bool)
    for row, ids in enumerate(sequences):  # row 1 starts one position late, as under left padding
        start = row % 2
        targets[row, start : start + len(ids)] = torch.tensor(ids, dtype=torch.long)
        mask[row, start : start + len(ids)] = True
    allowed = grammar_token_mask(grammars, table, targets, mask, table.size)
    assert allowed.dtype == torch.bool and allowed.shape == (*targets.shape, table.size)
    for row, grammar in enumerate(grammars):
        positions = mask[row].nonzero().flatten().tolist()
        free = [p for p in range(targets.shape[1]) if grammar is None or p not in positions]
        assert all(bool(allowed[row, p].all()) for p in free)
        for k, pos in enumerate(positions if grammar is not None else []):
            expected = reference.allowed(grammar, sequences[row][:k], table.size)
            assert as_set(allowed[row, pos]) == expected, (grammar, sequences[row][:k])
    assert grammar_token_mask([None, None], table, targets[:2], mask[:2], table.size) is None


def test_scored_tokens_normalise_over_the_allowed_tokens_only(tokenizer, table):
    """A constrained token's teacher-forced log-prob is its logit's share among the tokens allowed there."""
    reference = Reference(tokenizer)
    grammar = Grammar(("click [0]", "click [1]", "Click [2]"), ("type [1] ",), 4)
    rng = random.Random(4)
    ids = max((list(walk(reference, grammar, rng, table.size))[-1][0] for _ in range(5)), key=len)
    targets = torch.tensor([ids])
    logits = torch.randn(1, len(ids), table.size)
    logp = scored_tokens(logits, targets, torch.ones_like(targets, dtype=torch.bool), 1.0, [grammar], table)
    expected = [
        logits[0, t, token] - logits[0, t, sorted(reference.allowed(grammar, ids[:t], table.size))].logsumexp(-1)
        for t, token in enumerate(ids)
    ]
    torch.testing.assert_close(logp[0], torch.stack(expected))


def test_sequence_grammars_match_the_reference(tokenizer, table):
    reference = Reference(tokenizer)
    rng = random.Random(5)
    steps = 0
    for _ in range(30):
        grammar = random_sequence_grammar(rng)
        assert Grammar.from_dict(grammar.to_dict()) == grammar
        steps += check_walk(reference, table, grammar, rng, steps=20)
    assert steps > 200


def sampled_actions(reference: Reference, table: TokenTable, grammar: Grammar, rng: random.Random, count: int):
    """`count` random walks to EOS under the decoder's masks, each step checked against the reference."""
    eos = reference.tokenizer.eos_token_id
    for _ in range(count):
        generated: list[int] = []
        while eos not in generated:
            allowed = as_set(table.next_tokens(grammar, generated, table.size))
            assert allowed == reference.allowed(grammar, generated, table.size), reference.text(generated)
            others = sorted(allowed - {eos})
            generated.append(eos if eos in allowed and (rng.random() < 0.5 or not others) else rng.choice(others))
        yield reference.text(generated[:-1])


@pytest.mark.parametrize("space", [pae, coords], ids=["pae", "coords"])
def test_action_space_grammars_match_the_reference_and_every_action_parses(tokenizer, table, space):
    rng = random.Random(6)
    actions = []
    pages, walks = (4, 3) if space is pae else (3, 2)  # a coords action is ~110 characters long
    for _ in range(pages):
        elements = [{"editable": rng.random() < 0.3} for _ in range(rng.randint(1, 14))]
        grammar = space.grammar(elements, max_text=3, max_thought=5)
        for text in sampled_actions(Reference(tokenizer), table, grammar, rng, count=walks):
            actions.append(space.parse(text, len(elements)))  # a ParseError fails the test
    assert len({a.kind for a in actions}) > 2, actions
