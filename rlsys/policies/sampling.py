"""What every generating policy shares around `generate`.

`samples_from` cuts each row at EOS and records the behaviour log-prob of exactly the tokens it
sampled, under the distribution it sampled from (temperature, grammar mask and suppressed tokens
included). An action cut at `max_new_tokens` is scored as its text followed by EOS (generation
runs one step past the limit for that), because that is what teacher forcing scores.
`scored_tokens` is the teacher-forced side of the same distribution.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlsys.core.types import ActionSample
from rlsys.policies.grammar_decoding import grammar_token_mask


def sampling_kwargs(temperature: float, max_new_tokens: int, greedy: bool) -> dict:
    return {
        "do_sample": not greedy,
        "temperature": None if greedy else temperature,
        "top_k": None,
        "top_p": None,
        "max_new_tokens": max_new_tokens + 1,  # one step past the limit: the EOS of a cut action
        "output_scores": True,
        "return_dict_in_generate": True,
    }


def samples_from(
    model, out, prompt_len: int, eos_id: int, decode: Callable, version: int, limit: int
) -> list[ActionSample]:
    step_logprobs = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True).float()
    samples = []
    for row, seq in enumerate(out.sequences[:, prompt_len:].tolist()):
        if eos_id in seq[:limit]:
            end = seq.index(eos_id)
            logprob = step_logprobs[row, : end + 1].sum()
        else:
            end = limit
            eos_logprob = torch.log_softmax(out.scores[limit][row].float(), dim=-1)[eos_id]
            logprob = step_logprobs[row, :end].sum() + eos_logprob
        samples.append(ActionSample(decode(seq[:end]), float(logprob), version))
    return samples


def scored_tokens(
    logits: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    temperature: float,
    grammars=None,
    table=None,
    suppressed: list[int] | None = None,
) -> torch.Tensor:
    """Teacher-forced log-probs of `targets` [B, T] under the distribution sampling uses: logits
    divided by the temperature, suppressed tokens removed and, for rows with a grammar, masked to
    it. Zero where `mask` is false (padding never counts)."""
    logits = logits.float() / temperature
    if suppressed:
        logits = logits.index_fill(-1, torch.tensor(suppressed, device=logits.device), float("-inf"))
    if grammars is not None:
        allowed = grammar_token_mask(grammars, table, targets, mask, logits.shape[-1])
        if allowed is not None:
            logits = torch.where(allowed, logits, float("-inf"))
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return logp.masked_fill(~mask, 0.0)
