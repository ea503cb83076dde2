"""The replay of successes (ARPO, and MobileRL's AdaGRPO; docs/algorithms/grpo.md#replayed-successes-arpo): the
learner keeps each task's most recent successes and, where every member of a rollout group failed alike, puts one
of them in place of a member, so that a group on a task the policy rarely solves still has something to learn from.

A replayed success is off-policy: its actions enter GRPO's loss with the behaviour weight every action gets,
min(learner.importance_clip, pi_prox / mu) from the log-probs recorded when it was played (algorithm.py)."""

from __future__ import annotations

import random
from collections import OrderedDict, defaultdict

from rlsys.core.types import Task, Trajectory, rollout_group
from rlsys.learners.grpo.objective import informative
from rlsys.learners.grpo.packing import pack, packed_size, unpack


def replay_key(task: Task) -> str:
    """Which successes a group may be given. A MiniWoB++ task's name (`task.start`): every draw gets a fresh seed,
    so `name#seed` would almost never come again, and the seeds of one name are problems of one kind. Any other
    suite's task id: a synthweb site, a web or AitW instruction, which are drawn again as they are."""
    return task.start if task.suite == "miniwob" else task.id


class SuccessReplay:
    """Per task (replay_key), its `per_task` most recent successes, packed (packing.py); at most `max_tasks` tasks
    and `max_bytes` packed bytes, the task least recently stored to or replayed from evicted whole first."""

    def __init__(self, per_task: int, max_tasks: int, max_bytes: int, seed: int = 0):
        self.per_task, self.max_tasks, self.max_bytes = per_task, max_tasks, max_bytes
        self.tasks: OrderedDict[str, list[dict]] = OrderedDict()  # least recently used first; each task's oldest first
        self.nbytes = 0
        self.rng = random.Random(f"success-replay/{seed}")

    def fill(self, trajectories: list[Trajectory]) -> tuple[list[Trajectory], list[Trajectory]]:
        """`trajectories` where each group of two or more trainable members, none a success and all with one reward,
        has one member drawn at random replaced by a stored success of its task drawn at random (renamed into the
        group); and the successes put in."""
        groups: dict[str, list[int]] = defaultdict(list)
        for k, t in enumerate(trajectories):
            if t.trainable and rollout_group(t.task) is not None:
                groups[rollout_group(t.task)].append(k)
        out, replayed = list(trajectories), []
        for name, members in groups.items():
            group = [trajectories[k] for k in members]
            if len(group) < 2 or any(t.outcome == "success" for t in group) or informative([t.reward for t in group]):
                continue
            key = replay_key(group[0].task)
            if not self.tasks.get(key):
                continue
            self.tasks.move_to_end(key)
            success = unpack(self.rng.choice(self.tasks[key]))
            success.task.meta |= {"rollout_group": name, "group_size": group[0].task.meta.get("group_size")}
            out[self.rng.choice(members)] = success
            replayed.append(success)
        return out, replayed

    def add(self, trajectories: list[Trajectory]) -> None:
        """Keep the successes (outcome "success") among `trajectories`, each once."""
        for t in trajectories:
            if t.outcome != "success" or not t.steps:
                continue
            key = replay_key(t.task)
            kept = self.tasks.setdefault(key, [])
            self.tasks.move_to_end(key)
            if any(p["id"] == t.id for p in kept):  # an update may sample a group again
                continue
            kept.append(pack(t))
            self.nbytes += packed_size(kept[-1])
            while len(kept) > self.per_task:
                self.nbytes -= packed_size(kept.pop(0))
        self._evict()

    def _evict(self) -> None:
        while self.tasks and (len(self.tasks) > self.max_tasks or self.nbytes > self.max_bytes):
            _, kept = self.tasks.popitem(last=False)
            self.nbytes -= sum(packed_size(p) for p in kept)

    def metrics(self) -> dict:
        return {
            "grpo/replay_tasks": len(self.tasks),
            "grpo/replay_successes_kept": sum(len(kept) for kept in self.tasks.values()),
            "grpo/replay_bytes": self.nbytes,
        }

    def state_dict(self) -> dict:
        version, internal, gauss = self.rng.getstate()
        return {"tasks": [[key, kept] for key, kept in self.tasks.items()], "rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict) -> None:
        """A run resumed with smaller bounds keeps what fits them, the most recent first."""
        self.tasks = OrderedDict((key, list(kept)[-self.per_task :]) for key, kept in state["tasks"])
        self.nbytes = sum(packed_size(p) for kept in self.tasks.values() for p in kept)
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self._evict()
