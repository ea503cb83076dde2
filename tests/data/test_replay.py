import numpy as np
import pyarrow.parquet as pq
import pytest
import ray

from rlsys.actors.replay import ReplayBufferActor
from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.data.replay import UNSHARDED, ReplayBuffer
from rlsys.data.shards import read_shard, to_table, write_shard
from tests.data.test_storage import trajectory


def test_buffer_actor_evicts_oldest_by_bytes(ray_session):
    one = trajectory(2, seed=0).nbytes()
    buf = ReplayBufferActor.remote(capacity=100, max_bytes=int(one * 3.5), seed=0)
    trajs = [trajectory(2, seed=i) for i in range(6)]
    for t in trajs:
        ray.get(buf.add.remote([t]))
    stats = ray.get(buf.stats.remote())
    assert stats["size"] == 3 and stats["evicted"] == 3 and stats["bytes"] <= one * 3.5
    kept = {t.id for t in ray.get(buf.all.remote())}
    assert kept == {t.id for t in trajs[3:]}  # FIFO: the newest stay


def test_buffer_bounded_by_count_and_rejects_untrainable():
    buf = ReplayBuffer(capacity=2, max_bytes=1 << 30)
    buf.add([trajectory(1, seed=i) for i in range(3)] + [trajectory(1, "env_error", seed=9), trajectory(0, "unknown")])
    assert len(buf) == 2 and buf.stats()["rejected_untrainable"] == 2 and buf.evicted == 1


def test_sample_is_uniform_distinct_and_drops_stale():
    buf = ReplayBuffer(capacity=100, max_bytes=1 << 30, seed=1)
    buf.add([trajectory(1, version=v, seed=v) for v in range(10)])
    sample = buf.sample(5)
    assert len({t.id for t in sample}) == 5
    fresh = buf.sample(100, min_version=7)
    assert sorted(t.policy_version for t in fresh) == [7, 8, 9]
    assert buf.stats()["dropped_stale"] == 7


def test_save_and_load_restore_contents_counters_and_rng(tmp_path):
    buf = ReplayBuffer(capacity=3, max_bytes=1 << 30, seed=3)
    buf.add([trajectory(2, seed=i) for i in range(5)])
    state = buf.save(str(tmp_path))
    again = ReplayBuffer(capacity=3, max_bytes=1 << 30, seed=99)
    again.load(str(tmp_path), state)
    assert [t.id for t in again.all()] == [t.id for t in buf.all()]
    restored, saved = again.stats(), buf.stats()
    # bytes are measured, not restored: objects read back share less than the ones collected did
    assert restored.pop("bytes") == sum(t.nbytes() for t in again.all()) and saved.pop("bytes") > 0
    assert restored == saved
    assert [t.id for t in again.sample(2)] == [t.id for t in buf.sample(2)]


def test_bad_bounds_are_rejected():
    with pytest.raises(ValueError):
        ReplayBuffer(capacity=0, max_bytes=10)


def test_history_keeps_what_memory_evicts_and_gives_it_back_whole(tmp_path):
    buf = ReplayBuffer(capacity=3, max_bytes=1 << 30, history_dir=str(tmp_path / "replay"))
    trajs = [trajectory(2, "success" if i % 3 else "failure", version=i, seed=i) for i in range(10)]
    for start in range(0, 10, 4):
        buf.add(trajs[start : start + 4])
    assert len(buf) == 3 and buf.stats()["history"] == 10 and buf.stats()["spilled"] == 7
    rows = buf.summaries()
    assert rows.ids == [t.id for t in trajs]
    assert list(rows.rewards) == [t.reward for t in trajs] and list(rows.versions) == list(range(10))
    assert {rows.instructions[i] for i in rows.instruction_index} == {"Click button ONE."}
    back = buf.fetch([trajs[8].id, trajs[0].id, trajs[5].id])  # memory, the first spill shard, the second
    assert [t.id for t in back] == [trajs[8].id, trajs[0].id, trajs[5].id]
    assert [s.observation.screenshot_png for s in back[1].steps] == [
        s.observation.screenshot_png for s in trajs[0].steps
    ]
    assert back[1].final_observation.features["f"].tolist() == [1.0, 1.0, 1.0]
    assert rows.take([0, 5]).ids == [trajs[0].id, trajs[5].id]


