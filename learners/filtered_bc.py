"""Filtered behaviour cloning and SFT (docs/algorithms/filtered_bc.md, pae.md): imitate the trajectories that worked
(`learner.filter`: success, DigiRL's reward quantile, or PAE's shortest successes per task), or all
non-empty ones (`learner.algorithm: sft`), with a token-mean NLL."""

from __future__ import annotations

from rlsys.config import LearnerConfig
from rlsys.core.types import Trajectory
from rlsys.learners.imitation import ActorUpdate, samples_of
from rlsys.learners.selection import select


class FilteredBC:
    def __init__(self, cfg: LearnerConfig, policy, seed: int = 0, correct_off_policy: bool = False):
        self.cfg = cfg
        self.actor = ActorUpdate(cfg, policy, "token_mean", correct_off_policy, seed)

    def update(self, trajectories: list[Trajectory], offline_iteration: int | None = None) -> dict:
        kept = select(self.cfg, trajectories)
        samples = samples_of(kept)
        metrics = {"learner/selected_trajectories": len(kept), "learner/samples": len(samples)}
        return metrics | self.actor.run(samples, self.cfg.updates_per_iteration)

    def state_dict(self) -> dict:
        return {"actor": self.actor.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
