"""What GRPO scores once, before an update's first step, and how a batch gets it back."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlsys.learners.imitation import ActorSample, as_acted, sampled_ids


def token_logprobs_of(policy, score: Callable, samples: list[ActorSample], batch_size: int) -> list[torch.Tensor]:
    """Each sample's per-token log-probs under `score` (a `token_logprobs`): its real tokens in order, on the CPU.
    Scored `as_acted`, as ActorUpdate scores pi for its importance weight: a policy with dropout
    would otherwise start every update away from its own proximal policy. `batch_size` samples a pass, the same
    passes in every process of a learner group (a sharded model's forward pass is collective)."""
    rows = []
    with as_acted(policy):
        for i in range(0, len(samples), batch_size):
            batch = samples[i : i + batch_size]
            logp, mask = score([s.observation for s in batch], [s.action for s in batch], **sampled_ids(batch))
            rows += [row[m].float().cpu() for row, m in zip(logp, mask)]
    return rows


def spread(rows: list[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
    """Rows of per-token values (`token_logprobs_of`) laid out as `mask` [B, T] lays out the batch's real tokens
    (whatever side a policy pads), zero elsewhere."""
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    out[mask] = torch.cat(rows).to(mask.device)
    return out
