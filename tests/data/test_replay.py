import pytest
import ray

from rlsys.actors.replay import ReplayBufferActor
from rlsys.data.replay import ReplayBuffer
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
    assert again.stats() == buf.stats()
    assert [t.id for t in again.sample(2)] == [t.id for t in buf.sample(2)]


def test_bad_bounds_are_rejected():
    with pytest.raises(ValueError):
        ReplayBuffer(capacity=0, max_bytes=10)
