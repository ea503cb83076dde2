"""Scoring a batch of (prompt, action) sequences without padding: all rows in one packed sequence whose
position ids restart at each row, so the attention (transformers builds a block-diagonal mask from the
restarts, or runs a variable-length kernel) keeps every row to itself and each number is what the row
would give alone. Only the positions that predict an action token go through the output head.

Packing pays where the attention has a variable-length kernel (flash attention): with SDPA's dense mask
the attention's cost grows with the square of the whole pack, so `policy.packing: auto` leaves it off
there and the token budget's length-sorted chunks keep padding small instead.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

import torch

VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3")


def attention_implementation(setting: str, device: str) -> str | None:
    """`policy.attn_implementation` as transformers names it; auto: flash attention 2 on a GPU where the
    flash-attn package is installed, else None (the model's default, SDPA)."""
    if setting != "auto":
        return setting
    if str(device).startswith("cuda") and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return None


def use_packing(setting: str, model) -> bool:
    if setting != "auto":
        return setting == "on"
    return getattr(model.config, "_attn_implementation", None) in VARLEN_ATTENTION


def packed_positions(lengths: Sequence[int]) -> torch.Tensor:
    """[1, N] position ids counting from 0 in each row."""
    return torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)


def action_positions(lengths: Sequence[int], action_lengths: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the packed sequence's logits predict each row's action tokens, and how to lay them out as the
    padded path does: `keep` [K] are the positions whose logits are computed (each predicts the next token),
    `layout` [B, width] indexes `keep` with every row's action right-aligned (0 where a row is shorter; the
    mask hides those)."""
    width = max(action_lengths)
    keep, layout, start = [], [], 0
    for length, n in zip(lengths, action_lengths):
        first = len(keep)
        keep.extend(range(start + length - n - 1, start + length - 1))
        layout.append([0] * (width - n) + list(range(first, first + n)))
        start += length
    return torch.tensor(keep), torch.tensor(layout)


def right_aligned(rows: Sequence[list[int]], width: int, fill: int = 0) -> torch.Tensor:
    return torch.tensor([[fill] * (width - len(r)) + list(r) for r in rows], dtype=torch.long)


def apply_attention(model, setting: str, device: str) -> None:
    """Switch the model to `policy.attn_implementation` (a no-op for auto without flash-attn)."""
    name = attention_implementation(setting, device)
    if name is not None and getattr(model.config, "_attn_implementation", None) != name:
        model.set_attn_implementation(name)
