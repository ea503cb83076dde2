"""Checkpoints that were damaged after they were written: found, named, and passed over for an older one."""

import json

import pytest
import torch

from rlsys.data import checkpoint
from rlsys.data.shards import write_shard


def fill(folder):
    checkpoint.write_files(folder, {"policy/model.safetensors": b"w" * 1000, "policy/config.json": b"{}"})
    torch.save({"algorithm": {"w": torch.arange(2000.0)}}, folder / "learner.pt")
    write_shard(folder / "replay.parquet", [])
    checkpoint.write_json(folder / "state.json", {"iteration": int(folder.name.split("-")[1]), "replay": {}})


@pytest.fixture
def run(tmp_path):
    for i in (1, 2, 3):
        checkpoint.write(tmp_path, i, fill, keep=3)
    return tmp_path


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def zero_middle(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 32] = bytes(32)
    path.write_bytes(bytes(data))


DAMAGE = {
    "learner.pt": truncate,
    "state.json": lambda p: p.unlink(),
    "replay.parquet": zero_middle,
    "policy/model.safetensors": lambda p: p.unlink(),
}


@pytest.mark.parametrize("name", DAMAGE)
def test_a_damaged_newest_checkpoint_is_named_and_passed_over(run, name):
    newest = checkpoint.latest(run)
    DAMAGE[name](newest / name)
    found, skipped = checkpoint.newest_intact(run)
    assert found == run / "checkpoints" / "000002"
    ((path, reason),) = skipped
    assert path == newest and str(newest / name) in reason


def test_a_torn_state_json_is_found_even_without_a_manifest(run):
    newest = checkpoint.latest(run)
    (newest / checkpoint.MANIFEST).unlink()  # checkpoints written before manifests existed
    state = newest / "state.json"
    state.write_text(state.read_text()[:10])
    found, ((path, reason),) = checkpoint.newest_intact(run)
    assert found.name == "000002" and str(state) in reason
    state.write_text(json.dumps({"iteration": 3}))
    truncate(newest / "learner.pt")
    found, ((path, reason),) = checkpoint.newest_intact(run)
    assert found.name == "000002" and str(newest / "learner.pt") in reason


def test_no_intact_checkpoint_at_all(run):
    for folder in checkpoint.complete_checkpoints(run):
        (folder / "learner.pt").unlink()
    found, skipped = checkpoint.newest_intact(run)
    assert found is None and len(skipped) == 3


def test_the_manifest_lists_every_file(run):
    manifest = json.loads((checkpoint.latest(run) / checkpoint.MANIFEST).read_text())
    assert set(manifest["sha256"]) == {"policy/model.safetensors", "policy/config.json", "learner.pt",
                                       "replay.parquet", "state.json"}  # fmt: skip


def test_a_lost_or_cut_short_referenced_shard_is_named_and_passed_over(tmp_path):
    """A checkpoint whose replay buffer is read back from the run's shards lists them, with their sizes."""
    shards = tmp_path / "trajectories"
    shards.mkdir()
    for i in (1, 2):
        (shards / f"shard-00000{i}.parquet").write_bytes(b"s" * 100 * i)

    def fill_referencing(names):
        def fill_it(folder):
            fill(folder)
            return {f"trajectories/{n}": (shards / n).stat().st_size for n in names}

        return fill_it

    checkpoint.write(tmp_path, 1, fill_referencing(["shard-000001.parquet"]), keep=3)
    checkpoint.write(tmp_path, 2, fill_referencing(["shard-000001.parquet", "shard-000002.parquet"]), keep=3)
    manifest = json.loads((checkpoint.latest(tmp_path) / checkpoint.MANIFEST).read_text())
    assert manifest["references"] == {
        "trajectories/shard-000001.parquet": 100,
        "trajectories/shard-000002.parquet": 200,
    }
    assert checkpoint.newest_intact(tmp_path) == (tmp_path / "checkpoints" / "000002", [])

    truncate(shards / "shard-000002.parquet")
    found, ((path, reason),) = checkpoint.newest_intact(tmp_path)
    assert found.name == "000001" and str(shards / "shard-000002.parquet") in reason and "size differs" in reason
    (shards / "shard-000002.parquet").unlink()
    found, ((path, reason),) = checkpoint.newest_intact(tmp_path)
    assert found.name == "000001" and "missing" in reason
