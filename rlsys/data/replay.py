"""Replay buffer of whole trajectories, bounded by count and by bytes, FIFO eviction, over the run's history.

Run as a Ray actor (actors.replay.ReplayBufferActor), it holds the newest trajectories in its own
memory: the data it was sent is deserialised into the actor, so nothing it stores depends
on the runner that produced it staying alive (docs/architecture.md#data-flow). `sample` draws from
them (the step critic's transitions, filtered BC's and PAE's data). What it evicts is spilled to the
run folder and stays in the history (rlsys.data.history), which DigiRL's instruction critic and
curriculum rank whole: `summaries` and `fetch`.

Rollout groups (`run.group_size` > 1, rlsys.core.types.rollout_group) enter and leave whole: the driver adds a
group in one call once all its members have arrived, eviction and staleness remove every stored member of a group
together, and `sample(..., whole_groups=True)` returns the newest groups whole. So a group's stored members always
sit next to each other, in arrival order.

A checkpoint of the buffer (`save`) references the trajectories the run's shards already hold instead of
copying them (`run.checkpoint_replay: reference`): `replay.parquet` then lists the stored trajectory ids in
order with the shard each one is read back from, and only those no shard holds yet are copied, to
`replay_unsharded.parquet`. With `copy` (and in checkpoints written before references existed)
`replay.parquet` holds the whole trajectories.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rlsys.core.types import Trajectory, rollout_group
from rlsys.data import checkpoint
from rlsys.data import shards as storage
from rlsys.data.history import Summaries, TrajectoryHistory

UNSHARDED = "replay_unsharded.parquet"


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
        self._shard_index: storage.ShardIndex | None = None
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
        self._evict()  # after the whole call, so that a group it brings never leaves in part
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
            group = rollout_group(self._pop_oldest().task)
            while group is not None and self._slot and rollout_group(self._order[self._head].task) == group:
                self._pop_oldest()  # the rest of its group, which arrived with it

    def _pop_oldest(self) -> Trajectory:
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
        self.evicted += 1
        return traj

    def _rebuild(self, trajectories: list[Trajectory]) -> None:
        self._order = trajectories
        self._head = 0
        self._offset = 0
        self._slot = {t.id: i for i, t in enumerate(trajectories)}

    def drop_older_than(self, min_version: int) -> int:
        """Remove trajectories collected by a policy older than `min_version`, with the rest of their rollout
        groups; counted as stale. Offline data (version -1) is never stale: no policy of this run collected it."""
        if not any(0 <= v < min_version for v in self._versions):
            return 0
        stale_groups = {rollout_group(t.task) for t in self.all() if 0 <= t.policy_version < min_version}
        stale_groups.discard(None)
        keep, stale = [], []
        for traj in self.all():
            if 0 <= traj.policy_version < min_version or rollout_group(traj.task) in stale_groups:
                self._account(traj, -1)
                stale.append(traj.id)
            else:
                keep.append(traj)
        self._rebuild(keep)
        self.history.dropped(stale)
        self.dropped_stale += len(stale)
        return len(stale)

    def sample(self, n: int, min_version: int | None = None, whole_groups: bool = False) -> list[Trajectory]:
        """Up to `n` distinct trajectories drawn uniformly (all of them when fewer are stored). `whole_groups`: the
        newest rollout groups instead, every stored member of each, newest group first until the next would pass
        `n` trajectories (a trajectory of no group is a group of its own); returned in arrival order."""
        if min_version is not None:
            self.drop_older_than(min_version)
        if whole_groups:
            return self._newest_groups(n)
        size = len(self._slot)
        if n >= size:
            return self.all()
        # the same draw as sampling the list of stored trajectories, without building that list
        return [self._order[self._head + i] for i in self._rng.sample(range(size), n)]

    def _newest_groups(self, n: int) -> list[Trajectory]:
        groups: list[list[Trajectory]] = []  # newest first
        taken, end = 0, len(self._order)  # self._order[start:end]: one group's stored members
        while end > self._head:
            start = end - 1
            group = rollout_group(self._order[start].task)
            while group is not None and start > self._head and rollout_group(self._order[start - 1].task) == group:
                start -= 1
            if taken + end - start > n:
                break
            groups.append(self._order[start:end])
            taken, end = taken + end - start, start
        return [traj for members in reversed(groups) for traj in members]

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

    # -- checkpoints: contents referenced in the run's shards (or copied to a Parquet shard), counters alongside

    def save(self, folder: str, sources: list[str] | None = None, root: str | None = None) -> dict:
        """Write the buffer to the checkpoint `folder` (inside `root`/checkpoints/). `sources`: the shard files or
        folders that hold its trajectories (the run's `trajectories/`, the offline data), referenced instead of
        copied; None copies them all. The state returned lists the shards referenced, with their sizes."""
        folder = Path(folder)
        state = {
            "counters": self.stats(),
            "rng": _rng_state_to_json(self._rng.getstate()),
            "history": self.history.save(folder / "replay_history.parquet"),
        }
        if sources is None:
            storage.write_shard(folder / "replay.parquet", self.all())
            return state
        return state | self._save_references(folder, sources, Path(root))

    def _save_references(self, folder: Path, sources: list[str], root: Path) -> dict:
        if self._shard_index is None or self._shard_index.sources != [Path(s) for s in sources]:
            self._shard_index = storage.ShardIndex(sources, str(root))
        stored = self.all()
        ids = [t.id for t in stored]
        where = self._shard_index.locate(ids)
        pq.write_table(
            pa.table({"trajectory_id": ids, "shard": [where.get(i) for i in ids]}, schema=REFERENCES),
            folder / "replay.parquet",
        )
        unsharded = [t for t in stored if t.id not in where]
        if unsharded:  # arrived after the iteration's shard was written (async mode)
            storage.write_shard(folder / UNSHARDED, unsharded)
        names = sorted(set(where.values()))
        sizes = {n: (root / n).stat().st_size for n in names}  # n is absolute, or relative to root
        return {"contents": "reference", "shards": sizes}

    def load(self, folder: str, state: dict) -> None:
        """Restore what `save` wrote to `folder`; referenced shards are read from the run folder that holds the
        checkpoint (`folder`/../..) or where their absolute names point."""
        if "history" in state:  # checkpoints from before the history kept only what was in memory
            self.history.load(Path(folder) / "replay_history.parquet", state["history"])
        self._rebuild([])
        self._sizes.clear()
        self._versions.clear()
        self._successes = 0
        self._bytes = 0
        if state.get("contents") == "reference":
            trajectories = read_referenced(Path(folder))
        else:
            trajectories = storage.read_shard(Path(folder) / "replay.parquet")
        for traj in trajectories:
            self._store(traj, traj.nbytes())
        counters = state["counters"]
        self.added = counters["added"]
        self.evicted = counters["evicted"]
        self.dropped_stale = counters["dropped_stale"]
        self.rejected_untrainable = counters["rejected_untrainable"]
        self._rng.setstate(_rng_state_from_json(state["rng"]))


REFERENCES = pa.schema([("trajectory_id", pa.string()), ("shard", pa.string())])  # shard null: in UNSHARDED


def read_referenced(folder: Path) -> list[Trajectory]:
    """The trajectories a checkpoint's `replay.parquet` lists, in its order, each shard read once."""
    listed = pq.read_table(folder / "replay.parquet").to_pylist()
    by_shard: dict[str | None, set[str]] = {}
    for row in listed:
        by_shard.setdefault(row["shard"], set()).add(row["trajectory_id"])
    found: dict[str, Trajectory] = {}
    for name, wanted in by_shard.items():
        path = folder / UNSHARDED if name is None else checkpoint.referenced_path(folder, name)
        table = storage.read_table(path, storage.STORED_SINCE_THE_START)
        mask = pc.is_in(table["trajectory_id"], value_set=pa.array(sorted(wanted)))
        found.update((t.id, t) for t in storage.from_table(table.filter(mask)))
        missing = wanted - found.keys()
        if missing:
            raise storage.StorageError(
                f"{path}: trajectory {sorted(missing)[0]} is not there, yet {folder / 'replay.parquet'} refers to it"
            )
    return [found[row["trajectory_id"]] for row in listed]


def _rng_state_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _rng_state_from_json(state: list) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
