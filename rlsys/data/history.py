"""Every trajectory of a run, for what ranks whole trajectories: DigiRL's instruction critic and curriculum,
and filtered BC's reward filter (docs/architecture.md#replay).

The replay buffer keeps the newest trajectories whole in memory, bounded by count and bytes. What it
evicts is written here, to spill shards in the run folder, and stays findable by id; in memory each
trajectory leaves only a summary row (id, task text, reward, policy version, where it lives), about
200 bytes. Spill shards are never rewritten: a checkpoint records the rows, and a resumed run reads
the shards its rows name (later ones, written after the checkpoint, are overwritten as it goes on).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rlsys.core.types import Trajectory, task_group
from rlsys.data import shards as storage

IN_MEMORY = -1  # `where` of a trajectory the buffer holds whole
GONE = -2  # dropped (stale, or evicted with nowhere to spill): no longer part of the history


@dataclass
class Summaries:
    """The history as columns: trajectory `ids`, the index of each one's task text in `instructions` (and of
    its task group, a MiniWoB++ task or website, in `groups`), its reward and the oldest policy version that
    acted in it (-1 for offline data)."""

    ids: list[str]
    instructions: list[str]
    groups: list[str]
    instruction_index: np.ndarray
    rewards: np.ndarray
    versions: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows) -> Summaries:
        rows = np.asarray(rows, dtype=np.int64)
        return Summaries(
            ids=[self.ids[r] for r in rows],
            instructions=self.instructions,
            groups=self.groups,
            instruction_index=self.instruction_index[rows],
            rewards=self.rewards[rows],
            versions=self.versions[rows],
        )

    def successes(self) -> list[tuple[str, int]]:
        """(task text, 1 if the trajectory earned a reward) per row: what the instruction critic learns."""
        return [(self.instructions[t], int(r > 0)) for t, r in zip(self.instruction_index, self.rewards)]

    @classmethod
    def of(cls, trajectories: list[Trajectory]) -> Summaries:
        """The same columns for a list of trajectories held in hand."""
        history = TrajectoryHistory(None)
        for traj in trajectories:
            history.record(traj)
        return history.summaries()


class TrajectoryHistory:
    def __init__(self, folder: str | Path | None):
        """`folder`: where evicted trajectories are spilled; None keeps the history to what is in memory."""
        self.folder = Path(folder) if folder is not None else None
        self._ids: list[str] = []
        self._row: dict[str, int] = {}
        self._instructions: list[str] = []
        self._groups: list[str] = []
        self._instruction_row: dict[str, int] = {}
        self._task = array("i")
        self._reward = array("f")
        self._version = array("i")
        self._where = array("i")  # IN_MEMORY, GONE, or the number of the spill shard
        self._next_spill = 0
        self._gone = 0
        self.spilled = 0

    def __len__(self) -> int:
        return len(self._ids) - self._gone

    def record(self, traj: Trajectory) -> None:
        """A trajectory the buffer now holds (a known id is replaced in place)."""
        task = self._instruction_row.setdefault(traj.task.instruction, len(self._instructions))
        if task == len(self._instructions):
            self._instructions.append(traj.task.instruction)
            self._groups.append(task_group(traj.task))
        row = self._row.get(traj.id)
        if row is None:
            self._row[traj.id] = len(self._ids)
            self._ids.append(traj.id)
            for column, value in zip(self._columns(), (task, traj.reward, traj.policy_version, IN_MEMORY)):
                column.append(value)
        else:
            self._gone -= self._where[row] == GONE
            self._task[row], self._reward[row] = task, traj.reward
            self._version[row], self._where[row] = traj.policy_version, IN_MEMORY

    def evicted(self, trajectories: list[Trajectory]) -> None:
        """Trajectories leaving the buffer's memory: spilled to one shard, or gone without a folder."""
        if not trajectories:
            return
        where = GONE
        if self.folder is not None:
            where = self._next_spill
            storage.write_shard(self._spill_path(where), trajectories)
            self._next_spill += 1
            self.spilled += len(trajectories)
        for traj in trajectories:
            self._where[self._row[traj.id]] = where
        self._gone += len(trajectories) * (where == GONE)

    def dropped(self, ids: list[str]) -> None:
        for i in ids:
            self._where[self._row[i]] = GONE
        self._gone += len(ids)

    def summaries(self, min_version: int | None = None) -> Summaries:
        """The rows still in the history; `min_version` leaves out trajectories of older policies, never
        offline data (version -1: it was not collected by a policy of this run)."""
        where = np.frombuffer(self._where, dtype=np.int32)
        versions = np.frombuffer(self._version, dtype=np.int32)
        keep = where != GONE
        if min_version is not None:
            keep &= (versions >= min_version) | (versions < 0)
        rows = np.flatnonzero(keep)
        return Summaries(
            ids=[self._ids[r] for r in rows],
            instructions=list(self._instructions),
            groups=list(self._groups),
            instruction_index=np.frombuffer(self._task, dtype=np.int32)[rows].copy(),
            rewards=np.frombuffer(self._reward, dtype=np.float32)[rows].copy(),
            versions=versions[rows].copy(),
        )

    def fetch(self, ids: list[str], in_memory: dict[str, Trajectory]) -> list[Trajectory]:
        """The trajectories `ids` names, in that order, from memory or their spill shards (each shard read
        once). An id that is not in the history raises KeyError."""
        found: dict[str, Trajectory] = {}
        by_shard: dict[int, set[str]] = {}
        for i in ids:
            where = self._where[self._row[i]]
            if where == IN_MEMORY:
                found[i] = in_memory[i]
            elif where == GONE:
                raise KeyError(f"trajectory {i} is no longer in the history")
            else:
                by_shard.setdefault(where, set()).add(i)
        for shard, wanted in by_shard.items():
            table = storage.read_table(self._spill_path(shard), storage.STORED_SINCE_THE_START)
            mask = pa.compute.is_in(table["trajectory_id"], value_set=pa.array(sorted(wanted)))
            for traj in storage.from_table(table.filter(mask)):
                found[traj.id] = traj
        return [found[i] for i in ids]

    def _spill_path(self, shard: int) -> Path:
        return self.folder / f"spill-{shard:06d}.parquet"

    def _columns(self) -> tuple[array, ...]:
        return self._task, self._reward, self._version, self._where

    # -- checkpoints: the rows go to a Parquet file beside the buffer's; spill shards stay where they are

    def save(self, path: Path) -> dict:
        columns = {"task": (self._task, np.int32), "reward": (self._reward, np.float32)}
        columns |= {"version": (self._version, np.int32), "where": (self._where, np.int32)}
        table = pa.table({"id": self._ids} | {k: np.array(c, dtype=t) for k, (c, t) in columns.items()})
        pq.write_table(table, path)
        return {
            "instructions": list(self._instructions),
            "groups": list(self._groups),
            "next_spill": self._next_spill,
            "spilled": self.spilled,
        }

    def load(self, path: Path, state: dict) -> None:
        """Rows as the checkpoint left them; the buffer then re-records what it holds in memory."""
        table = pq.read_table(path)
        self._ids = table["id"].to_pylist()
        self._row = {i: r for r, i in enumerate(self._ids)}
        self._instructions = list(state["instructions"])
        self._groups = list(state["groups"])
        self._instruction_row = {t: r for r, t in enumerate(self._instructions)}
        self._task = array("i", table["task"].to_numpy())
        self._reward = array("f", table["reward"].to_numpy())
        self._version = array("i", table["version"].to_numpy())
        self._where = array("i", table["where"].to_numpy())
        self._gone = int((table["where"].to_numpy() == GONE).sum())
        self._next_spill = state["next_spill"]
        self.spilled = state["spilled"]
