"""Connecting the driver to Ray: a cluster's address, or a one-machine Ray started here."""

from __future__ import annotations

import os

import ray

from rlsys.config import Config

# The raylet then kills every process a crashed worker left behind (browsers, emulators):
# without it, a runner killed with SIGKILL orphans its Chromium.
SUBREAPER = "RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper"


def init_ray(cfg: Config) -> tuple[bool, str | None]:
    """Connect to (or start) Ray. Returns whether this call started the connection (False when
    the process was already connected), and the dashboard address when there is one."""
    if ray.is_initialized():
        return False, None
    os.environ.setdefault(SUBREAPER, "true")
    if cfg.ray.address:
        ctx = ray.init(address=cfg.ray.address, log_to_driver=False)
    else:
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
