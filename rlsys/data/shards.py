"""Trajectories on disk: append-only Parquet shards, one row per step, screenshots as PNG bytes.

Any Parquet reader opens them (`pandas.read_parquet(folder)`, DuckDB, `ray.data.read_parquet(folder)`).
What people group by is a plain column: `task_id`, `task_group` (the MiniWoB++ task or the website),
`split` (train, eval or scored), `iteration` (the training iteration that collected it; null where
none did, e.g. imported data), `policy_version`, `outcome` and `is_final` (the row holds the final
observation, what the last action led to, not a step). The rest of the task, the observation extras
and the step info are JSON strings. Shards written before those columns existed read as before.
A shard is written to a temporary name and renamed, so a crash never leaves half of one. Every page
carries Parquet's CRC32 checksum and reading verifies it, so bytes damaged on disk are an error naming
the shard, never data read back wrong (shards written before checksums existed read unverified).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import safetensors.numpy

from rlsys.core.types import Observation, Step, Task, Trajectory, task_group

log = logging.getLogger(__name__)

SCHEMA = pa.schema(
    [
        ("trajectory_id", pa.string()),
        ("task_id", pa.string()),
        ("task_group", pa.string()),
        ("split", pa.string()),
        ("iteration", pa.int32()),
        ("task", pa.string()),  # JSON of the Task
        ("outcome", pa.string()),
        ("env_id", pa.string()),
        ("runner_id", pa.string()),
        ("trajectory_error", pa.string()),
        # -1: a trajectory that ended before its first step; len(steps) with a null action_text: the final
        # observation (what the last action led to)
        ("step_index", pa.int32()),
        ("is_final", pa.bool_()),
        ("screenshot_png", pa.binary()),
        ("ui_text", pa.string()),
        ("location", pa.string()),
        ("observation_task", pa.string()),
        ("observation_extras", pa.string()),
        ("observation_features", pa.binary()),  # safetensors bytes of Observation.features
        ("action_text", pa.string()),
        ("action", pa.string()),
        ("reward", pa.float32()),
        ("done", pa.bool_()),
        ("policy_version", pa.int64()),
        ("logprob", pa.float64()),
        ("timings", pa.string()),
        ("step_error", pa.string()),
        ("step_info", pa.string()),  # JSON: what the env reported besides the observation
        ("token_ids", pa.list_(pa.int32())),  # the sampled ids, where the policy reported them
    ]
)


class StorageError(RuntimeError):
    pass


def encode_features(features: dict[str, np.ndarray]) -> bytes | None:
    return safetensors.numpy.save({k: np.ascontiguousarray(v) for k, v in features.items()}) if features else None


def decode_features(data: bytes | None) -> dict[str, np.ndarray]:
    return dict(safetensors.numpy.load(data)) if data else {}


GROUPING_COLUMNS = ("task_id", "task_group", "split", "iteration", "is_final")
READ_IF_PRESENT = ("token_ids",)  # added later: shards written before it lack it
# what reading needs: every shard has these, also those written before the grouping columns existed
STORED_SINCE_THE_START = [n for n in SCHEMA.names if n not in GROUPING_COLUMNS + READ_IF_PRESENT]


def to_table(trajectories: Iterable[Trajectory], split: str = "train", iteration: int | None = None) -> pa.Table:
    rows = {name: [] for name in SCHEMA.names}

    def add(traj: Trajectory, index: int, step: Step | None, obs: Observation | None = None) -> None:
        obs = step.observation if step else obs
        values = {
            "trajectory_id": traj.id,
            "task_id": traj.task.id,
            "task_group": task_group(traj.task),
            "split": split,
            "iteration": iteration,
            "is_final": step is None and obs is not None,
            "task": json.dumps(traj.task.__dict__),
            "outcome": traj.outcome,
            "env_id": traj.env_id,
            "runner_id": traj.runner_id,
            "trajectory_error": traj.error,
            "step_index": index,
            "screenshot_png": obs.screenshot_png if obs else None,
            "ui_text": obs.ui_text if obs else None,
            "location": obs.location if obs else None,
            "observation_task": obs.task if obs else None,
            "observation_extras": json.dumps(obs.extras) if obs else None,
            "observation_features": encode_features(obs.features) if obs else None,
            "action_text": step.action_text if step else None,
            "action": json.dumps(step.action) if step else None,
            "reward": step.reward if step else None,
            "done": step.done if step else None,
            "policy_version": step.policy_version if step else None,
            "logprob": step.logprob if step else None,
            "timings": json.dumps(step.timings) if step else None,
            "step_error": step.error if step else None,
            "step_info": json.dumps(step.info) if step else None,
            "token_ids": step.token_ids if step else None,
        }
        for k, v in values.items():
            rows[k].append(v)

    for traj in trajectories:
        if not traj.steps:
            add(traj, -1, None)
        for i, step in enumerate(traj.steps):
            add(traj, i, step)
        if traj.final_observation is not None:
            add(traj, len(traj.steps), None, traj.final_observation)
    return pa.table(rows, schema=SCHEMA)


def from_table(table: pa.Table) -> list[Trajectory]:
    out: dict[str, Trajectory] = {}
    for r in table.to_pylist():
        traj = out.get(r["trajectory_id"])
        if traj is None:
            traj = out[r["trajectory_id"]] = Trajectory(
                task=Task(**json.loads(r["task"])),
                steps=[],
                outcome=r["outcome"],
                env_id=r["env_id"],
                runner_id=r["runner_id"],
                error=r["trajectory_error"],
                id=r["trajectory_id"],
            )
        if r["step_index"] < 0:
            continue
        obs = Observation(
            screenshot_png=r["screenshot_png"],
            ui_text=r["ui_text"],
            location=r["location"],
            task=r["observation_task"],
            extras=json.loads(r["observation_extras"]),
            features=decode_features(r.get("observation_features")),
        )
        if r["action_text"] is None:
            traj.final_observation = obs
            continue
        traj.steps.append(
            Step(
                observation=obs,
                action_text=r["action_text"],
                action=json.loads(r["action"]),
                reward=r["reward"],
                done=r["done"],
                policy_version=r["policy_version"],
                logprob=r["logprob"],
                timings=json.loads(r["timings"]),
                error=r["step_error"],
                info=json.loads(r["step_info"]),
                token_ids=r.get("token_ids"),
            )
        )
    return list(out.values())


def write_shard(path: Path, trajectories: list[Trajectory], split: str = "train", iteration: int | None = None) -> int:
    """Write trajectories to one Parquet file atomically; returns its size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(to_table(trajectories, split, iteration), tmp, compression="zstd", write_page_checksum=True)
    os.replace(tmp, path)
    return path.stat().st_size


