"""A local run's Ray listens on 127.0.0.1 only: GCS, raylet, workers, agents, metrics and dashboard.

Each case starts Ray in a child process, as `rlsys.cli.train` does (`init_ray`), runs an actor so that a
worker's server exists too, and lists the listening TCP sockets of every process in the child's tree.
"""

import functools
import json
import os
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request

import pytest

from rlsys.driver.ray_init import ONE_MACHINE

CHILD = textwrap.dedent(
    """
    import json, os, sys, urllib.error, urllib.request
    import psutil, ray
    from rlsys.config import load_config
    from rlsys.driver.ray_init import init_ray

    cfg = load_config(None, data={"ray": {"dashboard": sys.argv[1] == "dashboard", "num_cpus": 1}})
    _, dashboard = init_ray(cfg)
    status = None
    if dashboard:  # a script that is not the driver posts a job: Ray's token auth must refuse it
        body = json.dumps({"entrypoint": "echo pwned"}).encode()
        request = urllib.request.Request(f"http://{dashboard}/api/jobs/", data=body, method="POST")
        try:
            status = urllib.request.urlopen(request, timeout=30).status
        except urllib.error.HTTPError as e:
            status = e.code

    @ray.remote
    class Echo:
        def ping(self):
            return os.getpid()

    ray.get(Echo.remote().ping.remote(), timeout=120)
    me = psutil.Process()
    pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
    listening = sorted(
        {c.laddr.ip for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN and c.pid in pids}
    )
    print(json.dumps({"listening": listening, "job_post_status": status}))
    ray.shutdown()
    """
)


@functools.cache  # one Ray with a dashboard answers both the listening and the token question
def _start_and_probe(dashboard: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != ONE_MACHINE}  # as a user's shell has it
    out = subprocess.run(
        [sys.executable, "-c", CHILD, "dashboard" if dashboard else "plain"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dashboard", [False, True], ids=["no-dashboard", "dashboard"])
def test_local_ray_listens_on_loopback_only(dashboard):
    addresses = _start_and_probe(dashboard)["listening"]
    assert addresses, "no listening sockets found: the check itself is broken"
    loopback = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
    assert set(addresses) <= loopback, f"Ray listens beyond loopback: {addresses}"


def test_dashboard_refuses_a_job_without_the_token():
    """Ray's token auth stays on for local runs: a job posted without the token is refused."""
    assert _start_and_probe(True)["job_post_status"] == 401  # the same call as the listening case: cached


DASHBOARD_CHILD = textwrap.dedent(
    """
    import json, sys
    import ray
    from rlsys.config import load_config
    from rlsys.driver.ray_init import init_ray

    cfg = load_config(None, data={"ray": {"dashboard": True, "dashboard_port": int(sys.argv[1]), "num_cpus": 1}})
    _, dashboard = init_ray(cfg)
    print("DASHBOARD " + json.dumps(dashboard))
    sys.stdout.flush()
    input()  # the dashboard stays up until the test has looked at it
    ray.shutdown()
    """
)


@pytest.mark.parametrize("configured", [8265, None], ids=["default", "another"])
def test_a_run_starts_while_another_process_holds_the_dashboard_port(configured):
    """Another run's dashboard (or anything else) on the port: this run's dashboard takes another free one, and
    says which, instead of Ray refusing to start."""
    held = socket.socket()
    # An earlier test's dashboard can leave 8265 in TIME_WAIT, which a plain bind refuses but Ray's dashboard (and
    # its own port check) binds over: the test must hold the port as a listener, as a second run's dashboard would.
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        held.bind(("127.0.0.1", configured or 0))
        held.listen()
    except OSError:  # 8265 already listened on by something else on this machine: the case itself
        pass
    port = configured or held.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != ONE_MACHINE}
    child = subprocess.Popen([sys.executable, "-c", DASHBOARD_CHILD, str(port)], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        line = child.stdout.readline()
        while line and not line.startswith("DASHBOARD "):
            line = child.stdout.readline()
        assert line, child.communicate(timeout=60)[1][-3000:]
        dashboard = json.loads(line.removeprefix("DASHBOARD "))
        assert dashboard.startswith("127.0.0.1:") and dashboard != f"127.0.0.1:{port}"
        try:  # the dashboard answers there (Ray's token auth may refuse the request itself)
            urllib.request.urlopen(f"http://{dashboard}/api/version", timeout=30)
        except urllib.error.HTTPError:
            pass
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=120) == 0
        assert f"ray.dashboard_port {port} is taken on 127.0.0.1" in child.stderr.read()
    finally:
        child.kill()
        held.close()
