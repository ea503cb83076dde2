"""The run's two store actors, the replay buffer and the weight store, started beside the driver."""

from __future__ import annotations

from pathlib import Path

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rlsys.actors.replay import ReplayBufferActor
from rlsys.actors.weight_store import WeightStore
from rlsys.config import Config


def start_stores(cfg: Config, run_dir: Path) -> tuple:
    """The replay buffer and the weight store, beside the driver: losing a worker node loses neither, and the
    buffer spills what it evicts to the run folder (`replay/`)."""
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    weight_store = ray.remote(WeightStore).options(name="weight-store", num_cpus=0, scheduling_strategy=here).remote()
    buffer = ReplayBufferActor.options(name="replay-buffer", num_cpus=0, scheduling_strategy=here).remote(
        cfg.replay.capacity, cfg.replay.max_bytes, cfg.run.seed, str(run_dir / "replay")
    )
    return buffer, weight_store


def dead_store(stores: dict) -> str | None:
    """The name of the first store actor in `stores` (name -> handle) that is dead or does not answer."""
    for name, actor in stores.items():
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=10)
        except (RayActorError, GetTimeoutError):
            return name
    return None
