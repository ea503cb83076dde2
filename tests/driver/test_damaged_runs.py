"""Runs whose files or stores were damaged: resume falls back to the newest intact checkpoint, chosen before Ray
starts, and skips a torn metrics line, saying so; a store actor that dies is named, not blamed on the learner; a
disk that fills up while a checkpoint is written ends the run with one line and leaves the previous one intact."""

import json
import logging
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
import ray
import yaml

import rlsys.cli.train
from rlsys.config import to_dict
from rlsys.data import checkpoint
from rlsys.driver.metrics import read_metrics
from rlsys.driver.trainer import Trainer
from tests.data.test_checkpoint import fill_disk, flip_middle_byte, tmpfs, truncate
from tests.driver.test_fault_tolerance import sim_config
from tests.driver.test_interrupts import config_file
from tests.support.train_command import start_train, wait_for

SIM = {"step_median_s": 0.05, "step_sigma": 0.0, "success_prob": 0.4}


def small(tmp_path, **overrides):
    return sim_config(tmp_path, step_s=0.05, max_steps=3, runners__num=2, env__sim=SIM, **overrides)


def trained(tmp_path, iterations: int):
    """The config of a finished run of `iterations` iterations (a checkpoint after each)."""
    cfg = small(tmp_path, run__iterations=iterations)
    trainer = Trainer(cfg, cfg.output_dir)
    try:
        trainer.run()
    finally:
        trainer.shutdown()
    return cfg


@pytest.fixture(scope="module")
def two_checkpoints(ray_session, tmp_path_factory):
    """A finished run with checkpoints 000001 and 000002 and its config.yaml."""
    cfg = trained(tmp_path_factory.mktemp("two"), iterations=2)
    (cfg.output_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg)))
    references = json.loads((cfg.output_dir / "checkpoints" / "000001" / checkpoint.MANIFEST).read_text())["references"]
    assert list(references) == ["trajectories/shard-000000.parquet"]  # 000002 references shard-000001 as well
    return cfg.output_dir


