"""Two Ray nodes on one machine, started with `ray start`: runners land where their resource is, and
losing the second node mid-run costs only the episodes it was playing."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from rlsys.config import to_dict
from rlsys.driver.ray_init import ONE_MACHINE
from tests.conftest import make_config, started_here

ROOT = str(Path(__file__).resolve().parents[2])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_cli() -> str:
    return os.path.join(os.path.dirname(sys.executable), "ray")


def start_node(env: dict, *args: str) -> list[int]:
    """`ray start` with its own ports; returns the processes it left running (the node)."""
    before = {p.pid for p in psutil.process_iter() if started_here(p)}
    ports = ["--node-manager-port", "--object-manager-port", "--metrics-export-port", "--runtime-env-agent-port",
             "--dashboard-agent-grpc-port", "--dashboard-agent-listen-port"]  # fmt: skip
    chosen = [f"{flag}={free_port()}" for flag in ports if flag not in " ".join(args)]
    done = subprocess.run(
        [ray_cli(), "start", "--node-ip-address=127.0.0.1", "--disable-usage-stats", "--object-store-memory=200000000",
         *chosen, *args],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    time.sleep(1)
    return sorted({p.pid for p in psutil.process_iter() if started_here(p)} - before)


def stop(pids: list[int]) -> None:
    procs = []
    for pid in pids:
        try:
            procs += [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)


@pytest.fixture
def two_nodes():
    env = dict(os.environ, RAY_AUTH_MODE="token")  # two nodes listen beyond loopback: Ray's token auth is on
    # a one-node instance started earlier in this process (bind_to_loopback) switched multi-node Ray off
    env.pop(ONE_MACHINE, None)
    # a lost node is declared dead after ~2 s instead of Ray's default ~30 s
    env |= {"RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500",
            "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "0",
            "RAY_metrics_report_interval_ms": "1000"}  # fmt: skip
    gcs, metrics = free_port(), free_port()
    temp = tempfile.mkdtemp(prefix="rlsys-ray-")
    head = start_node(
        env, "--head", f"--port={gcs}", "--num-cpus=2", f"--metrics-export-port={metrics}", "--include-dashboard=false",
        '--resources={"sim": 2, "learner": 1}', f"--temp-dir={temp}",  # a short path: Ray's sockets live there
    )  # fmt: skip
    second = []
    try:
        second = start_node(env, f"--address=127.0.0.1:{gcs}", "--num-cpus=1", '--resources={"sim": 2}')
        yield env, f"127.0.0.1:{gcs}", second, metrics
    finally:
        stop(second + head)
        shutil.rmtree(temp, ignore_errors=True)


def test_runners_follow_their_resource_and_losing_a_node_loses_only_its_episodes(two_nodes, tmp_path):
    env, address, second, metrics_port = two_nodes
    cfg = make_config(
        tmp_path,
        run__name="multinode",
        run__iterations=4,
        run__rollout_size=4,
        runners__num=3,
        runners__num_cpus=0.1,
        runners__start_warning_s=2,
        runners__health_interval_s=1,
        runners__health_timeout_s=20,
        env__kind="sim",
        env__max_steps=3,
        policy__kind="element_pointer",  # no transformers to import in four actors: they start sooner
        env__sim={"step_median_s": 0.3, "step_sigma": 0.2, "success_prob": 0.3},
        learner__resource="learner",
        learner__num_cpus=0.5,
        replay__capacity=10000,
    )
    data = to_dict(cfg)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.driver.multinode_run", address, json.dumps(data), ",".join(map(str, second)),
         str(metrics_port)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=420,
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(lines[-1][len("REPORT ") :])
    nodes = {n["id"]: n for n in report["nodes"]}
    head_id = next(i for i, n in nodes.items() if n["resources"].get("learner"))
    second_id = next(i for i in nodes if i != head_id)

    assert report["error"] is None, report["error"]
    # before: three runners on the nodes that offer `sim`, two at most per node; the learner where `learner` is
    placed = [r["node_id"] for r in report["before"]["runners"]]
    assert sorted(placed.count(n) for n in (head_id, second_id)) == [1, 2]
    assert report["before"]["learner"]["node_id"] == head_id
    # the second node is gone; its runners were re-created on the head's free capacity, the rest wait
    assert not nodes[second_id]["alive"]
    assert [r["node_id"] for r in report["after"]["runners"]] == [head_id, head_id]
    assert report["restarts"] == placed.count(second_id)
    assert "has not started after" in proc.stderr
    # the learner went on: same process, every iteration once, a new version each
    assert report["after"]["learner"]["pid"] == report["before"]["learner"]["pid"]
    assert report["killed_after_iterations"] < 4
    assert report["iterations"] == [1, 2, 3, 4] and report["versions"] == [1, 2, 3, 4]
    # nothing lost or stored twice: the buffer holds exactly the trainable trajectories the run wrote
    assert len(report["buffer_ids"]) == len(set(report["buffer_ids"]))
    assert sorted(report["buffer_ids"]) == sorted(report["shard_trainable_ids"])
    assert report["shard_outcomes"].count("env_error") >= 1  # the episodes the lost node was playing
    # the run's series reached the head node's metrics export
    exported = report["metrics"]
    assert exported["ray_rlsys_buffer_trajectories"] == len(report["buffer_ids"])
    assert exported["ray_rlsys_runner_restarts"] == report["restarts"]
    assert exported["ray_rlsys_policy_version"] == 4
