"""Replay buffer of whole trajectories, bounded by count and by bytes, FIFO eviction.

Run as a Ray actor (actors.replay.ReplayBufferActor), it holds every trajectory in its own
memory: the data it was sent is deserialised into the actor, so nothing it stores depends
on the runner that produced it staying alive (DESIGN.md §4).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from pathlib import Path

from rlsys import storage
from rlsys.types import Trajectory


class ReplayBuffer:
    def __init__(self, capacity: int, max_bytes: int, seed: int = 0):
        if capacity < 1 or max_bytes < 1:
            raise ValueError("replay capacity and max_bytes must be positive")
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, Trajectory] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self._bytes = 0
        self._rng = random.Random(seed)
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
            self._items[traj.id] = traj
            self._sizes[traj.id] = size
            self._bytes += size
            self.added += 1
            kept += 1
            self._evict()
        return kept

    def _evict(self) -> None:
        while len(self._items) > self.capacity or self._bytes > self.max_bytes:
            self._pop_oldest()
            self.evicted += 1

    def _pop_oldest(self) -> None:
        tid, _ = self._items.popitem(last=False)
        self._bytes -= self._sizes.pop(tid)

    def drop_older_than(self, min_version: int) -> int:
        """Remove trajectories collected by a policy older than `min_version`; counted as stale."""
        stale = [tid for tid, t in self._items.items() if t.policy_version < min_version]
        for tid in stale:
            del self._items[tid]
            self._bytes -= self._sizes.pop(tid)
        self.dropped_stale += len(stale)
        return len(stale)

    def sample(self, n: int, min_version: int | None = None) -> list[Trajectory]:
        """Up to `n` distinct trajectories drawn uniformly (all of them when fewer are stored)."""
        if min_version is not None:
            self.drop_older_than(min_version)
        items = list(self._items.values())
        return items if n >= len(items) else self._rng.sample(items, n)

    def all(self) -> list[Trajectory]:
        return list(self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def stats(self) -> dict:
        items = self._items.values()
        return {
            "size": len(self._items),
            "bytes": self._bytes,
            "added": self.added,
            "evicted": self.evicted,
            "dropped_stale": self.dropped_stale,
            "rejected_untrainable": self.rejected_untrainable,
            "successes": sum(t.outcome == "success" for t in items),
        }

    # -- checkpoints: contents go to a Parquet shard, counters alongside

    def save(self, folder: str) -> dict:
        folder = Path(folder)
        storage.write_shard(folder / "replay.parquet", self.all())
        return {"counters": self.stats(), "rng": _rng_state_to_json(self._rng.getstate())}

    def load(self, folder: str, state: dict) -> None:
        self._items.clear()
        self._sizes.clear()
        self._bytes = 0
        for traj in storage.read_shard(Path(folder) / "replay.parquet"):
            self._items[traj.id] = traj
            self._sizes[traj.id] = traj.nbytes()
            self._bytes += self._sizes[traj.id]
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
