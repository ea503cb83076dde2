"""A transformers LogitsProcessor that keeps generation inside each sample's action grammar."""

from __future__ import annotations

import torch
from transformers import LogitsProcessor

from rlsys.grammar import Grammar


class GrammarLogitsProcessor(LogitsProcessor):
    """Masks every token that would leave the grammar; works on byte-level vocabularies where a
    character `c` is token `ord(c) + offset`."""

    def __init__(self, grammars: list[Grammar], decode_prefix, char_to_id, eos_id: int, prompt_len: int = 1):
        self.grammars = grammars
        self.decode_prefix = decode_prefix
        self.char_to_id = char_to_id
        self.eos_id = eos_id
        self.prompt_len = prompt_len  # decoder start tokens to skip

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        mask = torch.full_like(scores, float("-inf"))
        for row, grammar in enumerate(self.grammars):
            generated = input_ids[row, self.prompt_len :].tolist()
            if self.eos_id in generated:  # finished rows only pad from here on
                mask[row, self.eos_id] = 0
                continue
            chars, can_end = grammar.allowed_next(self.decode_prefix(generated))
            ids = [self.char_to_id(c) for c in chars]
            if can_end or not ids:
                ids.append(self.eos_id)
            mask[row, ids] = 0
        return scores + mask
