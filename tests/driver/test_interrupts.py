"""Ctrl-C and SIGTERM sent to a real `rlsys-train`: the first keeps the finished episodes, stops cleanly
and says how to resume; a second exits at once. A run stopped before its first checkpoint is not resumed beside
the stopped session's files: it starts over, its files moved aside, only when asked (--restart)."""

import os
import signal
import time

import pyarrow.parquet as pq
import yaml

from rlsys.config import to_dict
from rlsys.driver.metrics import read_metrics
from tests.driver.test_fault_tolerance import sim_config
from tests.support.train_command import start_train, wait_for

SIM = {"reset_median_s": 0.05, "step_median_s": 0.25, "step_sigma": 0.0, "success_prob": 0.4}


def config_file(tmp_path, iterations, rollout_size=16, **overrides):
    # element_pointer: what is checked here is the driver's, and a policy without transformers starts each run's
    # learner and runners seconds sooner than the tiny T5 (other tests stop and resume T5 runs)
    cfg = sim_config(tmp_path, step_s=0.25, max_steps=3, runners__num=2, env__sim=SIM, run__iterations=iterations,
                     run__rollout_size=rollout_size, policy__kind="element_pointer", **overrides)  # fmt: skip
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(to_dict(cfg)))
    return cfg, path


def shard_iterations(run_dir) -> list[int]:
    """The iteration of every trajectory in the run's training shards."""
    out = []
    for shard in sorted((run_dir / "trajectories").glob("shard-*.parquet")):
        table = pq.read_table(shard, columns=["trajectory_id", "iteration"])
        out += table.group_by("trajectory_id").aggregate([("iteration", "max")])["iteration_max"].to_pylist()
    return out


def test_ctrl_c_keeps_the_finished_episodes_stops_cleanly_and_resumes(tmp_path):
    cfg, path = config_file(tmp_path, iterations=2)
    run_dir = cfg.output_dir
    log = tmp_path / "first.log"
    proc = start_train("--config", str(path), log=log)
    wait_for(lambda: (run_dir / "checkpoints" / "000001").exists(), proc, log)
    time.sleep(3)  # some episodes of iteration 2 finished, not all 16
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    assert proc.wait(timeout=120) == 130, log.read_text()
    out = log.read_text()
    assert "Traceback" not in out, out
    assert f"rlsys-train --resume {run_dir}" in out, out
    done = len(read_metrics(run_dir))
    kept = [i for i in shard_iterations(run_dir) if i == done + 1]
    assert 0 < len(kept) < 16, (done, shard_iterations(run_dir), out)  # the finished episodes of the cut iteration

    log = tmp_path / "second.log"
    proc = start_train("--resume", str(run_dir), log=log)
    assert proc.wait(timeout=400) == 0, log.read_text()
    assert [r["iteration"] for r in read_metrics(run_dir)] == [1, 2]


def test_sigterm_stops_and_a_second_one_exits_at_once(tmp_path):
    cfg, path = config_file(tmp_path, iterations=50, rollout_size=4)  # the first iteration ends soon
    log = tmp_path / "run.log"
    proc = start_train("--config", str(path), log=log)
    wait_for(lambda: read_metrics(cfg.output_dir), proc, log)
    os.kill(proc.pid, signal.SIGTERM)
    wait_for(lambda: "SIGTERM" in log.read_text(), proc, log, timeout=30)
    os.kill(proc.pid, signal.SIGTERM)
    sent = time.monotonic()
    code = proc.wait(timeout=60)
    assert time.monotonic() - sent < 5
    out = log.read_text()
    assert "Traceback" not in out, out
    # Ray's shutdown puts SIGTERM back to its default action until the driver takes it again: a second signal in
    # that window ends the process by the signal itself, which a shell reports as the same status (143)
    if code != -signal.SIGTERM:
        assert code == 128 + signal.SIGTERM and "exiting now" in out, out


def test_a_run_stopped_before_its_first_checkpoint_starts_over_only_when_asked(tmp_path):
    cfg, path = config_file(tmp_path, iterations=50, rollout_size=4, run__checkpoint_every=100)
    run_dir = cfg.output_dir
    log = tmp_path / "first.log"
    proc = start_train("--config", str(path), log=log)
    wait_for(lambda: read_metrics(run_dir), proc, log)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=120) == 130, log.read_text()
    assert f"start it over with: rlsys-train --resume {run_dir} --restart" in log.read_text()
    stopped = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}

    log = tmp_path / "resumed.log"
    proc = start_train("--resume", str(run_dir), log=log)
    try:
        assert proc.wait(timeout=120) == 2, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert f"config error: --resume {run_dir}: no complete checkpoint there" in log.read_text()
    assert {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == stopped

    log = tmp_path / "restarted.log"
    proc = start_train("--resume", str(run_dir), "--restart", "run.iterations=1", log=log)
    assert proc.wait(timeout=400) == 0, log.read_text()
    assert [r["iteration"] for r in read_metrics(run_dir)] == [1]
    assert sorted(shard_iterations(run_dir)) == [1] * 4  # none of the stopped session's episodes
    (aside,) = run_dir.parent.glob(f"{run_dir.name}.old-*")
    assert {p.relative_to(aside): p.read_bytes() for p in aside.rglob("*") if p.is_file()} == stopped
