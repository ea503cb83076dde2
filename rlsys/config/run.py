"""How a run is laid out and driven: `run`, `ray`, `runners`, `replay`, `offline` and `metrics`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class RunConfig:
    name: str = "run"
    # default: runs/<name>; or a folder of an object store, s3://bucket/prefix or gs://bucket/prefix, that the run's
    # local folder (scratch_dir) is published to at every checkpoint and at the end (docs/architecture.md#run-folder)
    output_dir: str | None = None
    scratch_dir: str | None = None  # the local folder of a run whose output_dir is remote; default: runs/<name>
    seed: int = 0
    mode: Literal["sync", "async"] = "sync"
    # online: collect and learn; offline: learn from `offline.data` only; off2on: the offline phase, then online
    # iterations with the offline data still in the replay buffer
    training: Literal["online", "offline", "off2on"] = "online"
    iterations: int = 10  # online iterations (the offline phase's length is the learner's)
    # the online phase also ends after the iteration that reaches this many training env steps (equal budgets)
    max_env_steps: int | None = None
    rollout_size: int = 32  # trajectories collected per iteration (sync) or per update (async)
    # GRPO's groups: each training task drawn is played this many times from the same start (a MiniWoB++ task with
    # the same seed), and the learner samples whole groups only; in sync mode rollout_size is a multiple of it
    group_size: int = 1
    # a group some of whose members are not trainable (env_error, unknown): dropped whole, or its other members kept
    broken_groups: Literal["drop", "keep"] = "drop"
    eval_every: int = 5
    eval_episodes: int = 30
    eval_at_start: bool = True
    checkpoint_every: int = 1
    keep_checkpoints: int = 3
    # reference: a checkpoint lists the replay buffer's trajectories by the shard that holds them (they are read
    # back from there on resume); copy: it holds a copy of every one (replay.parquet), as checkpoints once did
    checkpoint_replay: Literal["reference", "copy"] = "reference"
    # trajectories collected by policies more than this many versions behind are dropped (offline data never is)
    max_policy_lag: int | None = None
    episode_timeout_s: float = 120.0


@dataclass
class RayConfig:
    # None: join the cluster in RAY_ADDRESS (a `ray job submit` job), else start one here; "local": always start one
    address: str | None = None
    num_cpus: int | None = None
    dashboard: bool = True
    dashboard_host: str = "127.0.0.1"
    dashboard_port: int = 8265


@dataclass
class RunnersConfig:
    num: int = 2
    num_cpus: float = 0.5
    resource: str = "auto"  # custom Ray resource each runner asks one unit of; auto: android or browser by env.kind
    max_restarts: int = 20  # runner re-creations allowed over a run before it fails
    restart_backoff_s: float = 1.0  # a slot that keeps failing waits 1, 2, 4 ... s before its next runner
    restart_backoff_max_s: float = 60.0
    health_interval_s: float = 30.0  # every runner is asked status() this often...
    health_timeout_s: float = 60.0  # ...and replaced when it does not answer within this (0: no probes)
    start_warning_s: float = 120.0  # a runner still unplaced after this is reported (no free resource)


@dataclass
class ReplayConfig:
    capacity: int = 2000  # trajectories
    max_bytes: int = 1 << 30


@dataclass
class OfflineConfig:
    data: list[str] = field(default_factory=list)  # trajectory shard folders or files (rlsys-data import-…)


@dataclass
class MetricsConfig:
    wandb: bool = False
    wandb_project: str = "rlsys"
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    wandb_api_key: str | None = field(default=None, metadata={"secret": True})  # use ${env:WANDB_API_KEY}
    progress: bool = True
    report: bool = True  # rewrite runs/NAME/report.html after every evaluation and at the end
