"""GRPO in whole training runs on the synthetic web suite: rollout groups of 4, played from one start, reach the
learner whole, and what the runners recorded as each action's log-prob is what the learner's proximal policy
gives it at policy lag 0 (a behaviour weight of 1)."""

import pytest

from tests.conftest import make_config
from tests.driver.test_train import run_trainer

GRPO_ON_SYNTHWEB = dict(
    env__kind="synthweb",
    tasks__suite="synthweb",
    # shallow pages with few links: an untrained policy solves some episodes of a group and fails others
    tasks__synthweb={"num_tasks": 20, "max_depth": 2, "max_distractors": 2, "impossible": 0.0},
    runners__resource="browser",
    policy__kind="learned_pointer",
    learner__algorithm="grpo",
    run__group_size=4,
    run__rollout_size=16,  # four groups an iteration: that no group of the run has differing rewards is unlikely
    run__iterations=3,
    run__checkpoint_every=0,
    learner__sample_trajectories=16,
)


def test_a_sync_grpo_run_learns_from_whole_groups_at_behaviour_weight_one(ray_session, tmp_path):
    records = run_trainer(make_config(tmp_path, **GRPO_ON_SYNTHWEB))
    assert [r["iteration"] for r in records] == [1, 2, 3]
    for r in records:
        assert (r["grpo/groups"], r["grpo/skipped_small_groups"], r["grpo/ungrouped_trajectories"]) == (4, 0, 0)
        trained = r["actor/updates"] > 0
        assert trained == (r["grpo/uniform_groups"] < 4)  # a step whenever a group's rewards differ
        if trained:
            assert r["train/policy_lag_max"] == 0 and r["actor/no_behaviour_logprob"] == 0
            assert r["actor/importance_weight"] == pytest.approx(1.0, abs=1e-4)
    trained = [r["actor/updates"] > 0 for r in records]
    assert any(trained) and records[-1]["policy_version"] == sum(trained)


def test_an_async_grpo_run_learns_from_whole_groups(ray_session, tmp_path):
    records = run_trainer(make_config(tmp_path, **GRPO_ON_SYNTHWEB, run__mode="async"))
    assert [r["iteration"] for r in records] == [1, 2, 3]
    for r in records:
        assert r["grpo/skipped_small_groups"] == 0 and r["grpo/ungrouped_trajectories"] == 0
        if r["actor/updates"]:
            assert 0 < r["actor/importance_weight"] <= 1.0 and r["actor/no_behaviour_logprob"] == 0
    trained = [r["actor/updates"] > 0 for r in records]
    assert [r["policy_version"] for r in records] == [sum(trained[: i + 1]) for i in range(3)]
