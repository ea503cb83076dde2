"""Grammar-constrained decoding for any tokenizer.

An env may publish, per observation, the set of actions valid there (`rlsys.core.grammar.Grammar`).
`GrammarLogitsProcessor` keeps generation inside it: at every step only tokens whose text
continues a valid action keep their logits, and EOS only where an action may end. The tokens'
texts are computed once per tokenizer (`TokenTable`), so the same code serves byte-level
vocabularies and BPE / SentencePiece ones, where one token may span several characters.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass
from itertools import islice

import numpy as np
import torch
from transformers import LogitsProcessor

from rlsys.core.grammar import PRINTABLE, Grammar


def special_token_ids(tokenizer) -> set[int]:
    """Named special tokens and every added special token (image placeholders, chat markers):
    none of them is text an action may contain."""
    added = getattr(tokenizer, "added_tokens_decoder", {})
    return set(tokenizer.all_special_ids) | {i for i, token in added.items() if token.special}


def neutralize_special_tokens(text: str, tokenizer) -> str:
    """Page text, typed text and history go into prompts; a literal `<image>` or chat marker in
    them must stay text, or the model would see a placeholder with no image behind it."""
    added = getattr(tokenizer, "added_tokens_decoder", {})
    for token in {t.content for t in added.values() if t.special and len(t.content) > 1}:
        if token in text:
            text = text.replace(token, token[0] + "\u200b" + token[1:])
    return text


MAX_CACHED_GRAMMARS = 256  # observations in flight at once; a full cache is dropped, not evicted one by one
MAX_CACHED_PREFIXES = 4096  # per grammar: its literal prefixes, and typed text beyond them
MAX_CACHED_TEXTS = 65536  # literal endings (`click [12]`, `2]`, ...): the same on every page
NO_TOKENS = np.zeros(0, dtype=np.int64)
ALLOWED = {np.dtype(bool): (True, False), np.dtype(np.float32): (0.0, -np.inf)}  # (allowed, masked) per row type


class TokenTable:
    """The text each token id contributes when appended to a sequence, and which tokens a grammar allows next.

    Allowed sets are masks over the vocabulary: boolean for teacher forcing, 0 / -inf rows that the logits
    processor adds to the scores. Free text allows every printable token that fits the room left (one row
    per room, computed once); the tokens that continue a literal (a choice, or the head before free text)
    are looked up once per literal ending and cached per grammar and prefix (`GrammarIndex`). A decoding
    step so costs a few vectorised copies per row, at a 152k vocabulary as at 32k (benchmarks/README.md)."""

    def __init__(self, tokenizer):
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        special = special_token_ids(tokenizer)
        # Decoding a token after an anchor keeps the leading space SentencePiece drops at the start.
        anchor = tokenizer.encode("a", add_special_tokens=False)[-1]
        base = tokenizer.decode([anchor])
        self.size = len(tokenizer)
        pairs = tokenizer.batch_decode([[anchor, i] for i in range(self.size)])
        self.texts = ["" if i in special else pair[len(base) :] for i, pair in enumerate(pairs)]
        by_text: dict[str, list[int]] = defaultdict(list)
        for i, text in enumerate(self.texts):
            if text:
                by_text[text].append(i)
        self.by_text = {text: np.array(ids, dtype=np.int64) for text, ids in by_text.items()}
        self.longest = max(map(len, self.by_text), default=0)
        self.lengths = np.array([len(t) for t in self.texts])
        self.printable = np.array([bool(t) and set(t) <= PRINTABLE for t in self.texts])
        self._longest_printable = int(self.lengths[self.printable].max(initial=0))
        self._fits: dict[tuple[int, np.dtype], tuple[np.ndarray, bool]] = {}
        self._indexes: dict[Grammar, GrammarIndex] = {}
        self._starting: dict[str, np.ndarray] = {}

    def text_of(self, ids: list[int]) -> str:
        return "".join(self.texts[i] for i in ids if i < self.size)

    def free_text(self, room: int, dtype=bool) -> tuple[np.ndarray, bool]:
        """The printable tokens of at most `room` characters (as `write_next` writes a row of `dtype`), and
        whether there is any."""
        room = min(room, self._longest_printable)  # past the longest printable token, every room is alike
        key = (room, np.dtype(dtype))
        if key not in self._fits:
            fits = self.printable & (self.lengths <= room)
            yes, no = ALLOWED[key[1]]
            self._fits[key] = np.where(fits, yes, no).astype(dtype), bool(fits.any())
        return self._fits[key]

    def tokens_starting(self, text: str) -> np.ndarray:
        """The tokens whose text is a nonempty prefix of `text`."""
        ids = self._starting.get(text)
        if ids is None:
            pieces = (text[:end] for end in range(1, min(len(text), self.longest) + 1))
            found = [self.by_text[piece] for piece in pieces if piece in self.by_text]
            ids = np.concatenate(found) if found else NO_TOKENS
            if len(self._starting) >= MAX_CACHED_TEXTS:
                self._starting.clear()
            self._starting[text] = ids
        return ids

    def index(self, grammar: Grammar) -> GrammarIndex:
        """The grammar's index over this vocabulary, shared by every row and step that decodes under it."""
        index = self._indexes.get(grammar)
        if index is None:
            if len(self._indexes) >= MAX_CACHED_GRAMMARS:
                self._indexes.clear()
            index = self._indexes[grammar] = GrammarIndex(grammar, self)
        return index

    def allowed(self, grammar: Grammar, prefix: str) -> tuple[np.ndarray, bool]:
        """Which token ids keep `prefix` inside the grammar (a boolean mask over the vocabulary), and
        whether the action may end here."""
        step = self.index(grammar).step(prefix)
        allowed = self.free_text(step.room)[0].copy() if step.room > 0 else np.zeros(self.size, dtype=bool)
        allowed[step.ids] = True
        return allowed, step.can_end

    def next_tokens(self, grammar: Grammar, generated: list[int], width: int) -> np.ndarray:
        """The tokens allowed after `generated` under `grammar`, over `width` logits (a model's output may be
        wider than its tokenizer): EOS where the action may end, or where nothing else is allowed; only EOS
        and padding once EOS was generated."""
        out = np.empty(width, dtype=bool)
        self.write_next(out, self.index(grammar), self.text_of(generated), self.eos_id in generated)
        return out

    def write_next(self, out: np.ndarray, index: GrammarIndex, prefix: str, finished: bool) -> None:
        """`next_tokens` written into `out` (a row of a batch's mask), given the text generated so far: a
        boolean row, or a float row of 0 (allowed) and -inf, which logits take by one addition."""
        yes, no = ALLOWED[out.dtype]
        out[:] = no
        if finished:  # a finished row only pads from here on
            out[[self.eos_id, self.pad_id]] = yes
            return
        width = len(out)
        step = index.step(prefix)
        free, any_free = self.free_text(step.room, out.dtype) if step.room > 0 else (None, False)
        if free is not None:
            out[: min(width, self.size)] = free[:width]
        out[step.ids if width >= self.size else step.ids[step.ids < width]] = yes
        if (step.can_end or not (step.ids.size or any_free)) and self.eos_id < width:
            out[self.eos_id] = yes


