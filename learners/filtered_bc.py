"""Filtered behaviour cloning (REFERENCE.md §2.3): imitate the trajectories that worked.

Unlike the original, a quantile cutoff of zero never turns into cloning everything: only
trajectories with a positive reward are ever kept.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from rlsys.config import LearnerConfig
from rlsys.types import Trajectory


class FilteredBC:
    def __init__(self, cfg: LearnerConfig, policy, seed: int = 0):
        self.cfg = cfg
        self.policy = policy
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
        self.rng = random.Random(seed)

    def select(self, trajectories: list[Trajectory]) -> list[Trajectory]:
        trainable = [t for t in trajectories if t.trainable]
        if self.cfg.filter == "success":
            return [t for t in trainable if t.outcome == "success"]
        if not trainable:
            return []
        cutoff = float(np.quantile([t.reward for t in trainable], self.cfg.quantile))
        return [t for t in trainable if t.reward >= cutoff and t.reward > 0]

    def update(self, trajectories: list[Trajectory]) -> dict:
        kept = self.select(trajectories)
        pairs = [(s.observation, s.action_text) for t in kept for s in t.steps if s.action_text and not s.error]
        metrics = {"learner/selected_trajectories": len(kept), "learner/samples": len(pairs)}
        if not pairs:
            return metrics | {"learner/updates": 0}
        self.policy.train()
        losses = []
        for _ in range(self.cfg.updates_per_iteration):
            batch = self.rng.sample(pairs, min(self.cfg.batch_size, len(pairs)))
            logp, mask = self.policy.token_logprobs([o for o, _ in batch], [a for _, a in batch])
            loss = -logp.sum() / mask.sum()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(self.policy.parameters()), self.cfg.grad_clip)
            self.optimizer.step()
            losses.append(loss.item())
        return metrics | {"learner/updates": len(losses), "learner/loss": float(np.mean(losses))}

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.setstate(state["rng"])
