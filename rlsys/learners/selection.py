"""Which trajectories an algorithm imitates (docs/algorithms/filtered_bc.md), and which of their steps."""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict

import numpy as np

from rlsys.config import LearnerConfig
from rlsys.core.types import Trajectory


def successes(trajectories: list[Trajectory]) -> list[Trajectory]:
    return [t for t in trajectories if t.trainable and t.outcome == "success"]


def failed(traj: Trajectory) -> bool:
    """A trainable episode that did not succeed: a failure or a timeout (synthweb's non-successes are all timeouts)."""
    return traj.trainable and traj.outcome != "success"


def reward_quantile(trajectories: list[Trajectory], quantile: float) -> list[Trajectory]:
    """DigiRL's filtered BC: trajectory reward at or above the `quantile` of rewards. When few succeed the
    cutoff is 0; the original then clones every trajectory, here only positive rewards are ever kept."""
    trainable = [t for t in trajectories if t.trainable]
    keep = above_reward_quantile(np.array([t.reward for t in trainable]), quantile)
    return [t for t, k in zip(trainable, keep) if k]


def above_reward_quantile(rewards: np.ndarray, quantile: float) -> np.ndarray:
    if not len(rewards):
        return np.zeros(0, dtype=bool)
    return (rewards >= np.quantile(rewards, quantile)) & (rewards > 0)


def shortest_successes(trajectories: list[Trajectory], fraction: float) -> list[Trajectory]:
    """PAE's filtered BC: per task, the `fraction` of its successes with the fewest steps (at least one)."""
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for t in successes(trajectories):
        by_task[t.task.id].append(t)
    kept = []
    for group in by_task.values():
        group.sort(key=lambda t: len(t.steps))  # stable: ties keep their buffer order
        kept += group[: max(1, math.ceil(fraction * len(group)))]
    return kept


def non_empty(trajectories: list[Trajectory]) -> list[Trajectory]:
    """SFT: every trainable trajectory with at least one step to imitate."""
    return [t for t in trajectories if t.trainable and imitable_steps(t)]


def imitable_steps(traj: Trajectory) -> list[int]:
    """Steps whose action was produced and carried out: no empty text, no parse or action error."""
    return [i for i, s in enumerate(traj.steps) if s.action_text and not s.error]


def select(cfg: LearnerConfig, trajectories: list[Trajectory]) -> list[Trajectory]:
    if cfg.algorithm == "sft":
        return non_empty(trajectories)
    if cfg.filter == "quantile":
        return reward_quantile(trajectories, cfg.quantile)
    if cfg.filter == "shortest":
        return shortest_successes(trajectories, cfg.shortest_fraction)
    return successes(trajectories)


def is_validation(traj: Trajectory | str, fraction: float) -> bool:
    """A fixed share of trajectories held out from critic training, chosen by id (stable across runs)."""
    digest = hashlib.sha1((traj if isinstance(traj, str) else traj.id).encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < fraction


def policy_lag(trajectories: list[Trajectory], version: int) -> dict:
    """How many versions behind `version` the policies were that collected these trajectories: mean and max.
    Each algorithm reports it for the trajectories its update trained on (docs/architecture.md)."""
    return versions_lag([t.policy_version for t in trajectories], version)


def versions_lag(versions, version: int) -> dict:
    """policy_lag of the trajectories these policy versions collected. Offline data (version -1) was collected
    by no policy of this run: it is counted apart, not as a lag."""
    lags = [version - int(v) for v in versions if v >= 0]
    return {
        "train/policy_lag": float(np.mean(lags)) if lags else None,
        "train/policy_lag_max": max(lags) if lags else None,
        "train/offline_in_sample": sum(int(v < 0) for v in versions),
    }
