"""Replay buffer of whole trajectories, bounded by count and by bytes, FIFO eviction, over the run's history.

Run as a Ray actor (actors.replay.ReplayBufferActor), it holds the newest trajectories in its own
memory: the data it was sent is deserialised into the actor, so nothing it stores depends
on the runner that produced it staying alive (docs/architecture.md#data-flow). `sample` draws from
them (the step critic's transitions, filtered BC's and PAE's data). What it evicts is spilled to the
run folder and stays in the history (rlsys.data.history), which DigiRL's instruction critic and
curriculum rank whole: `summaries` and `fetch`.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from rlsys.core.types import Trajectory
from rlsys.data import shards as storage
from rlsys.data.history import Summaries, TrajectoryHistory


class ReplayBuffer:
    """Trajectories in arrival order in a list; `sample` draws positions, so its cost grows with what
    it returns, not with what is stored. Per-version counts let `sample(min_version=...)` skip the
    scan for stale trajectories when there are none."""

    def __init__(self, capacity: int, max_bytes: int, seed: int = 0, history_dir: str | None = None):
        if capacity < 1 or max_bytes < 1:
            raise ValueError("replay capacity and max_bytes must be positive")
        self.capacity = capacity
        self.max_bytes = max_bytes
        # FIFO: the stored trajectories are self._order[self._head:]; evicted slots before the head
        # are None until the list is compacted. self._slot maps an id to its index + self._offset.
        self._order: list[Trajectory | None] = []
        self._head = 0
        self._offset = 0
        self._slot: dict[str, int] = {}
        self._sizes: dict[str, int] = {}
        self._versions: Counter[int] = Counter()  # policy_version -> stored trajectories
        self._successes = 0
        self._bytes = 0
        self._rng = random.Random(seed)
        self.history = TrajectoryHistory(history_dir)
        self._evicting: list[Trajectory] = []
        self.added = 0
        self.rejected_untrainable = 0
        self.evicted = 0
        self.dropped_stale = 0

    def add(self, trajectories: list[Trajectory]) -> int:
        """Store the trainable trajectories; `env_error`/`unknown` ones are counted, not kept."""
        kept = 0
        for traj in trajectories:
            if not traj.trainable:
                self.rejected_untrainable += 1
                continue
            size = traj.nbytes()
            if size > self.max_bytes:
                self.rejected_untrainable += 1
                continue
            self._store(traj, size)
            self.added += 1
            kept += 1
            self._evict()
        self.history.evicted(self._evicting)
        self._evicting = []
        return kept

    def _store(self, traj: Trajectory, size: int) -> None:
        index = self._slot.get(traj.id)
        if index is None:
            self._slot[traj.id] = self._offset + len(self._order)
            self._order.append(traj)
        else:  # the same id again replaces the stored one in its place
            index -= self._offset
            self._account(self._order[index], -1)
            self._order[index] = traj
        self._sizes[traj.id] = size
        self._account(traj, 1)
        self.history.record(traj)

    def _account(self, traj: Trajectory, sign: int) -> None:
        size = self._sizes.pop(traj.id) if sign < 0 else self._sizes[traj.id]
        self._bytes += sign * size
        self._successes += sign * (traj.outcome == "success")
        version = traj.policy_version
        self._versions[version] += sign
        if not self._versions[version]:
            del self._versions[version]

    def _evict(self) -> None:
        while len(self._slot) > self.capacity or self._bytes > self.max_bytes:
            self._pop_oldest()
            self.evicted += 1

    def _pop_oldest(self) -> None:
        traj = self._order[self._head]
        self._order[self._head] = None
        self._head += 1
        del self._slot[traj.id]
        self._account(traj, -1)
        self._evicting.append(traj)
        if self._head * 2 >= len(self._order):  # compact: amortised O(1) per eviction
            del self._order[: self._head]
            self._offset += self._head
            self._head = 0

    def _rebuild(self, trajectories: list[Trajectory]) -> None:
        self._order = trajectories
        self._head = 0
        self._offset = 0
        self._slot = {t.id: i for i, t in enumerate(trajectories)}

    def drop_older_than(self, min_version: int) -> int:
        """Remove trajectories collected by a policy older than `min_version`; counted as stale. Offline
        data (version -1) is never stale: no policy of this run collected it."""
        if not any(0 <= v < min_version for v in self._versions):
            return 0
        keep, stale = [], []
        for traj in self.all():
            if 0 <= traj.policy_version < min_version:
                self._account(traj, -1)
                stale.append(traj.id)
            else:
                keep.append(traj)
        self._rebuild(keep)
        self.history.dropped(stale)
        self.dropped_stale += len(stale)
        return len(stale)

    def sample(self, n: int, min_version: int | None = None) -> list[Trajectory]:
        """Up to `n` distinct trajectories drawn uniformly (all of them when fewer are stored)."""
        if min_version is not None:
            self.drop_older_than(min_version)
        size = len(self._slot)
        if n >= size:
            return self.all()
        # the same draw as sampling the list of stored trajectories, without building that list
        return [self._order[self._head + i] for i in self._rng.sample(range(size), n)]

    def summaries(self, min_version: int | None = None) -> Summaries:
        """Every trajectory of the history, in memory or spilled, as columns (see TrajectoryHistory)."""
        return self.history.summaries(min_version)

    def fetch(self, ids: list[str]) -> list[Trajectory]:
        """Whole trajectories of the history by id, from memory or the run folder."""
        in_memory = {i: self._order[self._slot[i] - self._offset] for i in ids if i in self._slot}
        return self.history.fetch(ids, in_memory)

    def all(self) -> list[Trajectory]:
        return self._order[self._head :]

    def __len__(self) -> int:
        return len(self._slot)

    def stats(self) -> dict:
        return {
            "size": len(self._slot),
            "bytes": self._bytes,
            "added": self.added,
            "evicted": self.evicted,
            "dropped_stale": self.dropped_stale,
            "rejected_untrainable": self.rejected_untrainable,
            "successes": self._successes,
            "history": len(self.history),
            "spilled": self.history.spilled,
        }

    # -- checkpoints: contents go to a Parquet shard, counters alongside

    def save(self, folder: str) -> dict:
        folder = Path(folder)
        storage.write_shard(folder / "replay.parquet", self.all())
        return {
            "counters": self.stats(),
            "rng": _rng_state_to_json(self._rng.getstate()),
            "history": self.history.save(folder / "replay_history.parquet"),
        }

    def load(self, folder: str, state: dict) -> None:
        if "history" in state:  # checkpoints from before the history kept only what was in memory
            self.history.load(Path(folder) / "replay_history.parquet", state["history"])
        self._rebuild([])
        self._sizes.clear()
        self._versions.clear()
        self._successes = 0
        self._bytes = 0
        for traj in storage.read_shard(Path(folder) / "replay.parquet"):
            self._store(traj, traj.nbytes())
        counters = state["counters"]
        self.added = counters["added"]
        self.evicted = counters["evicted"]
        self.dropped_stale = counters["dropped_stale"]
        self.rejected_untrainable = counters["rejected_untrainable"]
        self._rng.setstate(_rng_state_from_json(state["rng"]))


def _rng_state_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _rng_state_from_json(state: list) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
