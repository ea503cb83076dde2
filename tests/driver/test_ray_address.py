"""Which Ray the driver uses: `ray.address` when the config sets one; the cluster in RAY_ADDRESS (what `ray job
submit` gives every job's driver) or the job's own cluster; else a Ray instance of its own on 127.0.0.1."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
import yaml

from rlsys.config import to_dict
from rlsys.driver.ray_init import ADDRESS_VARIABLE, JOB_DRIVER_VARIABLE, ONE_MACHINE, cluster_address
from tests.conftest import make_config
from tests.driver.test_fault_tolerance import sim_config
from tests.driver.test_multinode import free_port, start_node, stop
from tests.support.train_command import run_train


@pytest.mark.parametrize(
    "configured, environment, expected",
    [
        (None, {}, None),  # nothing says where: a Ray of its own
        (None, {ADDRESS_VARIABLE: "10.0.0.5:6379"}, "auto"),  # Ray resolves RAY_ADDRESS itself
        (None, {JOB_DRIVER_VARIABLE: "{}"}, "auto"),  # a job's driver: the job's cluster
        ("127.0.0.1:6380", {ADDRESS_VARIABLE: "10.0.0.5:6379"}, "127.0.0.1:6380"),  # the config wins
        ("local", {ADDRESS_VARIABLE: "10.0.0.5:6379"}, None),  # ...also to start one here inside a cluster
    ],
)
def test_the_address_comes_from_the_config_then_the_environment(tmp_path, monkeypatch, configured, environment,
                                                                 expected):  # fmt: skip
    for name in (ADDRESS_VARIABLE, JOB_DRIVER_VARIABLE):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert cluster_address(make_config(tmp_path, ray__address=configured)) == expected


@pytest.fixture(scope="module")
def head_node():
    """A one-node cluster on this machine as clusters/README.md starts one: `ray start --head` on 127.0.0.1 only
    (Ray's one-machine switch), Ray's token auth on. Yields the environment of a user's shell beside it: the
    token auth on, no switch, no address."""
    env = dict(os.environ, RAY_AUTH_MODE="token")
    env.pop(ONE_MACHINE, None)
    for name in (ADDRESS_VARIABLE, JOB_DRIVER_VARIABLE):
        env.pop(name, None)
    gcs = free_port()
    temp = tempfile.mkdtemp(prefix="rlsys-ray-")  # a short path: Ray's sockets live there
    pids = start_node({**env, ONE_MACHINE: "0"}, "--head", f"--port={gcs}", "--num-cpus=2",
                      "--include-dashboard=false", '--resources={"sim": 2}', f"--temp-dir={temp}")  # fmt: skip
    try:
        yield env, f"127.0.0.1:{gcs}"
    finally:
        stop(pids)
        shutil.rmtree(temp, ignore_errors=True)


def node_id_of(env: dict, address: str) -> str:
    """The id of the node a driver connecting to `address` lands on (the head: the cluster has no other)."""
    code = f"import ray; ray.init(address={address!r}); print(ray.get_runtime_context().get_node_id())"
    done = subprocess.run([sys.executable, "-c", code], env={**env, ONE_MACHINE: "0"}, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def config_file(tmp_path):
    # element_pointer: no transformers to import, so the run's actors start sooner
    cfg = sim_config(tmp_path, step_s=0.05, max_steps=2, run__iterations=1, runners__resource="sim",
                     policy__kind="element_pointer")  # fmt: skip
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(to_dict(cfg)))
    return cfg, path


def test_the_driver_joins_the_cluster_in_ray_address(head_node, tmp_path):
    """The head listens on 127.0.0.1 only; Ray would turn RAY_ADDRESS=127.0.0.1:PORT into the machine's other
    address and retry there for minutes. The driver joins on loopback instead."""
    env, address = head_node
    cfg, path = config_file(tmp_path)

    done = run_train("--config", str(path), env={**env, ADDRESS_VARIABLE: address}, timeout=240)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (session,) = json.loads((cfg.output_dir / "run_info.json").read_text())["sessions"]
    # the cluster's GCS, not one the driver started, and its node
    assert session["ray"]["address"].rsplit(":", 1)[1] == address.rsplit(":", 1)[1]
    assert session["ray"]["node_id"] == node_id_of(env, address)
    assert "actors' output: " in done.stdout  # where the actors' own output is, since it is not streamed here


@pytest.mark.parametrize(
    "case, fix",
    [
        ("no token", "set RAY_AUTH_MODE=token"),
        ("another token", "set RAY_AUTH_MODE=token"),
        ("nothing there", "start the cluster's head first (`ray start --head --port"),
        ("the dashboard's address", "a driver joins the head's GCS"),
    ],
)
def test_a_cluster_that_cannot_be_joined_is_one_line_within_seconds(head_node, tmp_path, case, fix):
    env, address = head_node
    env = {**env, ADDRESS_VARIABLE: address}
    if case == "no token":
        env.pop("RAY_AUTH_MODE")
    elif case == "another token":
        env["RAY_AUTH_TOKEN"] = "0" * 32
    elif case == "nothing there":
        env[ADDRESS_VARIABLE] = f"127.0.0.1:{free_port()}"
    else:
        env[ADDRESS_VARIABLE] = "http://127.0.0.1:8265"
    cfg, path = config_file(tmp_path)

    started = time.monotonic()
    done = run_train("--config", str(path), env=env, timeout=120)

    assert time.monotonic() - started < 30  # Ray alone: minutes of retries, or a long traceback
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"config error: {ADDRESS_VARIABLE} {env[ADDRESS_VARIABLE]}") and fix in line
    assert not cfg.output_dir.exists()  # nothing written
