"""From a sample of whole rollout groups (`run.group_size`: the copies of one drawn task, played from one start, name
their group in `task.meta["rollout_group"]`) to GRPO's training samples: each group's trajectory rewards give every
member its group-relative advantage (objective.group_advantages), carried by every action of every turn it took
(selection.imitable_steps). A group whose rewards are all equal, or with fewer than two trainable members, is
skipped and counted, and so are trajectories played alone."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import torch

from rlsys.core.types import Trajectory, rollout_group
from rlsys.learners.grpo.objective import group_advantages, informative
from rlsys.learners.imitation import ActorSample
from rlsys.learners.selection import imitable_steps


@dataclass
class GroupSample(ActorSample):
    """One action with its trajectory's advantage, and what the update scores before its first step: the
    per-token log-probs (its real tokens, in order) under the proximal policy and, with the KL on, the reference."""

    advantage: float = 0.0
    proximal: torch.Tensor | None = None
    reference: torch.Tensor | None = None


@dataclass
class Groups:
    samples: list[GroupSample] = field(default_factory=list)
    trained: list[Trajectory] = field(default_factory=list)  # the trajectories the samples come from
    groups: int = 0
    uniform: int = 0
    small: int = 0
    ungrouped: int = 0
    advantages: list[float] = field(default_factory=list)  # one per trajectory of the groups kept

    def metrics(self) -> dict:
        return {
            "grpo/groups": self.groups,
            "grpo/uniform_groups": self.uniform,
            "grpo/skipped_small_groups": self.small,
            "grpo/ungrouped_trajectories": self.ungrouped,
            "grpo/samples": len(self.samples),
            "grpo/advantage_abs_mean": float(np.mean(np.abs(self.advantages))) if self.advantages else None,
        }


def group_samples(trajectories: list[Trajectory], scale_by_std: bool) -> Groups:
    """Groups in the order they first appear (every process of a learner group gets the same)."""
    members: dict[str, list[Trajectory]] = defaultdict(list)
    out = Groups()
    for t in trajectories:
        if not t.trainable:
            continue
        key = rollout_group(t.task)
        if key is None:
            out.ungrouped += 1
        else:
            members[key].append(t)
    out.groups = len(members)
    for group in members.values():
        rewards = [t.reward for t in group]
        if len(group) < 2:
            out.small += 1
        elif not informative(rewards):
            out.uniform += 1
        else:
            advantages = group_advantages(rewards, scale=scale_by_std)
            out.advantages += advantages.tolist()
            for traj, advantage in zip(group, advantages.tolist()):
                steps = [traj.steps[i] for i in imitable_steps(traj)]
                out.samples += [
                    GroupSample(s.observation, s.action_text, s.logprob, token_ids=s.token_ids, advantage=advantage)
                    for s in steps
                ]
                out.trained += [traj] * bool(steps)
    return out
