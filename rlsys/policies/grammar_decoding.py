"""Grammar-constrained decoding for any tokenizer.

An env may publish, per observation, the set of actions valid there (`rlsys.core.grammar.Grammar`).
`GrammarLogitsProcessor` keeps generation inside it: at every step only tokens whose text
continues a valid action keep their logits, and EOS only where an action may end. The tokens'
texts are computed once per tokenizer (`TokenTable`), so the same code serves byte-level
vocabularies and BPE / SentencePiece ones, where one token may span several characters.
"""

from __future__ import annotations

from collections import defaultdict

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


class TokenTable:
    """The text each token id contributes when appended to a sequence."""

    def __init__(self, tokenizer):
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        special = special_token_ids(tokenizer)
        # Decoding a token after an anchor keeps the leading space SentencePiece drops at the start.
        anchor = tokenizer.encode("a", add_special_tokens=False)[-1]
        base = tokenizer.decode([anchor])
        size = len(tokenizer)
        pairs = tokenizer.batch_decode([[anchor, i] for i in range(size)])
        self.texts = ["" if i in special else pair[len(base) :] for i, pair in enumerate(pairs)]
        self.by_text: dict[str, list[int]] = defaultdict(list)
        for i, text in enumerate(self.texts):
            if text:
                self.by_text[text].append(i)
        self.lengths = np.array([len(t) for t in self.texts])
        self.printable = np.array([bool(t) and set(t) <= PRINTABLE for t in self.texts])

    def text_of(self, ids: list[int]) -> str:
        return "".join(self.texts[i] for i in ids if i < len(self.texts))

    def allowed(self, grammar: Grammar, prefix: str) -> tuple[set[int], bool]:
        """Token ids that keep `prefix` inside the grammar, and whether the action may end here."""
        ids: set[int] = set()
        can_end = False

        def add_prefixes_of(rest: str) -> None:
            for k in range(1, len(rest) + 1):
                ids.update(self.by_text.get(rest[:k], ()))

        for choice in grammar.choices:
            if choice == prefix:
                can_end = True
            elif choice.startswith(prefix):
                add_prefixes_of(choice[len(prefix) :])
        for head in grammar.text_prefixes:
            if prefix.startswith(head):
                text = prefix[len(head) :]
                room = grammar.max_text - len(text)
                if room > 0:
                    ids.update(np.flatnonzero(self.printable & (self.lengths <= room)).tolist())
                can_end = can_end or bool(text.strip())
            elif head.startswith(prefix):
                add_prefixes_of(head[len(prefix) :])
        return ids, can_end


class GrammarLogitsProcessor(LogitsProcessor):
    """Masks every token that would leave each row's grammar; rows without a grammar are free."""

    def __init__(self, grammars: list[Grammar | None], table: TokenTable, prompt_len: int):
        self.grammars = grammars
        self.table = table
        self.prompt_len = prompt_len  # tokens before the first generated one

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        mask = torch.zeros_like(scores)
        eos = self.table.eos_id
        for row, grammar in enumerate(self.grammars):
            if grammar is None:
                continue
            mask[row] = float("-inf")
            generated = input_ids[row, self.prompt_len :].tolist()
            if eos in generated:  # a finished row only pads from here on
                mask[row, [eos, self.table.pad_id]] = 0
                continue
            ids, can_end = self.table.allowed(grammar, self.table.text_of(generated))
            if can_end or not ids:
                ids.add(eos)
            mask[row, sorted(i for i in ids if i < scores.shape[1])] = 0
        return scores + mask


def grammars_of(observations) -> list[Grammar | None]:
    return [Grammar.from_dict(o.extras["grammar"]) if "grammar" in o.extras else None for o in observations]


def grammar_logit_mask(
    grammars: list[Grammar | None], table: TokenTable, targets: torch.Tensor, mask: torch.Tensor, vocab_size: int
) -> torch.Tensor | None:
    """The additive mask (0 or -inf) that generation applied, rebuilt for teacher forcing, so a
    constrained sample is scored under the distribution it was drawn from. `targets` [B, T] holds
    the action tokens at the positions where `mask` is true. None when no row has a grammar."""
    if all(g is None for g in grammars):
        return None
    out = torch.zeros((*targets.shape, vocab_size), device=targets.device)
    for row, grammar in enumerate(grammars):
        if grammar is None:
            continue
        so_far: list[int] = []
        for pos in mask[row].nonzero().flatten().tolist():
            ids, can_end = table.allowed(grammar, table.text_of(so_far))
            if can_end or not ids:
                ids.add(table.eos_id)
            out[row, pos] = float("-inf")
            out[row, pos, sorted(i for i in ids if i < vocab_size)] = 0
            so_far.append(int(targets[row, pos]))
    return out
