"""The driver of tests/driver/test_multinode.py, run as its own process on a two-node Ray cluster started with
`ray start`: trains, kills the second node's processes once the first iteration is logged, lets the run
finish, and prints what happened as one JSON line."""

import json
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import ray

from rlsys.config import load_config
from rlsys.data.shards import read_trajectories
from rlsys.driver.metrics import read_metrics
from rlsys.driver.trainer import Trainer

SERIES = ["ray_rlsys_trajectories_total", "ray_rlsys_buffer_trajectories", "ray_rlsys_runner_restarts",
          "ray_rlsys_policy_version"]  # fmt: skip


def kill_trees(pids: list[int]) -> None:
    """What losing a machine does to its processes: every one of them, and their children, gone at once."""
    procs = []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def scrape(port: int, names: list[str], final_version: int, timeout_s: float = 60.0) -> dict:
    """The run's series from the head node's metrics export, once every name has appeared and the
    policy version is the run's last (the export lags the run by its report interval)."""
    deadline, found = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            text = ""
        for line in text.splitlines():
            name = line.split("{")[0]
            if not line.startswith("#") and name in names and 'run="multinode"' in line:
                found[name] = float(line.rsplit(" ", 1)[1])
        if set(found) == set(names) and found["ray_rlsys_policy_version"] == final_version:
            break
        time.sleep(1)
    return found


def main() -> None:
    address, data, second_node_pids, metrics_port = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    ray.init(address=address, log_to_driver=False)
    cfg = load_config(None, data=data)
    run_dir = Path(cfg.run.output_dir)
    trainer = Trainer(cfg, run_dir)
    learner = trainer.learners.actors[0]
    outcome = {}

    def train():
        try:
            outcome["records"] = trainer.run()
        except Exception as e:  # reported, not raised: the checks below say what went wrong
            outcome["error"] = f"{type(e).__name__}: {e}"

    thread = threading.Thread(target=train)
    thread.start()
    while not read_metrics(run_dir) and thread.is_alive():
        time.sleep(0.2)
    before = {"runners": [dict(s) for s in trainer.pool.placement], "learner": ray.get(learner.describe.remote())}
    kill_trees([int(p) for p in second_node_pids.split(",")])
    killed_at = len(read_metrics(run_dir))
    thread.join(timeout=240)
    stored = ray.get(trainer.buffer.all.remote(), timeout=60)
    shards = [t for t in read_trajectories(run_dir / "trajectories")]
    report = {
        "error": outcome.get("error", "timed out" if thread.is_alive() else None),
        "iterations": [r["iteration"] for r in outcome.get("records", [])],
        "versions": [r["policy_version"] for r in outcome.get("records", [])],
        "killed_after_iterations": killed_at,
        "before": before,
        "after": {
            "runners": [trainer.pool.placement[slot] for slot in trainer.pool.alive_slots()],
            "learner": ray.get(learner.describe.remote()),
        },
        "restarts": trainer.pool.restarts,
        "nodes": [{"id": n["NodeID"], "alive": n["Alive"], "resources": n["Resources"]} for n in ray.nodes()],
        "buffer_ids": [t.id for t in stored],
        "shard_trainable_ids": [t.id for t in shards if t.trainable],
        "shard_outcomes": [t.outcome for t in shards],
        "metrics": scrape(int(metrics_port), SERIES, trainer.version),
    }
    trainer.shutdown()
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
