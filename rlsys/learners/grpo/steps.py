"""Step-level groups (GiGPO, docs/algorithms/grpo.md#step-level-groups-gigpo): within one rollout group, the steps taken
from the same state, by any member and at any point of its episode, form an anchor group, and each is judged by the
discounted return it went on to get against the others of its anchor group:

    R_t    = sum_k gamma^k r_(t+k)                      over the rest of the step's own trajectory
    A_step = (R_t - mean(R)) / (std(R) + 1e-6)          over the anchor group (R_t - mean(R) without std scaling)

0 for a step alone in its anchor group, and for an anchor group whose returns are all equal."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from rlsys.core.returns import discounted_returns
from rlsys.core.types import Observation, Trajectory
from rlsys.learners.grpo.objective import group_advantages, informative


def state_key(obs: Observation) -> str | None:
    """What makes two observations one anchor state: the same element list as the policy reads it (`ui_text`), the
    same element values and check states (a PAE-style listing leaves them out of ui_text, so a filled field would
    otherwise match the empty one), the same location and the same task text. Not the screenshot's bytes, which a
    caret, an animation or a clock change while the state does not; not timings, the feedback on the last action,
    the history of earlier actions or cached features, which say how the state was reached, not what it is. None
    where ui_text is empty (an Android screen is only its screenshot): such a step joins no anchor group."""
    if not obs.ui_text:
        return None
    elements = [(e.get("value"), e.get("checked")) for e in obs.extras.get("elements") or ()]
    text = json.dumps([obs.task, obs.location, obs.ui_text, elements], default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@dataclass
class StepAdvantages:
    advantages: list[np.ndarray]  # per trajectory, A_step of each of its steps
    grouped: list[np.ndarray]  # per trajectory, whether each step is in an anchor group of two or more
    anchor_groups: int  # anchor groups of two or more steps


def step_advantages(group: list[Trajectory], gamma: float, scale: bool) -> StepAdvantages:
    """A_step of every step of one rollout group's trajectories (every step counts in its anchor group's statistics,
    also one whose action failed to parse: its return is what that choice led to)."""
    returns = [discounted_returns([s.reward for s in t.steps], gamma) for t in group]
    anchors: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i, traj in enumerate(group):
        for t, step in enumerate(traj.steps):
            key = state_key(step.observation)
            if key is not None:
                anchors[key].append((i, t))
    out = StepAdvantages([np.zeros(len(t.steps)) for t in group], [np.zeros(len(t.steps), bool) for t in group], 0)
    for members in anchors.values():
        if len(members) < 2:
            continue
        out.anchor_groups += 1
        for i, t in members:
            out.grouped[i][t] = True
        anchor_returns = [returns[i][t] for i, t in members]
        if not informative(anchor_returns):
            continue  # exactly 0, where the mean's rounding would leave the centred returns a hair off it
        for (i, t), a in zip(members, group_advantages(anchor_returns, scale=scale)):
            out.advantages[i][t] = a
    return out