def test_history_without_a_folder_forgets_what_memory_evicts():
    buf = ReplayBuffer(capacity=2, max_bytes=1 << 30)
    trajs = [trajectory(1, seed=i) for i in range(4)]
    buf.add(trajs)
    assert buf.summaries().ids == [t.id for t in trajs[2:]]
    with pytest.raises(KeyError):
        buf.fetch([trajs[0].id])


def test_history_resumes_from_a_checkpoint_and_later_spills_do_not_leak_in(tmp_path):
    folder = tmp_path / "replay"
    buf = ReplayBuffer(capacity=2, max_bytes=1 << 30, history_dir=str(folder))
    first = [trajectory(1, seed=i) for i in range(5)]
    buf.add(first)
    state = buf.save(str(tmp_path))
    buf.add([trajectory(1, seed=50 + i) for i in range(3)])  # spills again after the checkpoint, then "crash"
    again = ReplayBuffer(capacity=2, max_bytes=1 << 30, history_dir=str(folder))
    again.load(str(tmp_path), state)
    assert again.summaries().ids == [t.id for t in first]
    assert [t.id for t in again.fetch([first[0].id, first[4].id])] == [first[0].id, first[4].id]
    later = [trajectory(1, seed=80 + i) for i in range(2)]
    again.add(later)  # overwrites the spill shard written after the checkpoint
    assert again.summaries().ids == [t.id for t in first + later]
    assert [t.id for t in again.fetch([first[3].id])] == [first[3].id]


def test_offline_data_is_never_stale():
    buf = ReplayBuffer(capacity=100, max_bytes=1 << 30, seed=1)
    offline = [trajectory(2, version=-1, seed=100 + i) for i in range(4)]
    buf.add(offline + [trajectory(1, version=v, seed=v) for v in range(6)])
    kept = buf.sample(100, min_version=4)
    assert sorted(t.policy_version for t in kept) == [-1, -1, -1, -1, 4, 5]
    assert buf.stats()["dropped_stale"] == 4
    assert sorted(buf.summaries(min_version=4).versions.tolist()) == [-1, -1, -1, -1, 4, 5]


def group(name: str, versions: list[int], seed: int = 0, outcome: str = "success") -> list[Trajectory]:
    """A rollout group: one trajectory per version listed, all of the task copy that names group `name`."""
    members = [trajectory(1, outcome, version=v, seed=seed + i) for i, v in enumerate(versions)]
    for t in members:
        t.task.meta.update(rollout_group=name, group_size=len(versions))
    return members


def ids(trajectories: list[Trajectory]) -> list[str]:
    return [t.id for t in trajectories]


def test_the_newest_groups_are_sampled_whole():
    buf = ReplayBuffer(capacity=100, max_bytes=1 << 30)
    offline = [trajectory(1, version=-1, seed=90 + i) for i in range(2)]  # no group: each a group of its own
    old, middle, kept_broken = group("0", [0] * 4), group("1", [0] * 4, seed=10), group("2", [1] * 3, seed=20)
    for trajectories in (offline, old, middle, kept_broken):
        buf.add(trajectories)
    # newest first while whole groups fit: the 3 of group 2 and the 4 of group 1 (group 0 would make 11)
    assert ids(buf.sample(8, whole_groups=True)) == ids(middle + kept_broken)
    assert ids(buf.sample(3, whole_groups=True)) == ids(kept_broken) and buf.sample(2, whole_groups=True) == []
    assert ids(buf.sample(100, whole_groups=True)) == ids(offline + old + middle + kept_broken)
    assert len(buf.sample(8)) == 8  # a uniform draw cuts groups


