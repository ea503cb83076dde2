"""One EmulatorPool actor per node with `android` resources; each Android runner leases its emulator
from the pool on its own node, and hands it back when its env closes (a broken one is restarted)."""

from __future__ import annotations

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rlsys.config import Config
from rlsys.envs.android.emulator import EmulatorPool, Lease

PREFIX = "emulator-pool-"


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


class NodePool:
    """The pool on the calling actor's node, as make_env leases from it (`emulators=`). Each call waits at most
    boot_timeout_s + 60 s: a lease may have to boot an emulator, or restart a broken one, first."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.timeout_s = cfg.env.android.boot_timeout_s + 60
        self._pool = None

    @property
    def pool(self):
        if self._pool is None:  # found on first use, so a runner of another env kind never looks for one
            self._pool = this_node_pool(self.cfg)
        return self._pool

    def acquire(self) -> Lease:
        return ray.get(self.pool.acquire.remote(), timeout=self.timeout_s)

    def release(self, serial: str, broken: bool) -> None:
        # waited for: a broken emulator is restarted before this runner asks for one again
        ray.get(self.pool.release.remote(serial, broken), timeout=self.timeout_s)


def shutdown_node_pools(timeout_s: float = 60.0) -> None:
    """Stop every emulator the pools started, then the pools."""
    pools = [ray.get_actor(n) for n in ray.util.list_named_actors() if n.startswith(PREFIX)]
    ray.wait([p.shutdown.remote() for p in pools], num_returns=len(pools), timeout=timeout_s)
    for pool in pools:
        ray.kill(pool, no_restart=True)
