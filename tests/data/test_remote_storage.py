"""Run folders in an object store (rlsys.data.storage) against a real S3-protocol server on 127.0.0.1:
checkpoints published by their manifest, written last; a pull for a resume ignores unpublished ones and
names damaged ones."""

import logging

import pytest

from rlsys.data import checkpoint
from rlsys.data.storage import RemoteFolder, RunMirror, published_checkpoints
from tests.data.test_checkpoint import fill


@pytest.fixture
def remote(s3, request):
    return RemoteFolder(f"s3://bucket/{request.node.name}")


def local_run(folder):
    (folder / "trajectories").mkdir(parents=True)
    (folder / "config.yaml").write_text("run: {name: x}\n")
    (folder / "metrics.jsonl").write_text('{"iteration": 1}\n')
    (folder / "trajectories" / "shard-000000.parquet").write_bytes(b"shard")
    (folder / "trajectories" / ".shard-000001.parquet.tmp").write_bytes(b"half")  # a shard being written
    return folder


def test_checkpoints_are_published_with_their_manifest_last_and_pruned(tmp_path, remote):
    run = local_run(tmp_path / "run")
    mirror = RunMirror(run, remote)
    for i in (1, 2, 3):
        uri = mirror.publish_checkpoint(checkpoint.write(run, i, fill, keep=2), keep=2)
        assert uri == f"{remote.uri}/checkpoints/{i:06d}"
    assert published_checkpoints(remote) == ["000002", "000003"]
    there = remote.files()
    assert {"config.yaml", "metrics.jsonl", "trajectories/shard-000000.parquet"} <= there.keys()
    assert not any(".tmp" in p for p in there)  # hidden temporary files stay local
    assert set(remote.files("checkpoints/000003")) == set(checkpoint.read_json(run / "checkpoints/000003/manifest.json")
                                                          ["sha256"]) | {"manifest.json"}  # fmt: skip
    (run / "metrics.jsonl").write_text('{"iteration": 1}\n{"iteration": 2}\n')
    assert mirror.push() == 1 and remote.read_bytes("metrics.jsonl").count(b"\n") == 2  # only what changed


def test_a_pull_ignores_a_checkpoint_without_manifest_and_passes_over_a_damaged_one(tmp_path, remote, caplog):
    run = local_run(tmp_path / "run")
    mirror = RunMirror(run, remote)
    for i in (1, 2, 3):
        mirror.publish_checkpoint(checkpoint.write(run, i, fill, keep=3), keep=3)
    remote.delete("checkpoints/000003/manifest.json")  # the upload of 3 stopped before its manifest
    learner = run / "checkpoints/000002/learner.pt"
    learner.write_bytes(learner.read_bytes()[:100])
    remote.upload(learner, "checkpoints/000002/learner.pt")  # 2 was damaged in the store afterwards

    caplog.set_level(logging.WARNING)
    fresh = tmp_path / "elsewhere"  # another machine: nothing of the run here
    assert RunMirror(fresh, remote).pull() == "000001"
    assert [p.name for p in checkpoint.complete_checkpoints(fresh)] == ["000001"]
    assert checkpoint.newest_intact(fresh) == (fresh / "checkpoints" / "000001", [])
    assert (fresh / "config.yaml").read_text() == "run: {name: x}\n"
    assert (fresh / "trajectories" / "shard-000000.parquet").read_bytes() == b"shard"
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(f"{remote.uri}/checkpoints/000002/learner.pt" in w for w in warned), warned


def test_a_pull_keeps_what_the_local_folder_already_has(tmp_path, remote):
    run = local_run(tmp_path / "run")
    mirror = RunMirror(run, remote)
    mirror.publish_checkpoint(checkpoint.write(run, 1, fill, keep=3), keep=3)
    (run / "metrics.jsonl").write_text('{"iteration": 1}\n{"iteration": 2}\n')  # newer than what was published
    assert RunMirror(run, remote).pull() == "000001"
    assert (run / "metrics.jsonl").read_text().count("\n") == 2


def test_credentials_in_the_uri_are_refused(s3):
    with pytest.raises(ValueError, match="environment"):
        RemoteFolder("s3://bucket/run?access_key=AKIA&secret_key=shh")
