"""What of the finished training episodes goes to the replay buffer, and when.

An episode of no rollout group goes at once, unless it is stale: collected by a policy older than `run.max_policy_lag`
allows (`dropped_stale`). A rollout group (`run.group_size` > 1, the copies of one drawn task) waits until all its
members have arrived, an `env_error` one too, and then goes whole, in one call: not at all when a member is stale
(its trainable members are counted in `dropped_stale`), and when a member is not trainable (a broken group) as
`run.broken_groups` says, dropped or with the others kept (the buffer stores the trainable ones only). Sync mode plays
whole groups: the task source issues a group's copies in a row and `run.rollout_size` is a multiple of the group
size, so every group of an iteration is settled by its end.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from rlsys.core.types import Trajectory, rollout_group


class RolloutGroups:
    def __init__(self, broken_groups: Literal["drop", "keep"]):
        self.broken_groups = broken_groups
        self._arriving: dict[str, list[Trajectory]] = {}  # the members of each unfinished group that have arrived
        self.counts: Counter = Counter()  # whole groups settled: `groups`, and of them `broken_groups`, `stale_groups`

    def settle(self, finished: list[Trajectory], min_version: int | None, counters: Counter) -> list[Trajectory]:
        """What the replay buffer gets now, of the training episodes `finished` and the groups they complete;
        `counters["dropped_stale"]` grows by the trainable episodes dropped as stale."""
        alone = [t for t in finished if rollout_group(t.task) is None]
        ready = [t for t in alone if not is_stale(t, min_version)]
        counters["dropped_stale"] += len(alone) - len(ready)
        for members in self._whole(finished):
            self.counts["groups"] += 1
            if any(is_stale(t, min_version) for t in members):
                counters["dropped_stale"] += sum(t.trainable for t in members)
                self.counts["stale_groups"] += 1
            elif all(t.trainable for t in members):
                ready += members
            else:
                self.counts["broken_groups"] += 1
                ready += members if self.broken_groups == "keep" else []
        return ready

    def _whole(self, finished: list[Trajectory]) -> list[list[Trajectory]]:
        """The rollout groups whose last member is among `finished`."""
        whole = []
        for traj in finished:
            group = rollout_group(traj.task)
            if group is not None:
                members = self._arriving.setdefault(group, [])
                members.append(traj)
                if len(members) == traj.task.meta["group_size"]:
                    whole.append(self._arriving.pop(group))
        return whole

    def take_counts(self) -> dict:
        """The groups settled since the last call, as the iteration record's `train/groups`, `train/broken_groups`
        and `train/stale_groups`."""
        record = {f"train/{kind}": self.counts[kind] for kind in ("groups", "broken_groups", "stale_groups")}
        self.counts.clear()
        return record


def is_stale(traj: Trajectory, min_version: int | None) -> bool:
    """Trained on, it would teach a policy older than `run.max_policy_lag` allows (an untrainable episode is never
    stale: the buffer counts it)."""
    return min_version is not None and traj.trainable and traj.policy_version < min_version
