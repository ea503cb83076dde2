"""One EmulatorPool actor per node with `android` resources; each Android runner leases its emulator
from the pool on its own node, and hands it back when its env closes (a broken one is restarted)."""

from __future__ import annotations

import logging

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rlsys.config import Config
from rlsys.envs.android.emulator import EmulatorPool, Lease

PREFIX = "emulator-pool-"
log = logging.getLogger(__name__)


@ray.remote(num_cpus=0, max_concurrency=64)  # leases boot concurrently; health checks wait on adb
class NodeEmulators:
    def __init__(self, cfg: Config, log_dir: str | None):
        self.pool = EmulatorPool(cfg.env.android, log_dir)

    def acquire(self) -> Lease:
        return self.pool.acquire()

    def release(self, serial: str, broken: bool) -> None:
        self.pool.release(serial, broken)

    def status(self) -> dict:
        return {"emulators": self.pool.status(), "restarts": self.pool.restarts}

    def shutdown(self) -> None:
        self.pool.shutdown()


def _pool_options(node_id: str):
    return NodeEmulators.options(
        name=PREFIX + node_id,
        get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    )


def start_node_pools(cfg: Config, log_dir: str) -> list:
    """A pool on every live node that offers the runners' resource (created by the driver, so that
    emulator logs go to the run folder and the pools are shut down with the run)."""
    nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get(cfg.runners.resource, 0) > 0]
    return [_pool_options(n["NodeID"]).remote(cfg, log_dir) for n in nodes]


def this_node_pool(cfg: Config):
    """The pool on the calling actor's node (created here for a node that joined after the run began)."""
    return _pool_options(ray.get_runtime_context().get_node_id()).remote(cfg, None)


def lease_env(cfg: Config, env_id: str, timeout_s: float):
    """An AndroidEnv on an emulator leased from this node's pool; closing the env returns the lease."""
    from rlsys.envs.android.env import AndroidEnv

    pool = this_node_pool(cfg)
    lease = ray.get(pool.acquire.remote(), timeout=timeout_s)

    def release(broken: bool) -> None:
        # waited for: a broken emulator is restarted before this runner asks for one again
        try:
            ray.get(pool.release.remote(lease.serial, broken), timeout=timeout_s)
        except Exception as e:  # the next acquire starts or restarts an emulator anyway
            log.warning("%s: releasing %s failed: %s", env_id, lease.serial, e)

    try:
        return AndroidEnv(cfg.env, env_id, lease, release)
    except Exception:
        release(True)
        raise


def shutdown_node_pools(timeout_s: float = 60.0) -> None:
    """Stop every emulator the pools started, then the pools."""
    pools = [ray.get_actor(n) for n in ray.util.list_named_actors() if n.startswith(PREFIX)]
    ray.wait([p.shutdown.remote() for p in pools], num_returns=len(pools), timeout=timeout_s)
    for pool in pools:
        ray.kill(pool, no_restart=True)
