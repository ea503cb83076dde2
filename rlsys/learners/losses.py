"""Actor and critic losses. Token log-probs come from `policy.token_logprobs` (zero where masked)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

CLAMP_LOW, CLAMP_HIGH = math.log(0.001), math.log(0.99)


def clamp_probs(token_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log clamp(pi(token), 0.001, 0.99) (docs/algorithms/digirl.md#update): tokens already above 0.99 or below 0.001
    give no gradient. Padding stays zero."""
    return token_logp.clamp(CLAMP_LOW, CLAMP_HIGH).masked_fill(~mask, 0.0)


def importance_weights(
    sequence_logp: torch.Tensor, behaviour_logp: Sequence[float | None], clip: float
) -> tuple[torch.Tensor, int]:
    """min(clip, pi(a|s) / mu(a|s)) per sample, detached; 1 where the behaviour log-prob is unknown
    (imported data, hosted policies). Returns the weights and how many samples had no log-prob."""
    known = torch.tensor([mu is not None for mu in behaviour_logp], device=sequence_logp.device)
    mu = torch.tensor([0.0 if m is None else m for m in behaviour_logp], device=sequence_logp.device)
    ratio = torch.exp(sequence_logp.detach().double() - mu.double()).clamp(max=clip).float()
    return torch.where(known, ratio, torch.ones_like(ratio)), int((~known).sum())


@dataclass
class LossSum:
    """A loss as the sum it averages and what it averages over (items, or real tokens). A learner group
    divides each process's sum by the count over all processes, so N shards give the whole batch's mean."""

    total: torch.Tensor | None
    count: float

    def mean(self) -> torch.Tensor:
        return self.total / max(self.count, 1)


def token_nll(token_logp: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor) -> LossSum:
    """Filtered BC / SFT: -sum_i w_i sum_t log pi, over the number of real tokens."""
    return LossSum(-(weights[:, None] * token_logp).sum(), float(mask.sum()))


def sequence_nll(token_logp: torch.Tensor, weights: torch.Tensor) -> LossSum:
    """DigiRL's actor: -sum_batch(A_i * sum_t log pi), over the batch size."""
    return LossSum(-(weights * token_logp.sum(-1)).sum(), float(len(weights)))


def two_class_ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of 2-logit success classifiers against 0/1 labels."""
    return F.cross_entropy(logits.float(), labels.long())


def constant_ce(fit_labels, labels) -> float:
    """The cross-entropy on `labels` of a predictor that always says the success rate of `fit_labels`: what a
    critic's validation loss must beat to have learnt anything about the inputs."""
    rate = min(max(float(np.mean(fit_labels)), 1e-6), 1 - 1e-6)
    y = np.asarray(labels, dtype=float)
    return float(-np.mean(y * np.log(rate) + (1 - y) * np.log(1 - rate)))


def ranking_auc(scores, labels) -> float | None:
    """The chance that a random success scores above a random failure (ties count half): how well a critic
    orders what it scores. A critic can order well while its cross-entropy is no better than a constant's (its
    probabilities all near the base rate). None when `labels` hold one class only."""
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    if y.all() or not y.any():
        return None
    pos, neg = s[y][:, None], s[~y][None, :]
    return float(np.mean(pos > neg) + 0.5 * np.mean(pos == neg))


def success_probability(logits: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits.float(), dim=-1)[..., 1]
