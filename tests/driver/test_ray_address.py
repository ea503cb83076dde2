"""Which Ray the driver uses: `ray.address` when the config sets one; the cluster in RAY_ADDRESS (what `ray job
submit` gives every job's driver) or the job's own cluster; else a Ray instance of its own on 127.0.0.1."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import yaml

from rlsys.config import to_dict
from rlsys.ray_init import ADDRESS_VARIABLE, JOB_DRIVER_VARIABLE, ONE_MACHINE, cluster_address
from tests.conftest import make_config
from tests.driver.test_fault_tolerance import sim_config
from tests.driver.test_multinode import free_port, start_node, stop


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


@pytest.fixture
def head_node():
    """A one-node cluster started with `ray start --head` on 127.0.0.1, Ray's token auth on."""
    env = dict(os.environ, RAY_AUTH_MODE="token")
    env.pop(ONE_MACHINE, None)
    for name in (ADDRESS_VARIABLE, JOB_DRIVER_VARIABLE):
        env.pop(name, None)
    gcs = free_port()
    temp = tempfile.mkdtemp(prefix="rlsys-ray-")  # a short path: Ray's sockets live there
    pids = start_node(env, "--head", f"--port={gcs}", "--num-cpus=2", "--include-dashboard=false",
                      '--resources={"sim": 2}', f"--temp-dir={temp}")  # fmt: skip
    try:
        yield env, f"127.0.0.1:{gcs}"
    finally:
        stop(pids)
        shutil.rmtree(temp, ignore_errors=True)


def node_id_of(env: dict, address: str) -> str:
    """The id of the node a driver connecting to `address` lands on (the head: the cluster has no other)."""
    code = f"import ray; ray.init(address={address!r}); print(ray.get_runtime_context().get_node_id())"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_the_driver_joins_the_cluster_in_ray_address(head_node, tmp_path):
    env, address = head_node
    cfg = sim_config(tmp_path, step_s=0.05, max_steps=2, run__iterations=1, runners__resource="sim")
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(to_dict(cfg)))

    done = subprocess.run(
        [sys.executable, "-m", "rlsys.train", "--config", str(path)],
        env={**env, ADDRESS_VARIABLE: address},
        capture_output=True,
        text=True,
        timeout=400,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (session,) = json.loads((cfg.output_dir / "run_info.json").read_text())["sessions"]
    # the cluster's GCS (Ray names it by the machine's address), not one the driver started, and its node
    assert session["ray"]["address"].rsplit(":", 1)[1] == address.rsplit(":", 1)[1]
    assert session["ray"]["node_id"] == node_id_of(env, address)
