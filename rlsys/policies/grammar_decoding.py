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

import numpy as np
import torch
from transformers import LogitsProcessor

from rlsys.core.grammar import LAST_CHAR, PRINTABLE, Grammar


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
    processor adds to the scores. Free text allows every token written in its characters (printable, less
    any it forbids) that fits the room left (one row per character set and room, computed once from a
    table of the characters each token uses, built with the table); the tokens that continue a literal are
    looked up in the sorted token texts and cached per grammar and prefix (`GrammarIndex`). A token never
    spans a literal and free text. A decoding step so costs a few vectorised copies per row, at a 152k
    vocabulary as at 32k (benchmarks/README.md)."""

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
        self.sorted_texts = sorted(self.by_text)
        self.lengths = np.array([len(t) for t in self.texts], dtype=np.int32)
        self.printable = np.array([bool(t) and set(t) <= PRINTABLE for t in self.texts])
        self.char_bits = self._printable_char_bits()
        self._withins: dict[frozenset[str], tuple[np.ndarray, int]] = {}
        self._fits: dict[tuple[frozenset[str], int, np.dtype], tuple[np.ndarray, bool]] = {}
        self._indexes: dict[Grammar, GrammarIndex] = {}
        self._beginnings: dict[str, tuple[list[np.ndarray], int]] = {}

    def text_of(self, ids: list[int]) -> str:
        return "".join(self.texts[i] for i in ids if i < self.size)

    def text_tokens(self, chars: frozenset[str], room: int, dtype=bool) -> tuple[np.ndarray, bool]:
        """The tokens of at most `room` characters, all in `chars` (printable ones), as a row of `dtype`,
        and whether there is any. One row per character set and room, computed once."""
        within, longest = self._within(chars)
        room = min(room, longest)  # past the longest such token, every room is alike
        key = (chars, room, np.dtype(dtype))
        if key not in self._fits:
            fits = within & (self.lengths <= room)
            yes, no = ALLOWED[key[2]]
            self._fits[key] = np.array([no, yes], dtype=key[2]).take(fits), bool(fits.any())
        return self._fits[key]

    def _printable_char_bits(self) -> np.ndarray:
        """[2, token] uint64: bit c of a token's two words set where it is printable and uses character 32 + c.
        Built with the table, so a character set's tokens (`_within`) take a few vectorised operations."""
        ids = np.flatnonzero(self.printable)
        chars_of_ids = "".join(self.texts[i] for i in ids).encode("utf-32-le")
        codes = np.frombuffer(chars_of_ids, dtype=np.uint32).astype(np.int64) - 32
        uses = np.zeros((self.size, 128), dtype=bool)
        uses[np.repeat(ids, self.lengths[ids]), codes] = True
        return np.ascontiguousarray(np.packbits(uses, axis=1, bitorder="little").view(np.uint64).T)

    def _within(self, chars: frozenset[str]) -> tuple[np.ndarray, int]:
        """Which tokens are nonempty and written only in `chars`, and the longest one's length."""
        within = self._withins.get(chars)
        if within is None:
            banned = np.zeros(128, dtype=bool)
            banned[[ord(c) - 32 for c in PRINTABLE - chars]] = True
            low, high = np.packbits(banned, bitorder="little").view(np.uint64)
            fits = self.printable & (((self.char_bits[0] & low) | (self.char_bits[1] & high)) == 0)
            within = self._withins[chars] = fits, int((self.lengths * fits).max(initial=0))
        return within

    def tokens_continuing(self, literals: tuple[str, ...], typed: str) -> list[np.ndarray]:
        """The tokens that continue `typed` inside one of the sorted `literals` (each token whose text begins
        what a literal has left). Literals that go on alike past what any token spans are looked up once:
        `click [0]` ... `click [149]` cost one lookup where no token begins with `click [`."""
        found, i = [], bisect_left(literals, typed)
        while i < len(literals) and literals[i].startswith(typed):
            rest = literals[i][len(typed) :]
            tokens, reach = self._beginning(rest)
            found += tokens
            i += 1
            if reach < len(rest):  # the literals that also begin with `rest[:reach + 1]` hold no other token
                i = bisect_left(literals, typed + rest[: reach + 1] + LAST_CHAR, i)
        return found

    def _beginning(self, text: str) -> tuple[list[np.ndarray], int]:
        """The tokens whose text is a nonempty beginning of `text`, and the length of the longest beginning
        of `text` that begins some token's text. Cached: literal endings (`2]`) recur on every page."""
        known = self._beginnings.get(text)
        if known is None:
            texts, low, high = self.sorted_texts, 0, min(len(text), self.longest)
            while low < high:  # what begins a token's text begins it at every shorter length too
                mid = (low + high + 1) // 2
                i = bisect_left(texts, text[:mid])
                low, high = (mid, high) if i < len(texts) and texts[i].startswith(text[:mid]) else (low, mid - 1)
            tokens = [self.by_text[text[:n]] for n in range(1, low + 1) if text[:n] in self.by_text]
            if len(self._beginnings) >= MAX_CACHED_TEXTS:
                self._beginnings.clear()
            known = self._beginnings[text] = tokens, low
        return known

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
        allowed = np.empty(self.size, dtype=bool)
        step = self.index(grammar).step(prefix)
        self._write_step(allowed, step)
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
        if finished:  # a finished row only pads from here on
            out[:] = no
            out[[self.eos_id, self.pad_id]] = yes
            return
        step = index.step(prefix)
        any_free = self._write_step(out, step)
        if (step.can_end or not (step.ids.size or any_free)) and self.eos_id < len(out):
            out[self.eos_id] = yes

    def _write_step(self, out: np.ndarray, step: Step) -> bool:
        """The step's free text and literal tokens set in `out`, everything else masked; whether any free text fits."""
        yes, no = ALLOWED[out.dtype]
        width, any_free = len(out), False
        span = min(width, self.size)
        for n, (chars, room) in enumerate(step.texts):
            free, fits = self.text_tokens(chars, room, out.dtype)
            any_free = any_free or fits
            if n == 0:
                out[:span] = free[:span]
            else:  # allowed is the larger value in both row types
                np.maximum(out[:span], free[:span], out=out[:span])
        if not step.texts:
            out[:] = no
        elif width > span:
            out[span:] = no
        out[step.ids if width >= self.size else step.ids[step.ids < width]] = yes
        return any_free


