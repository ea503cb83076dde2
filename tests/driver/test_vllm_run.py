"""A training run whose runners act through a vLLM engine: collect, update, publish the adapter, and the
engine serves the new version."""

import ray

from rlsys.data.shards import read_trajectories
from tests.actors.test_vllm_engine import vllm_config, vllm_python_or_skip


def test_training_through_vllm_serves_each_new_lora_version(ray_session, tmp_path):
    """collect → update → publish (the adapter alone) → the engine serves the new version, and the learner's
    importance weights, computed on the ids the engine sampled, start at 1."""
    vllm_python_or_skip()
    from rlsys.driver.trainer import Trainer

    cfg = vllm_config(
        tmp_path, run__iterations=2, run__rollout_size=4, runners__num=2, tasks__train=["click-test-2"],
        learner__filter="quantile", learner__off_policy_correction="on", learner__updates_per_iteration=2,
        policy__lora={"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0}, policy__publish="adapter",
    )  # fmt: skip
    trainer = Trainer(cfg, cfg.output_dir)
    try:
        records = trainer.run()
        engine = trainer.pool.servers[0]
        stats = ray.get(engine.stats.remote())
    finally:
        trainer.shutdown()
    assert [r["policy_version"] for r in records] == [1, 2]
    # version 2 came after the last episode: an engine loads weights when a request comes
    assert stats["policy_version"] == 1 and stats["vllm/weight_syncs"] == 2
    steps = [s for t in read_trajectories(cfg.output_dir / "trajectories") for s in t.steps]
    assert {s.policy_version for s in steps} == {0, 1}  # the second iteration acted with the first update
    assert all(s.token_ids for s in steps)
    # before its first update the learner is the policy that acted: pi/mu is 1 but for the kernels' rounding
    assert records[0]["actor/importance_weight"] > 0.97
