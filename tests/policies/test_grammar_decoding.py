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

from rlsys.core.grammar import PRINTABLE, Grammar
from rlsys.policies.grammar_decoding import GrammarLogitsProcessor, TokenTable, grammar_token_mask
from rlsys.policies.presets import byte_tokenizer
from rlsys.policies.sampling import scored_tokens

WORDS = ["click", "type", "Click", "Type", "scroll", "hello", "world", "red shoes", "Kasey", "ab", "a b", "é", "\t"]
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
    alphabet = sorted(PRINTABLE) + ["é", "\t"]
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
    where nothing else may follow; after EOS, only EOS and padding. Special tokens are never text."""

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
        allowed = {i for i, added in self.additions(generated).items() if self.continues(grammar, prefix, added)}
        if self.may_end(grammar, prefix) or not allowed:
            allowed.add(eos)
        return {i for i in allowed if i < width}

    def additions(self, generated: list[int]) -> dict[int, str]:
        """The text each non-special token adds when decoded after `generated`."""
        candidates = [i for i in range(len(self.tokenizer)) if i not in self.special]
        texts = self.tokenizer.batch_decode([[self.anchor, *generated, i] for i in candidates])
        anchored = self.tokenizer.decode([self.anchor, *generated])
        return {i: text[len(anchored) :] for i, text in zip(candidates, texts)}

    @staticmethod
    def continues(grammar: Grammar, prefix: str, added: str) -> bool:
        text = prefix + added
        literal = any(s.startswith(text) for s in grammar.choices + grammar.text_prefixes)
        free = any(
            prefix.startswith(head) and set(added) <= PRINTABLE and len(text) - len(head) <= grammar.max_text
            for head in grammar.text_prefixes
        )
        return bool(added) and (literal or free)

    @staticmethod
    def may_end(grammar: Grammar, prefix: str) -> bool:
        return prefix in grammar.choices or any(
            prefix.startswith(h) and prefix[len(h) :].strip() for h in grammar.text_prefixes
        )


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


def test_allowed_sets_match_the_reference_over_random_grammars(tokenizer, table):
    reference = Reference(tokenizer)
    rng = random.Random(0)
    steps = 0
    for _ in range(25):
        grammar = random_grammar(rng)
        for generated, expected in walk(reference, grammar, rng, table.size):
            assert as_set(table.next_tokens(grammar, generated, table.size)) == expected, (grammar, generated)
            steps += 1
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
