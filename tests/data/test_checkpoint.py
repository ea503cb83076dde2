"""Checkpoints that were damaged after they were written: found, named, and passed over for an older one; a
checkpoint that cannot be written for lack of space leaves nothing behind."""

import contextlib
import json
import subprocess

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import save_file

from rlsys.data import checkpoint
from rlsys.data.shards import write_shard
from tests.data.test_storage import trajectory


def fill(folder):
    checkpoint.write_files(folder, {"policy/config.json": b"{}"})
    save_file({"w": torch.arange(250.0)}, folder / "policy" / "model.safetensors")
    torch.save({"w": torch.arange(500.0)}, folder / "policy" / "element_pointer.pt")
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
    assert set(manifest["sha256"]) == {"policy/model.safetensors", "policy/config.json", "policy/element_pointer.pt",
                                       "learner.pt", "replay.parquet", "state.json"}  # fmt: skip


@pytest.fixture
def referencing(tmp_path):
    """A run whose checkpoints reference its shards, as the trainer writes them: 000001 references shard-000001,
    000002 shard-000001 and shard-000002."""
    shards = tmp_path / "trajectories"
    for i in (1, 2):
        write_shard(shards / f"shard-00000{i}.parquet", [trajectory(3, seed=10 * i + k) for k in range(4)])

    def fill_referencing(names):
        def fill_it(folder):
            fill(folder)
            sizes = {f"trajectories/{n}": (shards / n).stat().st_size for n in names}
            replay = {"contents": "reference", "shards": sizes}
            checkpoint.write_json(
                folder / "state.json", {"iteration": int(folder.name.split("-")[1]), "replay": replay}
            )
            return sizes

        return fill_it

    checkpoint.write(tmp_path, 1, fill_referencing(["shard-000001.parquet"]), keep=3)
    checkpoint.write(tmp_path, 2, fill_referencing(["shard-000001.parquet", "shard-000002.parquet"]), keep=3)
    return tmp_path


