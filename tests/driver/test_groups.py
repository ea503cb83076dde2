"""Which finished training episodes go to the replay buffer, and when: rollout groups whole, once all arrived."""

from collections import Counter

import pytest

from rlsys.core.types import rollout_group
from rlsys.data.shards import read_trajectories
from rlsys.driver.groups import RolloutGroups
from tests.conftest import make_config
from tests.data.test_replay import group, ids
from tests.data.test_storage import trajectory
from tests.driver.test_train import run_trainer


def test_a_group_goes_whole_once_its_last_member_arrives():
    groups, counters = RolloutGroups("drop"), Counter()
    members, alone = group("0", [3, 3, 3]), trajectory(1, version=3, seed=50)
    assert ids(groups.settle([members[2], alone], None, counters)) == [alone.id]
    assert groups.settle(members[:1], None, counters) == []
    # in the order they arrived
    assert ids(groups.settle(members[1:2], None, counters)) == ids([members[2], members[0], members[1]])
    assert groups.take_counts() == {"train/groups": 1, "train/broken_groups": 0, "train/stale_groups": 0}
    assert groups.take_counts()["train/groups"] == 0  # counted once, for the record that took them


@pytest.mark.parametrize("policy", ["drop", "keep"])
def test_a_member_that_came_back_broken_counts_as_arrived(policy):
    groups = RolloutGroups(policy)
    members = group("0", [1, 1]) + group("0", [1], seed=9, outcome="env_error")
    for t in members:
        t.task.meta["group_size"] = 3
    settled = groups.settle(members, None, Counter())
    assert ids(settled) == (ids(members) if policy == "keep" else [])
    assert groups.take_counts() == {"train/groups": 1, "train/broken_groups": 1, "train/stale_groups": 0}


def test_one_stale_member_drops_the_group_whole():
    groups, counters = RolloutGroups("keep"), Counter()
    stale, fresh = group("0", [1, 2, 2]), group("1", [2, 2, 2], seed=10)
    assert ids(groups.settle(stale + fresh + [trajectory(1, version=1, seed=50)], 2, counters)) == ids(fresh)
    assert counters["dropped_stale"] == 4  # the group's three and the old episode of no group
    assert groups.take_counts() == {"train/groups": 2, "train/broken_groups": 0, "train/stale_groups": 1}


def test_a_sync_run_plays_whole_groups_and_learns_from_whole_groups(ray_session, tmp_path):
    cfg = make_config(
        tmp_path,
        env__kind="synthweb",
        tasks__suite="synthweb",
        tasks__synthweb={"num_tasks": 20, "max_depth": 2},
        runners__resource="browser",
        policy__kind="element_pointer",  # builds in a fraction of the tiny T5's time
        run__rollout_size=8,
        run__group_size=4,
        run__checkpoint_every=0,
        learner__algorithm="filtered_bc",
        learner__sample_trajectories=6,  # one whole group of 4 fits, two do not
    )
    records = run_trainer(cfg)
    assert [(r["train/groups"], r["train/broken_groups"]) for r in records] == [(2, 0), (2, 0)]
    # the learner got the newest whole group, through the buffer actor
    assert [r["learner/sampled_trajectories"] for r in records] == [4, 4]
    played: dict[str, list] = {}
    for traj in read_trajectories(cfg.output_dir / "trajectories"):
        played.setdefault(rollout_group(traj.task), []).append(traj)
    assert sorted(played) == ["0", "1", "2", "3"]
    for members in played.values():
        assert len(members) == 4 and len({(t.task.id, t.task.meta["seed"], t.task.start) for t in members}) == 1
