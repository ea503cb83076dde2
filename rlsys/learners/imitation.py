"""Weighted imitation of chosen (observation, action) pairs: the actor update of filtered BC, SFT,
PAE and DigiRL, with the optional probability clamp and clipped importance weights."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from rlsys.config import LearnerConfig
from rlsys.core.types import Observation, Step, Trajectory
from rlsys.learners.losses import LossSum, clamp_probs, importance_weights, sequence_nll, token_nll
from rlsys.learners.optim import ModuleOptimizer, train_steps
from rlsys.learners.selection import imitable_steps
from rlsys.learners.token_budget import split_by_tokens, token_budget


@dataclass
class ActorSample:
    observation: Observation
    action: str
    behaviour_logprob: float | None
    weight: float = 1.0
    token_ids: list[int] | None = None  # as sampled, where the policy reported them: scored instead of the text

    @classmethod
    def of(cls, step: Step) -> ActorSample:
        return cls(step.observation, step.action_text, step.logprob, token_ids=step.token_ids)


def samples_of(trajectories: list[Trajectory]) -> list[ActorSample]:
    return [ActorSample.of(t.steps[i]) for t in trajectories for i in imitable_steps(t)]


def sampled_ids(batch: list[ActorSample]) -> dict:
    """`token_ids=` for token_logprobs when some actions came with their sampled ids (policies that
    report none take no such argument)."""
    ids = [s.token_ids for s in batch]
    return {"token_ids": ids} if any(i is not None for i in ids) else {}


@contextmanager
def as_acted(policy) -> Iterator[None]:
    """Scoring as a runner scored its actions: dropout off, no gradient; the policy back in train mode after."""
    policy.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        policy.train()


class ActorUpdate:
    """`reduction`: `token_mean` (filtered BC, SFT, PAE: NLL per real token) or `sequence_mean`
    (DigiRL: the batch mean of weight x the action's summed log-prob)."""

    def __init__(
        self,
        cfg: LearnerConfig,
        policy,
        reduction: Literal["token_mean", "sequence_mean"],
        correct_off_policy: bool,
        seed: int = 0,
    ):
        self.cfg = cfg
        self.policy = policy
        self.reduction = reduction
        self.correct_off_policy = correct_off_policy
        self.optimizer = ModuleOptimizer("actor", policy.parameters(), cfg.lr, cfg.grad_clip)
        self.rng = random.Random(seed)
        self._stats: list[tuple[float, int, int]] = []
        self.token_budget = token_budget(cfg.max_tokens_per_micro_batch, policy)

    @property
    def trained_version(self) -> int:
        """The version of the weights this update trains, which a policy lag is counted from."""
        return getattr(self.policy, "version", 0)

    def loss_sum(self, batch: list[ActorSample]) -> LossSum:
        observations, actions = [s.observation for s in batch], [s.action for s in batch]
        scored = sampled_ids(batch)
        token_logp, mask = self.policy.token_logprobs(observations, actions, **scored)
        weights = torch.tensor([s.weight for s in batch], device=token_logp.device, dtype=torch.float32)
        if self.correct_off_policy:
            rho, unknown = importance_weights(
                self._logprobs_as_acted(observations, actions, scored), [s.behaviour_logprob for s in batch],
                self.cfg.importance_clip,
            )  # fmt: skip
            weights = weights * rho
            self._stats.append((float(rho.mean()), int((rho >= self.cfg.importance_clip).sum()), unknown))
        if self.cfg.prob_clamp:
            token_logp = clamp_probs(token_logp, mask)
        if self.reduction == "token_mean":
            return token_nll(token_logp, mask, weights)
        return sequence_nll(token_logp, weights)

    def _logprobs_as_acted(self, observations, actions, scored: dict) -> torch.Tensor:
        """log pi(a|s) for the importance ratio, computed as the runner computed mu: dropout off, no gradient
        (temperature, grammar mask and suppressed tokens are token_logprobs' already). Scored in train mode,
        dropout alone pulled the mean of min(1, pi/mu) to 0.77-0.84 at zero policy lag."""
        with as_acted(self.policy):
            return self.policy.token_logprobs(observations, actions, **scored)[0].sum(-1)

    def run(self, items: list, steps: int, choose: Callable[[list], list[ActorSample]] | None = None) -> dict:
        """`steps` updates on micro-batches drawn from `items`: ActorSamples, or anything `choose` turns into
        the samples to imitate when the batch is drawn (Digi-Q's Best-of-N). A batch with nothing chosen
        contributes no gradient."""
        self.policy.train()
        self._stats = []
        metrics = train_steps(
            self.optimizer, items, self.loss_sum, steps, self.cfg, self.rng, select=choose, split=self.split
        )
        if self._stats:
            metrics["actor/importance_weight"] = float(np.mean([m for m, _, _ in self._stats]))
            metrics["actor/importance_clipped"] = sum(c for _, c, _ in self._stats)
            metrics["actor/no_behaviour_logprob"] = sum(u for _, _, u in self._stats)
        return metrics

    @property
    def split(self) -> Callable[[list[ActorSample]], list[list[ActorSample]]] | None:
        """How train_steps cuts a shard to the token budget; None where there is none."""
        return self._chunks if self.token_budget and hasattr(self.policy, "sequence_lengths") else None

    def _chunks(self, batch: list[ActorSample]) -> list[list[ActorSample]]:
        """A shard cut to the token budget (token_budget.py)."""
        observations, actions = [s.observation for s in batch], [s.action for s in batch]
        lengths = self.policy.sequence_lengths(observations, actions, **sampled_ids(batch))
        return split_by_tokens(batch, lengths, self.token_budget, packed=getattr(self.policy, "packing", False))

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.setstate(state["rng"])