def flip_middle_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def flip_a_byte_of_page_data(path):
    """Flip the last byte of the largest column chunk, which lies in its last page's data (page headers, not
    covered by the checksums, come before the data)."""
    group = pq.ParquetFile(path).metadata.row_group(0)
    chunk = max((group.column(i) for i in range(group.num_columns)), key=lambda c: c.total_compressed_size)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    data = bytearray(path.read_bytes())
    data[start + chunk.total_compressed_size - 1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_lost_or_cut_short_referenced_shard_is_named_and_passed_over(referencing):
    """A checkpoint whose replay buffer is read back from the run's shards lists them, with their sizes."""
    shard = referencing / "trajectories" / "shard-000002.parquet"
    manifest = json.loads((checkpoint.latest(referencing) / checkpoint.MANIFEST).read_text())
    assert manifest["references"] == {
        "trajectories/shard-000001.parquet": (referencing / "trajectories" / "shard-000001.parquet").stat().st_size,
        "trajectories/shard-000002.parquet": shard.stat().st_size,
    }
    assert checkpoint.newest_intact(referencing) == (referencing / "checkpoints" / "000002", [])

    truncate(shard)
    found, ((path, reason),) = checkpoint.newest_intact(referencing)
    assert found.name == "000001" and str(shard) in reason and "size differs" in reason
    shard.unlink()
    found, ((path, reason),) = checkpoint.newest_intact(referencing)
    assert found.name == "000001" and "missing" in reason


def test_a_referenced_shard_altered_in_place_is_found_by_its_digest(referencing):
    """One byte flipped, the size unchanged: the sha256 recorded when the checkpoint referenced the shard differs,
    and the resume falls back to the checkpoint that does not reference it, setting the shard aside."""
    shard = referencing / "trajectories" / "shard-000002.parquet"
    manifest = json.loads((checkpoint.latest(referencing) / checkpoint.MANIFEST).read_text())
    assert manifest[checkpoint.REFERENCE_DIGESTS]["trajectories/shard-000002.parquet"] == checkpoint.sha256(shard)
    flip_middle_byte(shard)
    found, lines = checkpoint.resume_point(referencing)
    assert found.name == "000001"
    (line,) = lines
    assert line.startswith("checkpoint 000002 is damaged and passed over: ") and str(shard) in line
    assert "sha256 differs" in line and line.endswith(f"resuming from {found}") and "\n" not in line
    # out of the run's shards, so that the resumed run does not read it when it indexes them
    assert "referenced it), moved to shard-000002.parquet.damaged; resuming" in line
    assert not shard.exists() and shard.with_name("shard-000002.parquet.damaged").is_file()


def test_manifests_that_record_only_shard_sizes_still_load_and_their_shards_pages_are_checked(referencing):
    newest = checkpoint.latest(referencing)
    manifest = json.loads((newest / checkpoint.MANIFEST).read_text())
    del manifest[checkpoint.REFERENCE_DIGESTS]  # written before digests of the shards were recorded
    (newest / checkpoint.MANIFEST).write_text(json.dumps(manifest))
    assert checkpoint.newest_intact(referencing) == (newest, [])
    shard = referencing / "trajectories" / "shard-000002.parquet"
    flip_a_byte_of_page_data(shard)  # the shard's page checksums still find it
    found, ((path, reason),) = checkpoint.newest_intact(referencing)
    assert found.name == "000001" and str(shard) in reason


def test_without_a_manifest_the_shards_state_json_names_are_checked(referencing):
    newest = checkpoint.latest(referencing)
    (newest / checkpoint.MANIFEST).unlink()
    assert checkpoint.newest_intact(referencing) == (newest, [])
    (referencing / "trajectories" / "shard-000002.parquet").unlink()
    found, ((path, reason),) = checkpoint.newest_intact(referencing)
    assert found.name == "000001" and "shard-000002.parquet: missing" in reason


def without_manifest(folder):
    (folder / checkpoint.MANIFEST).unlink()


def with_manifest(listing):
    def write(folder):
        manifest = json.loads((folder / checkpoint.MANIFEST).read_text())
        manifest["sha256"] = {k: v for k, v in manifest["sha256"].items() if k in listing}
        (folder / checkpoint.MANIFEST).write_text(json.dumps(manifest))

    return write


VOUCHING = {
    "no manifest": without_manifest,
    "an empty sha256 map": with_manifest(()),
    "a map of state.json only": with_manifest(("state.json",)),
}


@pytest.mark.parametrize("weights", ["policy/element_pointer.pt", "policy/model.safetensors"])
@pytest.mark.parametrize("manifest", VOUCHING)
def test_policy_weights_no_digest_vouches_for_are_checked(run, manifest, weights):
    newest = checkpoint.latest(run)
    VOUCHING[manifest](newest)
    assert checkpoint.newest_intact(run) == (newest, [])  # intact, the structural checks pass
    truncate(newest / weights)
    found, ((path, reason),) = checkpoint.newest_intact(run)
    assert found.name == "000002" and str(newest / weights) in reason


def test_a_manifest_that_is_not_a_mapping_of_digests_is_named(run):
    newest = checkpoint.latest(run)
    (newest / checkpoint.MANIFEST).write_text(json.dumps({"sha256": ["learner.pt"]}))
    found, ((path, reason),) = checkpoint.newest_intact(run)
    assert found.name == "000002" and str(newest / checkpoint.MANIFEST) in reason and "unreadable" in reason


def test_a_run_without_a_complete_checkpoint_has_no_resume_point(tmp_path):
    (tmp_path / "checkpoints" / ".tmp-000001-123").mkdir(parents=True)
    with pytest.raises(checkpoint.NoCheckpoint, match="no complete checkpoint"):
        checkpoint.resume_point(tmp_path)


@contextlib.contextmanager
def tmpfs(folder, size: str):
    """A real filesystem of `size` mounted at `folder` (root only; the test is skipped where mounting is not
    permitted)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def fill_disk(folder, leave: int = 0) -> None:
    """Fill the filesystem of `folder` with one file, leaving about `leave` bytes."""
    import shutil

    free = shutil.disk_usage(folder).free
    with open(folder / "ballast", "wb") as f:
        with contextlib.suppress(OSError):
            f.write(bytes(max(free - leave, 0)))


def test_a_full_disk_while_writing_a_checkpoint_leaves_nothing_behind(tmp_path):
    with tmpfs(tmp_path / "disk", "4m") as disk:
        checkpoint.write(disk, 1, fill, keep=3)
        fill_disk(disk, leave=16 * 1024)
        with pytest.raises(checkpoint.DiskFull) as failed:
            checkpoint.write(disk, 2, fill, keep=3)
        message = str(failed.value)
        root = disk / "checkpoints"
        assert message.startswith(f"no space left in {root} to write checkpoint 000002 (") and " KiB free)" in message
        assert message.endswith("checkpoint 000001 is intact") and "\n" not in message
        assert sorted(p.name for p in root.iterdir()) == ["000001"]  # no .tmp-000002-*
        assert checkpoint.newest_intact(disk) == (root / "000001", [])