def test_groups_leave_whole_when_evicted_or_stale():
    buf = ReplayBuffer(capacity=10, max_bytes=1 << 30)
    first, second, third = group("0", [0] * 4), group("1", [0, 1, 1, 1], seed=10), group("2", [1] * 4, seed=20)
    buf.add(first)
    buf.add(second)
    buf.add(third)  # 12 stored for a capacity of 10: the oldest group goes whole
    assert ids(buf.all()) == ids(second + third) and buf.evicted == 4
    # one member of group 1 is older than version 1: the whole group is stale
    assert ids(buf.sample(100, min_version=1, whole_groups=True)) == ids(third)
    assert buf.stats()["dropped_stale"] == 4 and buf.summaries(min_version=1).ids == ids(third)


def web_like_trajectory(seed: int, steps: int = 5, elements: int = 40) -> Trajectory:
    """Shaped like a web episode: PNG bytes, an element list, ui text, action history and infos."""
    rng = np.random.default_rng(seed)
    task = Task(id=f"t{seed}", instruction=f"Select item {seed} and submit", suite="miniwob", start="click-option")
    out = []
    for i in range(steps):
        listed = [
            {"tag": "button", "text": f"Item {seed}-{i}-{k}", "box": [k * 10, 20, k * 10 + 40, 40], "role": "button"}
            for k in range(elements)
        ]
        ui_text = "\n".join(f'[{k}]: <button> "{e["text"]}";' for k, e in enumerate(listed))
        extras = {"elements": listed, "history": [f"Click [{j}]" for j in range(i)], "feedback": "", "settled": True}
        obs = Observation(rng.bytes(20_000), ui_text, "http://127.0.0.1/page", task.instruction, extras)
        out.append(Step(obs, f"Click [{i}]", {"kind": "click", "index": i}, 0.0, False, 0, -0.5, {"env_s": 0.1}))
    return Trajectory(task, out, "failure")


def test_nbytes_counts_what_a_trajectory_holds_in_memory():
    """replay.max_bytes bounds what the buffer really holds: element lists, infos and Python's object
    overheads count, not only the screenshots (those alone undercount a web episode several times)."""
    import tracemalloc

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    held = [web_like_trajectory(seed) for seed in range(20)]
    allocated = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    counted = sum(t.nbytes() for t in held)
    assert 0.8 * allocated <= counted <= 1.25 * allocated, (counted, allocated)


def test_a_huge_instruction_counts():
    traj = trajectory(1, seed=0)
    small = traj.nbytes()
    traj.task.instruction = "x" * 5_000_000
    assert traj.nbytes() >= small + 5_000_000