@dataclass(frozen=True)
class Step:
    """What a grammar allows after one prefix: the tokens that continue a literal, whether the action may
    end, and how many characters of free text may follow (0: none)."""

    ids: np.ndarray
    can_end: bool
    room: int


class GrammarIndex:
    """A grammar's literals (choices, and the heads before free text) sorted, so the ones a prefix
    continues are one contiguous run, and each prefix's `Step`, computed on first use."""

    def __init__(self, grammar: Grammar, table: TokenTable):
        self.grammar = grammar
        self.table = table
        self.literals = sorted(set(grammar.choices) | set(grammar.text_prefixes))
        self.choices = frozenset(grammar.choices)
        self._steps: dict[str, Step] = {}

    def step(self, prefix: str) -> Step:
        step = self._steps.get(prefix)
        if step is None:
            step = self._step(prefix)
            if len(self._steps) < MAX_CACHED_PREFIXES:
                self._steps[prefix] = step
        return step

    def _step(self, prefix: str) -> Step:
        start, found = len(prefix), []
        for literal in islice(self.literals, bisect_left(self.literals, prefix), None):
            if not literal.startswith(prefix):
                break
            if len(literal) > start:
                found.append(self.table.tokens_starting(literal[start:]))
        ids = np.concatenate(found) if found else NO_TOKENS  # a token may be listed twice
        can_end = prefix in self.choices
        room = 0
        for head in self.grammar.text_prefixes:
            if prefix.startswith(head):
                text = prefix[len(head) :]
                room = max(room, self.grammar.max_text - len(text))
                can_end = can_end or bool(text.strip())
        return Step(ids, can_end, room)


class GrammarLogitsProcessor(LogitsProcessor):
    """Masks every token that would leave each row's grammar; rows without a grammar are free."""

    def __init__(self, grammars: list[Grammar | None], table: TokenTable, prompt_len: int):
        self.grammars = grammars
        self.table = table
        self.prompt_len = prompt_len  # tokens before the first generated one
        self.indexes = [table.index(g) if g is not None else None for g in grammars]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = [row for row, index in enumerate(self.indexes) if index is not None]
        if not rows:
            return scores
        penalty = np.zeros(scores.shape, dtype=np.float32)  # adding it is cheaper than torch.where on a mask
        generated = input_ids[:, self.prompt_len :].tolist()
        table = self.table
        for row in rows:
            ids = generated[row]
            table.write_next(penalty[row], self.indexes[row], table.text_of(ids), table.eos_id in ids)
        return scores + torch.from_numpy(penalty).to(device=scores.device, dtype=scores.dtype)


def grammars_of(observations) -> list[Grammar | None]:
    return [Grammar.from_dict(o.extras["grammar"]) if "grammar" in o.extras else None for o in observations]


def grammar_token_mask(
    grammars: list[Grammar | None], table: TokenTable, targets: torch.Tensor, mask: torch.Tensor, vocab_size: int
) -> torch.Tensor | None:
    """Which tokens generation allowed at each position (boolean, [B, T, vocab_size]), rebuilt for teacher
    forcing, so a constrained sample is scored under the distribution it was drawn from. `targets` [B, T]
    holds the action tokens at the positions where `mask` is true; elsewhere everything is allowed. None when
    no row has a grammar."""
    if all(g is None for g in grammars):
        return None
    allowed = np.ones((*targets.shape, vocab_size), dtype=bool)
    tokens, real = targets.tolist(), mask.tolist()
    for row, grammar in enumerate(grammars):
        if grammar is None:
            continue
        index, text, finished = table.index(grammar), "", False
        for pos in (p for p, on in enumerate(real[row]) if on):
            table.write_next(allowed[row, pos], index, text, finished)
            token = tokens[row][pos]
            finished = finished or token == table.eos_id
            text += table.texts[token] if token < table.size else ""
    return torch.from_numpy(allowed).to(targets.device)
