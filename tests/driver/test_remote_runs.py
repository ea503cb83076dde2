"""A run whose run.output_dir is in an object store, against a real S3-protocol server on 127.0.0.1: its
checkpoints and shards land there, a checkpoint whose upload stopped before its manifest is ignored, and
`--resume s3://...` on a machine holding nothing of the run continues it. Credentials come from the
environment and are stored nowhere."""

import os

import pyarrow.parquet as pq
import yaml

from rlsys.config import to_dict
from rlsys.data.storage import RemoteFolder, published_checkpoints
from rlsys.driver.metrics import read_metrics
from tests.driver.test_fault_tolerance import sim_config
from tests.support.s3_server import secrets_in
from tests.support.train_command import run_train

URI = "s3://bucket/run"


def train(args, env, log):
    done = run_train(*args, env={**os.environ, **env}, timeout=400, log=log)
    return done.returncode, log.read_text()


def test_a_remote_run_publishes_there_and_resumes_from_there(s3, tmp_path):
    sim = {"step_median_s": 0.05, "step_sigma": 0.0, "success_prob": 0.5}
    # element_pointer: a policy without transformers starts the learner and runners of both sessions sooner
    cfg = sim_config(tmp_path, step_s=0.05, max_steps=3, runners__num=2, env__sim=sim, run__iterations=2,
                     policy__kind="element_pointer")  # fmt: skip
    data = to_dict(cfg)
    data["run"] |= {"output_dir": URI, "scratch_dir": str(tmp_path / "first")}
    config_file = tmp_path / "cfg.yaml"
    config_file.write_text(yaml.safe_dump(data))

    code, log = train(["--config", str(config_file)], s3, tmp_path / "first.log")
    assert code == 0, log
    remote = RemoteFolder(URI)
    assert published_checkpoints(remote) == ["000001", "000002"]
    there = remote.files()
    assert {"config.yaml", "metrics.jsonl", "report.html"} <= there.keys()
    shards = sorted(p for p in there if p.startswith("trajectories/shard-"))
    assert len(shards) == 2
    # the checkpoint references the shards instead of copying the buffer
    manifest = yaml.safe_load(remote.read_bytes("checkpoints/000002/manifest.json"))
    assert set(manifest["references"]) == set(shards)
    assert there["checkpoints/000002/replay.parquet"] < min(there[s] for s in shards)
    assert yaml.safe_load(remote.read_bytes("config.yaml"))["run"]["output_dir"] == URI

    remote.delete("checkpoints/000002/manifest.json")  # the machine died while checkpoint 2 was uploaded
    # `ray down`: a new machine with an empty local folder resumes from the store
    resume = ["--resume", URI, f"run.scratch_dir={tmp_path / 'second'}", "run.iterations=3"]
    code, log = train(resume, s3, tmp_path / "second.log")
    assert code == 0, log
    assert f"resumed from {tmp_path / 'second' / 'checkpoints' / '000001'} at iteration 1" in log
    assert published_checkpoints(remote) == ["000001", "000002", "000003"]
    local = tmp_path / "second"
    assert [r["iteration"] for r in read_metrics(local)] == [1, 2, 3]  # nothing skipped, nothing repeated
    remote.download("metrics.jsonl", tmp_path / "published.jsonl")
    assert (tmp_path / "published.jsonl").read_text() == (local / "metrics.jsonl").read_text()
    ids = pq.read_table(local / "checkpoints" / "000003" / "replay.parquet")["trajectory_id"].to_pylist()
    assert ids and len(set(ids)) == len(ids)

    for folder in (tmp_path, local):
        assert secrets_in(folder) == []  # config, logs, metrics, run_info, checkpoints
    remote.download("config.yaml", tmp_path / "published.yaml")
    for rel in remote.files():
        assert s3["AWS_SECRET_ACCESS_KEY"].encode() not in remote.read_bytes(rel), rel
