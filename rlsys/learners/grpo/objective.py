"""GRPO's formulas, each a function of tensors or arrays, so each can be checked against a hand computation.

- Group advantages (GRPO, DeepSeekMath): every trajectory of a group played from the same task gets
  A = (R - mean(R_group)) / (std(R_group) + eps); Dr. GRPO leaves out the division by the std, which favours
  groups whose rewards barely differ. A group whose rewards are all equal carries no signal and is skipped.
- The clipped surrogate (PPO) with separate ranges (DAPO's clip-higher): per action token,
  min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A), rho = pi(token) / mu(token) against the behaviour policy.
- The KL to a reference policy, per token, by the unbiased estimator k3 = exp(q) - q - 1, q = log ref - log pi
  (GRPO's choice; always >= 0).
- Reductions: the token mean over every action token of the batch (DAPO), or each sequence's token mean
  averaged over sequences (GRPO's original).

`A` is one number per trajectory, applied to every action token of every turn; the loss module calling these
owns which tokens those are.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

EPS = 1e-6


def group_advantages(rewards: Sequence[float], scale: bool = True) -> np.ndarray:
    """(R - mean) / (std + eps) over one group (the sample std, as TRL's GRPO trainer computes it), or R - mean
    with `scale` off (Dr. GRPO). All zeros for a group whose rewards are all equal."""
    r = np.asarray(rewards, dtype=np.float64)
    centred = r - r.mean()
    if not scale or len(r) < 2:
        return centred
    return centred / (r.std(ddof=1) + EPS)


def informative(rewards: Sequence[float]) -> bool:
    """Whether a group's rewards differ at all (DAPO's dynamic sampling keeps only those)."""
    r = np.asarray(rewards, dtype=np.float64)
    return bool(len(r) > 1 and np.ptp(r) > 0)


def clipped_surrogate(
    logp: torch.Tensor, behaviour_logp: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float
) -> torch.Tensor:
    """Per token [B, T]: min(rho A, clip(rho, 1 - clip_low, 1 + clip_high) A), rho = exp(logp - behaviour_logp);
    `advantages` [B] broadcast over each row's tokens. To be maximised."""
    ratio = torch.exp(logp - behaviour_logp)
    a = advantages.unsqueeze(-1)
    return torch.minimum(ratio * a, ratio.clamp(1 - clip_low, 1 + clip_high) * a)


def kl_k3(logp: torch.Tensor, reference_logp: torch.Tensor) -> torch.Tensor:
    """Per token: exp(q) - q - 1, q = reference_logp - logp; an unbiased, non-negative estimate of KL(pi || ref)."""
    q = reference_logp - logp
    return torch.exp(q) - q - 1


def reduce(per_token: torch.Tensor, mask: torch.Tensor, how: str) -> tuple[torch.Tensor, float]:
    """A loss as (sum, count) for rlsys's step normalisation (losses.LossSum): `token_mean` sums every real token
    and counts them; `sequence_mean` sums each row's token mean and counts rows."""
    per_token = per_token.masked_fill(~mask, 0.0)
    if how == "token_mean":
        return per_token.sum(), float(mask.sum())
    if how == "sequence_mean":
        return (per_token.sum(-1) / mask.sum(-1).clamp(min=1)).sum(), float(len(per_token))
    raise ValueError(f"reduction must be token_mean or sequence_mean, got {how!r}")
