"""What every generating policy does after `generate`: cut each row at EOS and record the
behaviour log-prob of exactly the tokens it sampled, under the distribution it sampled from
(temperature and grammar mask included)."""

from __future__ import annotations

from collections.abc import Callable

from rlsys.types import ActionSample


def samples_from(model, out, prompt_len: int, eos_id: int, decode: Callable, version: int) -> list[ActionSample]:
    step_logprobs = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
    samples = []
    for row, seq in enumerate(out.sequences[:, prompt_len:].tolist()):
        end = seq.index(eos_id) + 1 if eos_id in seq else len(seq)
        logprob = float(step_logprobs[row, :end].float().sum())
        samples.append(ActionSample(decode(seq[: end - 1] if eos_id in seq else seq), logprob, version))
    return samples


def sampling_kwargs(temperature: float, max_new_tokens: int, greedy: bool) -> dict:
    return {
        "do_sample": not greedy,
        "temperature": None if greedy else temperature,
        "top_k": None,
        "top_p": None,
        "max_new_tokens": max_new_tokens,
        "output_scores": True,
        "return_dict_in_generate": True,
    }


def scored_tokens(logits, targets, mask, temperature: float, grammars=None, table=None):
    """Teacher-forced log-probs of `targets` [B, T] under the distribution sampling uses:
    logits divided by the temperature and, for rows with a grammar, masked to it. Zero where
    `mask` is false (padding never counts)."""
    import torch

    from rlsys.policies.grammar_decoding import grammar_logit_mask

    logits = logits.float() / temperature
    if grammars is not None:
        constraint = grammar_logit_mask(grammars, table, targets, mask, logits.shape[-1])
        if constraint is not None:
            logits = logits + constraint
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return logp.masked_fill(~mask, 0.0)
