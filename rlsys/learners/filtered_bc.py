"""Filtered behaviour cloning and SFT (docs/algorithms/filtered_bc.md, pae.md): imitate the trajectories that worked
(`learner.filter`: success, DigiRL's reward quantile, or PAE's shortest successes per task), or all
non-empty ones (`learner.algorithm: sft`), with a token-mean NLL."""

from __future__ import annotations

import random

import numpy as np

from rlsys.config import LearnerConfig
from rlsys.config.checks import ranks_history
from rlsys.core.types import Trajectory
from rlsys.learners.history import History
from rlsys.learners.imitation import ActorUpdate, samples_of
from rlsys.learners.selection import above_reward_quantile, failed, imitable_steps, policy_lag, select


class FilteredBC:
    def __init__(self, cfg: LearnerConfig, policy, seed: int = 0, correct_off_policy: bool = False):
        self.cfg = cfg
        self.actor = ActorUpdate(cfg, policy, "token_mean", correct_off_policy, seed)
        # DigiRL's baseline ranks rewards over the run's history, as DigiRL's curriculum does
        self.ranks_history = ranks_history(cfg)  # the rule the config check bounds the history reads by
        self.rng = random.Random(seed)

    def update(
        self, trajectories: list[Trajectory], offline_iteration: int | None = None, history: History | None = None
    ) -> dict:
        kept = select(self.cfg, trajectories) if history is None else self._from_history(history)
        samples = samples_of(kept)
        metrics = {
            "learner/selected_trajectories": len(kept),
            "learner/selected_failures": sum(map(failed, kept)),  # let in by a noisy reward
            "learner/samples": len(samples),
        }
        imitated = [t for t in kept if imitable_steps(t)]
        metrics |= policy_lag(imitated, self.actor.trained_version)
        return metrics | self.actor.run(samples, self.cfg.updates_per_iteration)

    def _from_history(self, history: History) -> list[Trajectory]:
        """The reward quantile over every trajectory of the run; at most `sample_trajectories` of those kept."""
        rows = history.summaries()
        ids = [rows.ids[i] for i in np.flatnonzero(above_reward_quantile(rows.rewards, self.cfg.quantile))]
        if len(ids) > self.cfg.sample_trajectories:
            ids = self.rng.sample(ids, self.cfg.sample_trajectories)
        return history.fetch(ids)

    def state_dict(self) -> dict:
        return {"actor": self.actor.state_dict(), "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        if "rng" in state:
            self.rng.setstate(state["rng"])
