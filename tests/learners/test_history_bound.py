"""What one update reads back whole from the run's history is bounded (`learner.max_history_fetch`), whatever
the history's length: the learner holds at most that many trajectories beside the sample."""

from __future__ import annotations

import pytest

from rlsys.config import PolicyConfig
from rlsys.config.errors import ConfigError
from rlsys.config.loader import load_config
from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.data.replay import ReplayBuffer
from rlsys.learners.filtered_bc import FilteredBC
from rlsys.policies import build_policy


def success(i: int) -> Trajectory:
    step = Step(Observation(b"", "", "", f"task {i % 7}"), "click [1]", None, 1.0, True, 0, -1.0)
    return Trajectory(Task(f"t{i % 7}", f"task {i % 7}", "test"), [step], "success", id=f"x{i}")


class CountingHistory:
    """The buffer's history, counting the whole trajectories an update reads back."""

    def __init__(self, buffer: ReplayBuffer):
        self.buffer = buffer
        self.fetched = 0

    def summaries(self):
        return self.buffer.summaries()

    def fetch(self, ids):
        self.fetched += len(ids)
        return self.buffer.fetch(ids)


def test_the_digirl_recipes_update_reads_back_at_most_the_cap(tmp_path):
    """filteredbc_online.yaml takes DigiRL's recipe: with every trajectory of a history longer than the cap kept
    by the reward quantile, one update reads back the cap, not the history."""
    cfg = load_config("filteredbc_online", ["learner.updates_per_iteration=1"])
    cap = cfg.learner.max_history_fetch
    buffer = ReplayBuffer(capacity=cfg.replay.capacity, max_bytes=1 << 30, history_dir=str(tmp_path / "replay"))
    for start in range(0, cap + 100, 500):
        buffer.add([success(i) for i in range(start, min(start + 500, cap + 100))])
    history = CountingHistory(buffer)
    algo = FilteredBC(cfg.learner, build_policy(PolicyConfig(d_model=32, d_ff=64, num_heads=2), seed=0))
    assert algo.ranks_history
    metrics = algo.update(buffer.sample(cfg.learner.sample_trajectories), history=history)
    assert history.fetched == metrics["learner/selected_trajectories"] == cap


@pytest.mark.parametrize("name", ["digirl_online", "filteredbc_online"])
def test_a_config_that_reads_back_more_than_the_cap_is_refused(name):
    with pytest.raises(ConfigError, match=r"learner\.sample_trajectories.*learner\.max_history_fetch"):
        load_config(name, ["learner.sample_trajectories=100000"])


def test_ranking_only_the_sample_is_bounded_by_the_buffer_not_the_cap():
    cfg = load_config("digirl_online", ["learner.sample_trajectories=100000", "learner.rank_history=false"])
    assert cfg.learner.sample_trajectories == 100000