def read_table(path: Path, columns: list[str] | None = None) -> pa.Table:
    """A shard's columns, every page's checksum verified; StorageError naming the file otherwise."""
    try:
        if columns is not None:
            present = pq.read_schema(path).names
            columns = columns + [c for c in READ_IF_PRESENT if c in present and c not in columns]
        return pq.read_table(path, columns=columns, page_checksum_verification=True)
    except (pa.ArrowInvalid, OSError) as e:
        damaged = "CRC" in str(e) or "checksum" in str(e).lower()
        what = "damaged: a page's checksum does not match" if damaged else "not a readable trajectory shard"
        raise StorageError(f"{path}: {what} ({e})") from None


def read_shard(path: Path) -> list[Trajectory]:
    table = read_table(path, STORED_SINCE_THE_START)
    try:
        return from_table(table)
    except (ValueError, safetensors.SafetensorError) as e:  # JSON or feature bytes that do not decode
        raise StorageError(f"{path}: a row does not decode ({e})") from None


class ShardWriter:
    """Appends trajectories to `folder` as numbered shards of one `split`; continues numbering after a
    restart."""

    def __init__(self, folder: str | os.PathLike, split: str = "train"):
        self.folder = Path(folder)
        self.split = split
        self.folder.mkdir(parents=True, exist_ok=True)
        existing = sorted(self.folder.glob("shard-*.parquet"))
        self.next_index = int(existing[-1].stem.split("-")[1]) + 1 if existing else 0
        self.bytes_written = 0
        self.steps_written = 0

    def write(self, trajectories: list[Trajectory], iteration: int | None = None) -> Path | None:
        if not trajectories:
            return None
        path = self.folder / f"shard-{self.next_index:06d}.parquet"
        self.bytes_written += write_shard(path, trajectories, self.split, iteration)
        self.steps_written += sum(len(t.steps) for t in trajectories)
        self.next_index += 1
        return path


def read_trajectories(folder: str | os.PathLike, skip_damaged: bool = False) -> list[Trajectory]:
    """The trajectories of one shard or of a folder's shards. `skip_damaged`: a shard that does not read
    is left out with a warning (where losing one shard is better than failing) instead of raising."""
    folder = Path(folder)
    out: list[Trajectory] = []
    for path in [folder] if folder.is_file() else sorted(folder.glob("shard-*.parquet")):
        try:
            out += read_shard(path)
        except StorageError as e:
            if not skip_damaged:
                raise
            log.warning("skipped a shard: %s", e)
    return out


class ShardIndex:
    """Which shard file of some folders holds each trajectory of interest. A shard is read once, its
    `trajectory_id` column only; shards are append-only, so what it holds never changes. Names are relative
    to `root` for shards inside it (the run folder), absolute otherwise."""

    def __init__(self, sources: list[str], root: str):
        self.sources = [Path(s) for s in sources]
        self.root = Path(root).resolve()
        self._seen: set[Path] = set()
        self._where: dict[str, str] = {}

    def locate(self, ids: list[str]) -> dict[str, str]:
        """The shard of every id in `ids` that a shard holds; ids no shard holds are left out."""
        wanted = set(ids)
        self._where = {i: shard for i, shard in self._where.items() if i in wanted}
        for path in self._shard_files():
            self._seen.add(path)
            try:
                names = read_table(path, ["trajectory_id"])["trajectory_id"].to_pylist()
            except StorageError as e:  # what it held is found nowhere, so a checkpoint keeps its own copy
                log.warning("%s; passed over", e)
                continue
            name = self._name(path)
            self._where.update((i, name) for i in names if i in wanted)
        return {i: self._where[i] for i in ids if i in self._where}

    def _shard_files(self) -> list[Path]:
        found = []
        for source in self.sources:
            files = [source] if source.is_file() else sorted(source.glob("shard-*.parquet"))
            found += [f.resolve() for f in files if f.resolve() not in self._seen]
        return found

    def _name(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else str(path)
