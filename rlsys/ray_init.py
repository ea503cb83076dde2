"""Connecting the driver to Ray: a cluster's address, or a one-machine Ray started here.

Which one, in order: `ray.address` in the config (`local` starts one here even inside a cluster);
`RAY_ADDRESS`, which `ray job submit` sets for every job's driver (and users set by hand); a driver
started by Ray's job supervisor without it; otherwise a Ray instance of its own, on 127.0.0.1.
"""

from __future__ import annotations

import os

import ray

from rlsys.config import Config

# The raylet then kills every process a crashed worker left behind (browsers, emulators):
# without it, a runner killed with SIGKILL orphans its Chromium.
SUBREAPER = "RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper"
# Ray's switch for one-machine Ray (the default on macOS and Windows): the node's IP is loopback.
ONE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
ADDRESS_VARIABLE = "RAY_ADDRESS"
# What Ray's job supervisor gives a job's driver (with RAY_ADDRESS, in Ray 2.x).
JOB_DRIVER_VARIABLE = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def bind_to_loopback() -> None:
    """Make the Ray instance this process starts listen on 127.0.0.1 only.

    Ray binds its GCS, raylet, worker and agent servers to every interface unless the node's IP is
    loopback, and turns `_node_ip_address="127.0.0.1"` into the machine's outward address. Its
    one-machine switch keeps the node IP on loopback; it is read when `ray` is imported, so it is set
    both in the environment (for the processes Ray starts) and in the already imported constant.
    """
    os.environ[ONE_MACHINE] = "0"
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def cluster_address(cfg: Config) -> str | None:
    """The cluster to join (an address, or `auto` for Ray to find it), or None to start Ray here."""
    if cfg.ray.address:
        return None if cfg.ray.address == "local" else cfg.ray.address
    if os.environ.get(ADDRESS_VARIABLE) or os.environ.get(JOB_DRIVER_VARIABLE):
        return "auto"  # Ray reads RAY_ADDRESS itself, and finds the job's cluster without it
    return None


def init_ray(cfg: Config) -> tuple[bool, str | None]:
    """Connect to (or start) Ray. Returns whether this call started the connection (False when
    the process was already connected), and the dashboard address when there is one.

    Actors' own output stays in Ray's session logs (`log_to_driver=False`: browsers and model loading
    are noisy); what fails in a runner or a learner reaches the console through the runner pool and
    the learner group."""
    if ray.is_initialized():
        return False, None
    os.environ.setdefault(SUBREAPER, "true")
    address = cluster_address(cfg)
    if address is not None:
        ctx = ray.init(address=address, log_to_driver=False)
    else:
        bind_to_loopback()
        ctx = ray.init(
            address="local",
            num_cpus=cfg.ray.num_cpus,
            resources={cfg.runners.resource: cfg.runners.num},
            include_dashboard=cfg.ray.dashboard,
            dashboard_host=cfg.ray.dashboard_host,
            dashboard_port=cfg.ray.dashboard_port,
            log_to_driver=False,
        )
    return True, ctx.dashboard_url or None
