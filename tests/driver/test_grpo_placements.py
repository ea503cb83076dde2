"""GRPO where the runners do not hold the policy: a training run whose runners act through a shared inference server
(`policy.placement: server`). What the server recorded as each action's log-prob is what the learner's proximal
policy gives it at policy lag 0. The vLLM placement's counterpart, on a real engine, is in
tests/actors/test_vllm_engine.py."""

import pytest
import ray

from rlsys.data.shards import read_trajectories
from rlsys.driver.trainer import Trainer
from tests.actors.test_inference_server import SERVER
from tests.conftest import make_config
from tests.driver.test_grpo_run import GRPO_ON_SYNTHWEB


def test_a_grpo_run_through_an_inference_server_learns_from_whole_groups_at_behaviour_weight_one(ray_session, tmp_path):
    cfg = make_config(tmp_path, **GRPO_ON_SYNTHWEB, policy__placement="server", policy__server=SERVER)
    trainer = Trainer(cfg, cfg.output_dir)
    try:
        records = trainer.run()
        served = ray.get(trainer.pool.servers[0].stats.remote())
    finally:
        trainer.shutdown()
    steps = [s for t in read_trajectories(cfg.output_dir / "trajectories") for s in t.steps]
    assert served["server/requests"] == len(steps) > 0  # the server acted every step, the runners none
    assert all(s.logprob is not None for s in steps)
    for r in records:
        assert (r["grpo/groups"], r["grpo/skipped_small_groups"], r["grpo/ungrouped_trajectories"]) == (4, 0, 0)
        trained = r["actor/updates"] > 0
        assert trained == (r["grpo/uniform_groups"] < 4)
        if trained:
            assert r["train/policy_lag_max"] == 0 and r["actor/no_behaviour_logprob"] == 0
            assert r["actor/importance_weight"] == pytest.approx(1.0, abs=1e-4)
    trained = [r["actor/updates"] > 0 for r in records]
    assert any(trained) and records[-1]["policy_version"] == sum(trained)
