"""From a sample of whole rollout groups (`run.group_size`: the copies of one drawn task, played from one start, name
their group in `task.meta["rollout_group"]`) to GRPO's training samples: each group's trajectory rewards give every
member its group-relative advantage (objective.group_advantages), carried by every action of every turn it took
(selection.imitable_steps). With step-level groups (steps.py) an action's advantage is its trajectory's plus
step_weight x its own A_step. A group whose actions all carry 0 (every reward equal and, with step-level groups, no
anchor group whose returns differ), or with fewer than two trainable members, is skipped and counted, and so are
trajectories played alone."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import torch

from rlsys.core.types import Trajectory, rollout_group
from rlsys.learners.grpo.objective import group_advantages, informative
from rlsys.learners.grpo.steps import step_advantages
from rlsys.learners.imitation import ActorSample
from rlsys.learners.selection import imitable_steps


@dataclass
class GroupSample(ActorSample):
    """One action with its advantage (its trajectory's, plus step_weight x A_step with step-level groups), and what
    the update scores before its first step: the per-token log-probs (its real tokens, in order) under the proximal
    policy and, with the KL on, the reference."""

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
    step_groups: int = 0  # anchor groups of two or more steps, in the groups kept
    step_grouped: int = 0  # samples whose step is in one of them

    def metrics(self) -> dict:
        return {
            "grpo/groups": self.groups,
            "grpo/uniform_groups": self.uniform,
            "grpo/skipped_small_groups": self.small,
            "grpo/ungrouped_trajectories": self.ungrouped,
            "grpo/samples": len(self.samples),
            "grpo/advantage_abs_mean": float(np.mean(np.abs(self.advantages))) if self.advantages else None,
            "grpo/step_groups": self.step_groups,
            "grpo/step_grouped_actions": self.step_grouped,
        }


@dataclass(frozen=True)
class StepGrouping:
    """learner.grpo.step_weight (omega) and step_gamma, where learner.grpo.step_groups is on."""

    weight: float
    gamma: float


def group_samples(trajectories: list[Trajectory], scale_by_std: bool, steps: StepGrouping | None = None) -> Groups:
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
        if len(group) < 2:
            out.small += 1
            continue
        rewards = [t.reward for t in group]
        advantages = group_advantages(rewards, scale=scale_by_std).tolist()
        imitable = [imitable_steps(t) for t in group]
        anchored = step_advantages(group, steps.gamma, scale_by_std) if steps else None
        # per trajectory, per step: step_weight x A_step (0 without step-level groups)
        extra = [steps.weight * a for a in anchored.advantages] if anchored else [np.zeros(len(t.steps)) for t in group]
        if not informative(rewards) and not any(extra[k][i] for k, idx in enumerate(imitable) for i in idx):
            out.uniform += 1
            continue
        out.advantages += advantages
        for traj, advantage, idx, add in zip(group, advantages, imitable, extra):
            for i in idx:
                s = traj.steps[i]
                sample = GroupSample(s.observation, s.action_text, s.logprob, token_ids=s.token_ids)
                sample.advantage = advantage + float(add[i])
                out.samples.append(sample)
            out.trained += [traj] * bool(idx)
        if anchored:
            out.step_groups += anchored.anchor_groups
            out.step_grouped += sum(int(anchored.grouped[k][i]) for k, idx in enumerate(imitable) for i in idx)
    return out
