"""Connecting the driver to Ray: a cluster's address, or a one-machine Ray started here.

Which one, in order: `ray.address` in the config (`local` starts one here even inside a cluster);
`RAY_ADDRESS`, which `ray job submit` sets for every job's driver (and users set by hand); a driver
started by Ray's job supervisor without it; otherwise a Ray instance of its own, on 127.0.0.1.

A cluster named by address is checked before Ray starts (`check_cluster`): Ray itself retries an address
that does not answer for minutes, and meets a missing token with a long traceback.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys

from rlsys.config import Config, ConfigError

# The raylet then kills every process a crashed worker left behind (browsers, emulators):
# without it, a runner killed with SIGKILL orphans its Chromium.
SUBREAPER = "RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper"
# Ray's switch for one-machine Ray (the default on macOS and Windows): the node's IP is loopback.
ONE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
ADDRESS_VARIABLE = "RAY_ADDRESS"
# What Ray's job supervisor gives a job's driver (with RAY_ADDRESS, in Ray 2.x).
JOB_DRIVER_VARIABLE = "RAY_JOB_CONFIG_JSON_ENV_VAR"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
RAY_DASHBOARD_PORT = 8265  # where Ray's dashboard starts looking for a free port
CONNECT_TIMEOUT_S = 3.0
GCS_ANSWER_TIMEOUT_S = 5.0
AUTH_REFUSED, NO_ANSWER = 3, 4  # the GCS probe's exit codes

# Run in a child process: Ray's client logs every refused attempt and retries a silent port for ~40 s.
# Ray has no public call that only asks a GCS whether this process may join; GcsClient is what `ray status` uses.
_GCS_PROBE = f"""
import os, sys, threading
from ray._raylet import GcsClient
from ray.exceptions import AuthenticationError
code = [{NO_ANSWER}]
def probe():
    try:
        GcsClient(address=sys.argv[1])
        code[0] = 0
    except AuthenticationError:
        code[0] = {AUTH_REFUSED}
    except Exception:
        pass
thread = threading.Thread(target=probe, daemon=True)
thread.start()
thread.join({GCS_ANSWER_TIMEOUT_S})
os._exit(code[0])
"""


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


def named_cluster(cfg: Config) -> tuple[str, str] | None:
    """(where it is named, the address) of the cluster the driver joins, when an address names it; None when
    Ray starts here, or finds the cluster itself (a job's driver without RAY_ADDRESS, `auto` alone)."""
    address = cluster_address(cfg)
    if address is None:
        return None
    if address != "auto":
        return "ray.address", address
    named = os.environ.get(ADDRESS_VARIABLE, "")
    return (ADDRESS_VARIABLE, named) if named not in ("", "auto", "local") else None


def host_and_port(source: str, address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise ConfigError(f"{source} {address}: not HOST:PORT, the address of the head's GCS (e.g. 127.0.0.1:6379)")
    return host, int(port)


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def check_cluster(cfg: Config) -> None:
    """The cluster the driver is told to join answers at its address and lets this process in; each problem is
    a ConfigError naming the fix, within seconds. Nothing is checked (and Ray not imported) otherwise."""
    named = named_cluster(cfg)
    if named is None:
        return
    source, address = named
    if address.startswith(("http://", "https://")):
        raise ConfigError(
            f"{source} {address} is a dashboard's address, which `ray job submit --address` takes; a driver joins "
            "the head's GCS, the port given to `ray start --head --port` (e.g. 127.0.0.1:6379)"
        )
    if "://" in address:  # ray://, Ray Client: Ray connects it
        return
    host, port = host_and_port(source, address)
    if not reachable(host, port):
        raise ConfigError(
            f"{source} {address}: nothing answers there; start the cluster's head first (`ray start --head "
            f"--port {port}`, see clusters/README.md), or unset {source} to start a Ray of its own here"
        )
    probe = subprocess.run([sys.executable, "-c", _GCS_PROBE, address], capture_output=True, timeout=120)
    if probe.returncode == AUTH_REFUSED:
        raise ConfigError(
            f"{source} {address}: the cluster refused this process's Ray auth token (none, or another one): set "
            "RAY_AUTH_MODE=token, with the head's token in ~/.ray/auth_token (or RAY_AUTH_TOKEN_PATH, RAY_AUTH_TOKEN)"
        )
    if probe.returncode == NO_ANSWER:  # anything else: the probe itself broke (another Ray?), so Ray has its say
        raise ConfigError(
            f"{source} {address}: something listens there, but no Ray GCS answered within "
            f"{GCS_ANSWER_TIMEOUT_S:g}s; give the port the head was started with (`ray start --head --port`), "
            "not the dashboard's"
        )


def listens_on_loopback_only(host: str, port: int) -> bool:
    """Whether a head named by a loopback address listens on 127.0.0.1 only (started with the one-machine switch):
    Ray turns a loopback address into the machine's outward one, where such a head never answers."""
    if host not in LOOPBACK_HOSTS:
        return False
    import ray

    return not reachable(ray.util.get_node_ip_address(), port) and reachable("127.0.0.1", port)


def dashboard_port(cfg: Config) -> int | None:
    """`ray.dashboard_port` when it is free; else None, for which Ray's dashboard takes the first free port from
    8265 up (Ray refuses to start at all when a port it is given is taken: a second run on the machine would
    fail). Ray's default, 8265, is None too: two runs starting at once then never race for it."""
    port = cfg.ray.dashboard_port
    with socket.socket(socket.AF_INET6 if ":" in cfg.ray.dashboard_host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Ray's own check does
        try:
            s.bind((cfg.ray.dashboard_host, port))
            return None if port == RAY_DASHBOARD_PORT else port
        except OSError as e:
            if e.errno != errno.EADDRINUSE:  # not a port question (an unusable host): Ray says what is wrong
                return port
            print(
                f"ray.dashboard_port {cfg.ray.dashboard_port} is taken on {cfg.ray.dashboard_host}; "
                "the dashboard takes another free port",
                file=sys.stderr,
                flush=True,
            )
            return None


def init_ray(cfg: Config) -> tuple[bool, str | None]:
    """Connect to (or start) Ray. Returns whether this call started the connection (False when
    the process was already connected), and the dashboard address when there is one.

    Actors' own output stays in Ray's session logs (`log_to_driver=False`: browsers and model loading
    are noisy), whose folder is printed; what fails in a runner or a learner reaches the console through
    the runner pool and the learner group. A head named by a loopback address that listens on 127.0.0.1
    only is joined on loopback (see `listens_on_loopback_only`)."""
    import ray

    if ray.is_initialized():
        return False, None
    os.environ.setdefault(SUBREAPER, "true")
    address = cluster_address(cfg)
    if address is not None:
        named = named_cluster(cfg)
        if named and "://" not in named[1] and listens_on_loopback_only(*host_and_port(*named)):
            bind_to_loopback()  # this driver's node is then 127.0.0.1, as the head's is
        ctx = ray.init(address=address, log_to_driver=False)
    else:
        bind_to_loopback()
        ctx = ray.init(
            address="local",
            num_cpus=cfg.ray.num_cpus,
            resources={cfg.runners.resource: cfg.runners.num},
            include_dashboard=cfg.ray.dashboard,
            dashboard_host=cfg.ray.dashboard_host,
            dashboard_port=dashboard_port(cfg) if cfg.ray.dashboard else None,
            log_to_driver=False,
        )
    session = ctx.address_info.get("session_dir")
    if session:
        print(f"actors' output: {session}/logs/worker-*.out and .err (on each node)", flush=True)
    return True, ctx.dashboard_url or None