@dataclass(frozen=True)
class Step:
    """What a grammar allows after one prefix: the tokens that continue a literal, whether the action may
    end, and the free text that may follow, as (allowed characters, room left) pairs."""

    ids: np.ndarray
    can_end: bool
    texts: tuple[tuple[frozenset[str], int], ...]


class GrammarIndex:
    """A grammar's matcher (`rlsys.core.grammar.Matcher`) over one vocabulary: each prefix's `Step`,
    computed on first use. The tokens that continue the literals a prefix may be in depend only on
    those literal states, so a prefix deep in free text (a thought, before `\nAction: ...`) reuses them."""

    def __init__(self, grammar: Grammar, table: TokenTable):
        self.grammar = grammar
        self.table = table
        self.matcher = grammar.matcher()
        self._steps: dict[str, Step] = {}
        self._literal_ids: dict[frozenset, np.ndarray] = {}

    def step(self, prefix: str) -> Step:
        step = self._steps.get(prefix)
        if step is None:
            step = self._step(prefix)
            if len(self._steps) < MAX_CACHED_PREFIXES:
                self._steps[prefix] = step
        return step

    def _step(self, prefix: str) -> Step:
        matcher = self.matcher
        states = matcher.states(prefix)
        literals = frozenset(s for s in states if len(s) == 2)
        ids = self._literal_ids.get(literals)
        if ids is None:
            nodes = matcher.nodes
            found = [row for node, typed in literals for row in self.table.tokens_continuing(nodes[node].part, typed)]
            ids = np.concatenate(found) if found else NO_TOKENS  # a token may be listed twice
            if len(self._literal_ids) >= MAX_CACHED_PREFIXES:
                self._literal_ids.clear()
            self._literal_ids[literals] = ids
        return Step(ids, matcher.can_end(states), tuple(matcher.text_rooms(states)))


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