def test_torn_metrics_lines_are_skipped_with_a_warning(tmp_path, caplog):
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1}\n{"iteration": 2}\n{"itera')  # killed mid-write
    assert read_metrics(tmp_path) == [{"iteration": 1}, {"iteration": 2}]
    assert any("metrics.jsonl" in r.getMessage() and "line 3" in r.getMessage() for r in caplog.records)


def test_resume_passes_over_a_damaged_newest_checkpoint_and_a_torn_metrics_line(two_checkpoints, tmp_path, caplog):
    run_dir = tmp_path / "run"
    shutil.copytree(two_checkpoints, run_dir)
    newest = checkpoint.latest(run_dir)
    assert newest.name == "000002"
    learner_pt = newest / "learner.pt"
    learner_pt.write_bytes(learner_pt.read_bytes()[:1000])  # a disk that filled up while it was copied
    metrics = (run_dir / "metrics.jsonl").read_text()
    (run_dir / "metrics.jsonl").write_text(metrics[: len(metrics) - 40])  # the last line torn

    caplog.set_level(logging.WARNING)
    resumed = Trainer(small(tmp_path, run__iterations=2), run_dir, resume=True)
    try:
        assert resumed.iteration == 1  # from 000001, the newest intact one
        records = resumed.run()
    finally:
        resumed.shutdown()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(str(learner_pt) in w and "000001" in w for w in warnings), warnings  # names the file and the fallback
    assert any("metrics.jsonl" in w for w in warnings), warnings
    assert [r["iteration"] for r in records] == [1, 2]
    assert checkpoint.newest_intact(run_dir) == (run_dir / "checkpoints" / "000002", [])  # written again, whole


def test_resume_with_no_intact_checkpoint_names_every_damaged_file(two_checkpoints, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(two_checkpoints, run_dir)
    states = [folder / "state.json" for folder in sorted((run_dir / "checkpoints").iterdir())]
    for state in states:
        state.unlink()
    with pytest.raises(checkpoint.CheckpointError) as refused:
        Trainer(small(tmp_path, run__iterations=2), run_dir, resume=True).shutdown()
    assert all(str(state) in str(refused.value) for state in states), str(refused.value)


@pytest.mark.parametrize("store", ["replay-buffer", "weight-store"])
def test_a_store_that_dies_is_named(ray_session, tmp_path, caplog, store):
    caplog.set_level(logging.WARNING)
    cfg = small(tmp_path, run__iterations=6)
    trainer = Trainer(cfg, cfg.output_dir)
    failure = {}

    def train():
        try:
            trainer.run()
        except Exception as e:  # noqa: BLE001 - the test looks at whatever ended the run
            failure["error"] = e

    thread = threading.Thread(target=train)
    try:
        thread.start()
        while not read_metrics(cfg.output_dir) and thread.is_alive():
            time.sleep(0.05)
        ray.kill(ray.get_actor(store), no_restart=True)
        thread.join(timeout=180)
        assert not thread.is_alive(), "the run did not end after its store died"
    finally:
        trainer.shutdown()
    message = str(failure["error"])
    assert message.startswith(f"the {store} actor died"), message
    assert "learner-0 died" not in message
    assert "The run stopped at iteration" in message  # and where it can go on from
    # runners that failed with the store are not restarted, each to fail again, before the run ends
    assert not [r.getMessage() for r in caplog.records if " replaced in " in r.getMessage()]


def cut_weights_and_manifest(run):
    newest = run / "checkpoints" / "000002"
    (newest / checkpoint.MANIFEST).unlink()
    truncate(newest / "policy" / "model.safetensors")
    return newest / "policy" / "model.safetensors"


def alter_a_shard(run):
    flip_middle_byte(run / "trajectories" / "shard-000001.parquet")  # same size
    return run / "trajectories" / "shard-000001.parquet"


@pytest.mark.parametrize("damage", [alter_a_shard, cut_weights_and_manifest])
def test_resume_chooses_the_newest_intact_checkpoint_before_ray_starts(two_checkpoints, tmp_path, monkeypatch,
                                                                       capsys, damage):  # fmt: skip
    run = tmp_path / "run"
    shutil.copytree(two_checkpoints, run)
    damaged = damage(run)
    chosen = []
    monkeypatch.setattr(rlsys.cli.train, "train", lambda cfg, run_dir, resume: chosen.append(resume) or 0)
    monkeypatch.chdir(tmp_path)  # --resume run: a path relative to here, which Ray's workers do not share
    assert rlsys.cli.train.main(["--resume", "run"]) == 0  # what rlsys-train does up to starting Ray
    assert chosen == [Path("run") / "checkpoints" / "000001"]
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "000002" in line]
    assert line.startswith("warning: checkpoint 000002 is damaged and passed over: ")
    assert str(damaged.relative_to(tmp_path)) in line and line.endswith(f"resuming from {chosen[0]}")

    resumed = Trainer(small(tmp_path, run__iterations=2), run, resume=chosen[0])  # and the run goes on from it
    try:
        assert resumed.iteration == 1
        records = resumed.run()
    finally:
        resumed.shutdown()
    assert [r["iteration"] for r in records] == [1, 2]
    assert checkpoint.newest_intact(run) == (run / "checkpoints" / "000002", [])


def test_a_full_disk_while_a_checkpoint_is_written_ends_the_run_with_one_line(tmp_path):
    with tmpfs(tmp_path / "disk", "16m") as disk:
        # 8 episodes an iteration: the second still ends well after the disk is filled (a checkpoint is ~750 KiB of
        # weights and optimizer state whatever the rollout size, so it still does not fit)
        cfg, path = config_file(disk, iterations=3, rollout_size=8)
        run_dir = cfg.output_dir
        log = tmp_path / "full.log"
        proc = start_train("--config", str(path), log=log)
        try:
            wait_for(lambda: (run_dir / "checkpoints" / "000001").exists(), proc, log)
            fill_disk(disk, leave=256 * 1024)  # room for the next shard and metrics line, not for a checkpoint
            assert proc.wait(timeout=300) == 1, log.read_text()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        out = log.read_text()
        assert "Traceback" not in out, out
        (line,) = [line for line in out.splitlines() if "no space left" in line]
        root = run_dir / "checkpoints"
        assert line.startswith(f"run failed: no space left in {root} to write checkpoint 000002 ("), out
        assert "KiB free): nothing of it was kept, checkpoint 000001 is intact." in line
        assert line.endswith(f"Continue with: rlsys-train --resume {run_dir}")
        assert sorted(p.name for p in root.iterdir()) == ["000001"]  # no .tmp-000002-*
        assert checkpoint.newest_intact(run_dir) == (root / "000001", [])
