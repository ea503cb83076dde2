"""`policy.placement`: one table says what acts for a runner under each placement the config accepts."""

import typing

import torch

from rlsys.actors.placement import PLACEMENTS, runner_policy, start_acting_actors
from rlsys.config import PolicyConfig
from rlsys.policies import build_policy
from tests.conftest import make_config


def test_every_placement_the_config_accepts_says_what_acts_for_a_runner():
    accepted = typing.get_args(typing.get_type_hints(PolicyConfig)["placement"])
    assert set(PLACEMENTS) == set(accepted)


def test_placement_runner_starts_nothing_and_each_runner_builds_the_learners_model(tmp_path):
    cfg = make_config(tmp_path, policy__placement="runner", run__seed=7)
    assert start_acting_actors(cfg, weight_store=None, seed=3) == []
    replica, learner = runner_policy(cfg), build_policy(cfg.policy, seed=7)
    for (name, mine), (_, theirs) in zip(
        replica.model.state_dict().items(), learner.model.state_dict().items(), strict=True
    ):
        torch.testing.assert_close(mine, theirs, msg=name)