def test_a_checkpoint_references_the_shards_instead_of_copying_and_restores_the_same_buffer(tmp_path):
    """run.checkpoint_replay: reference. The checkpoint holds trajectory ids and shard names, not screenshots;
    resume reads them back from the run's shards and the offline data, in order, with the same RNG."""
    from rlsys.data.shards import ShardWriter

    run, offline = tmp_path / "run", tmp_path / "offline.parquet"
    offline_data = [trajectory(3, version=-1, seed=100 + i) for i in range(2)]
    write_shard(offline, offline_data)
    writer = ShardWriter(run / "trajectories")
    buf = ReplayBuffer(capacity=6, max_bytes=1 << 30, seed=3, history_dir=str(run / "replay"))
    buf.add(offline_data)
    for it in range(3):
        batch = [trajectory(3, version=it, seed=10 * it + i) for i in range(3)]
        buf.add(batch)
        writer.write(batch, it + 1)
    late = trajectory(2, seed=99)  # in the buffer, not yet in a shard (arrived after the iteration's was written)
    buf.add([late])
    sources = [str(run / "trajectories"), str(offline)]

    folder = run / "checkpoints" / "000003"
    folder.mkdir(parents=True)
    state = buf.save(str(folder), sources, str(run))
    assert state["contents"] == "reference"
    assert state["shards"] == {
        f"trajectories/shard-00000{i}.parquet": (run / "trajectories" / f"shard-00000{i}.parquet").stat().st_size
        for i in (1, 2)
    }  # fmt: skip - the oldest shard was evicted whole
    listed = pq.read_table(folder / "replay.parquet")
    assert listed.column_names == ["trajectory_id", "shard"]  # no screenshots, no steps
    assert listed["trajectory_id"].to_pylist() == [t.id for t in buf.all()]
    assert [t.id for t in read_shard(folder / UNSHARDED)] == [late.id]
    copy = tmp_path / "copy"
    copy.mkdir()
    buf.save(str(copy))  # run.checkpoint_replay: copy
    assert (folder / "replay.parquet").stat().st_size * 5 < (copy / "replay.parquet").stat().st_size

    again = ReplayBuffer(capacity=6, max_bytes=1 << 30, seed=99, history_dir=str(run / "replay"))
    again.load(str(folder), state)
    assert to_table(again.all()).equals(to_table(buf.all()))  # every field of every trajectory, in the same order
    restored, saved = again.stats(), buf.stats()
    assert restored.pop("bytes") == sum(t.nbytes() for t in again.all()) and saved.pop("bytes") > 0  # measured
    assert restored == saved and len(again.summaries()) == len(buf.summaries())
    assert [t.id for t in again.sample(3)] == [t.id for t in buf.sample(3)]
    assert to_table(again.fetch([offline_data[0].id])).equals(to_table(offline_data[:1]))  # from its spill shard


def test_a_referenced_shard_that_lost_a_trajectory_is_named(tmp_path):
    from rlsys.data.shards import ShardWriter, StorageError

    run = tmp_path / "run"
    batch = [trajectory(2, seed=i) for i in range(2)]
    shard = ShardWriter(run / "trajectories").write(batch, 1)
    buf = ReplayBuffer(capacity=6, max_bytes=1 << 30)
    buf.add(batch)
    folder = run / "checkpoints" / "000001"
    folder.mkdir(parents=True)
    state = buf.save(str(folder), [str(run / "trajectories")], str(run))
    write_shard(shard, batch[:1])  # the shard no longer holds the second one
    with pytest.raises(StorageError, match=f"{shard}.*{batch[1].id}"):
        ReplayBuffer(capacity=6, max_bytes=1 << 30).load(str(folder), state)


def test_a_damaged_shard_is_passed_over_and_its_trajectories_kept_in_the_checkpoint(tmp_path, caplog):
    """A shard the run wrote after its last checkpoint, damaged meanwhile, must not stop the next checkpoint: what
    the buffer holds of it is saved with the checkpoint itself, and the shard is named in a warning."""
    from rlsys.data.shards import ShardWriter

    run = tmp_path / "run"
    writer = ShardWriter(run / "trajectories")
    kept, lost = [trajectory(2, seed=i) for i in range(2)], [trajectory(2, seed=10 + i) for i in range(2)]
    writer.write(kept, 1)
    damaged = writer.write(lost, 2)
    damaged.write_bytes(damaged.read_bytes()[:-100])  # its footer cut off, as by a torn copy
    buf = ReplayBuffer(capacity=6, max_bytes=1 << 30)
    buf.add(kept + lost)
    folder = run / "checkpoints" / "000002"
    folder.mkdir(parents=True)
    state = buf.save(str(folder), [str(run / "trajectories")], str(run))
    assert list(state["shards"]) == ["trajectories/shard-000000.parquet"]
    assert [t.id for t in read_shard(folder / UNSHARDED)] == [t.id for t in lost]
    assert f"{damaged}" in caplog.text and "passed over" in caplog.text
    again = ReplayBuffer(capacity=6, max_bytes=1 << 30)
    again.load(str(folder), state)
    assert to_table(again.all()).equals(to_table(buf.all()))
