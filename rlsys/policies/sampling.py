"""What every generating policy shares around `generate`.

`samples_from` cuts each row at EOS and records the behaviour log-prob of exactly the tokens it
sampled, under the distribution it sampled from (temperature, grammar mask and suppressed tokens
included). An action cut at `max_new_tokens` is scored as its text followed by EOS (generation
runs one step past the limit for that), because that is what teacher forcing scores.
`scored_tokens` is the teacher-forced side of the same distribution.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

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


# a run of one special token, such as an image's placeholders: shown once, with its count
_REPEATED_TOKEN = re.compile(r"(<[^<>\s]{1,40}>)\1{3,}")


def prompt_text(tokenizer, ids: Sequence[int]) -> str:
    """A prompt as the model read it: its tokens decoded, special tokens kept, a run of one repeated token folded."""
    text = tokenizer.decode(list(ids))
    return _REPEATED_TOKEN.sub(lambda m: f"{m.group(1)}×{len(m.group(0)) // len(m.group(1))}", text)


def prompt_texts(tokenizer, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[str]:
    """Each row's prompt (`prompt_text`), padding left out."""
    return [prompt_text(tokenizer, [i for i, m in zip(ids, mask) if m]) for ids, mask in
            zip(input_ids.tolist(), attention_mask.tolist())]  # fmt: skip


def samples_from(
    model,
    out,
    prompt_len: int,
    eos_id: int,
    decode: Callable,
    version: int,
    limit: int,
    prompts: Sequence[str] | None = None,
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
        prompt = prompts[row] if prompts is not None else None
        samples.append(ActionSample(decode(seq[:end]), float(logprob), version, prompt=prompt))
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
