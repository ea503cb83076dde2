"""Offline and offline-to-online training through the real driver, Ray actors and MiniWoB++."""

import time

import pytest

from rlsys.config import ConfigError, check_paths
from rlsys.data import checkpoint
from rlsys.driver.metrics import read_metrics
from rlsys.driver.trainer import Trainer
from tests.conftest import SIMULATED_ENV, browsers_started_after, make_config

TINY_DIGIRL = {
    "text_hidden": 16,
    "max_text_tokens": 64,
    "image_feature_dim": 8,
    "image_size": 16,
    "instruction_critic_steps": 2,
    "step_critic_steps": 2,
    "actor_steps": 2,
    "offline_instruction_critic_iterations": 1,
    "offline_step_critic_iterations": 1,
    "offline_actor_iterations": 1,
}


def run(cfg, resume=False):
    trainer = Trainer(cfg, cfg.output_dir, resume=resume)
    try:
        trainer.run()
    finally:
        trainer.shutdown()
    return trainer


@pytest.fixture(scope="module")
def collected(ray_session, tmp_path_factory):
    """Offline data: the trajectories of a short online run."""
    tmp = tmp_path_factory.mktemp("collect")
    cfg = make_config(tmp, **SIMULATED_ENV, run__iterations=1, run__rollout_size=8)
    run(cfg)
    return cfg.output_dir / "trajectories"


def test_offline_training_starts_no_runner_and_counts_its_own_iterations(collected, tmp_path):
    t0 = time.time()
    cfg = make_config(
        tmp_path,
        run__training="offline",
        learner__offline_iterations=3,
        learner__filter="quantile",
        offline__data=[str(collected)],
    )
    trainer = run(cfg)
    assert trainer.pool is None and not browsers_started_after(t0)
    records = read_metrics(cfg.output_dir)
    assert [r["iteration"] for r in records] == [1, 2, 3]  # run.iterations (2) is the online phase's
    assert records[0]["replay/size"] >= 1 and records[0]["learner/sampled_trajectories"] >= 1


def test_off2on_digirl_completes_then_resumes_without_skipping_or_repeating(collected, tmp_path):
    off2on = {
        "run__training": "off2on",
        "learner__algorithm": "digirl",
        "learner__digirl": TINY_DIGIRL,
        "offline__data": [str(collected)],
        **SIMULATED_ENV,
    }
    cfg = make_config(tmp_path, run__iterations=1, **off2on)
    run(cfg)
    records = read_metrics(cfg.output_dir)
    assert [r["iteration"] for r in records] == [1, 2, 3, 4]
    assert [r["digirl/stage"] for r in records] == ["instruction_critic", "step_critic", "actor", "actor"]
    assert records[0]["instruction_critic/updates"] == 2 and "step_critic/updates" not in records[0]
    assert records[3]["instruction_critic/updates"] == records[3]["step_critic/updates"] == 2  # online: all three
    # the policy changes, and a new version is published, only when the actor trained
    actor_trained = [r.get("actor/updates", 0) > 0 for r in records]
    versions = [r["policy_version"] for r in records]
    assert versions == [sum(actor_trained[: i + 1]) for i in range(4)]
    assert records[3]["trajectories"] == cfg.run.rollout_size  # only the online iteration collected
    offline_size = records[0]["replay/size"]
    assert offline_size >= 1 and records[3]["replay/size"] > offline_size  # offline data stayed in the buffer

    more = make_config(tmp_path, run__iterations=2, **off2on)
    run(more, resume=True)
    records = read_metrics(cfg.output_dir)
    assert [r["iteration"] for r in records] == [1, 2, 3, 4, 5]
    assert records[4]["digirl/stage"] == "actor" and records[4]["replay/size"] >= records[3]["replay/size"]
    state = checkpoint.read_json(checkpoint.latest(cfg.output_dir) / "state.json")
    assert state["counters"]["offline_trajectories"] == offline_size  # loaded once, not again on resume


def test_off2on_offline_data_stays_in_the_history_beyond_capacity_and_is_never_stale(collected, tmp_path):
    cfg = make_config(
        tmp_path,
        **SIMULATED_ENV,
        run__training="off2on",
        run__iterations=1,
        run__max_policy_lag=0,
        replay__capacity=2,
        learner__algorithm="digirl",
        learner__digirl=TINY_DIGIRL,
        offline__data=[str(collected)],
    )
    run(cfg)
    records = read_metrics(cfg.output_dir)
    offline = checkpoint.read_json(checkpoint.latest(cfg.output_dir) / "state.json")["counters"]["offline_trajectories"]
    assert offline > 2 and records[0]["replay/size"] == 2  # more offline data than memory holds
    assert records[0]["replay/history"] == offline and records[0]["replay/dropped_stale"] == 0
    online = records[-1]["train/trajectories"] - records[-1]["train/env_errors"] - records[-1]["train/unknown"]
    assert records[-1]["replay/history"] == offline + online
    # the history beyond memory is what replay/history counts above; how many rows of it the instruction critic
    # fits at the first online update varies between runs (2 to 4 of the ~10 in its training share seen here)
    assert records[-1]["instruction_critic/trajectories"] >= 2


def test_missing_offline_data_and_model_paths_name_their_key(tmp_path):
    with pytest.raises(ConfigError, match="needs offline.data"):
        make_config(tmp_path, run__training="off2on", learner__algorithm="digirl")
    with pytest.raises(ConfigError, match="learner.offline_iterations >= 1"):
        make_config(tmp_path, run__training="offline", offline__data=[str(tmp_path)])
    cfg = make_config(tmp_path, run__training="off2on", learner__algorithm="digirl", offline__data=["nowhere"])
    with pytest.raises(ConfigError, match=r"offline.data\[0\]: nowhere does not exist"):
        check_paths(cfg)
    cfg = make_config(
        tmp_path, learner__algorithm="digirl", learner__digirl={"text_encoder_path": str(tmp_path / "roberta-base")}
    )
    with pytest.raises(ConfigError, match="learner.digirl.text_encoder_path: .*roberta-base does not exist"):
        check_paths(cfg)


def test_offline_digirl_trains_an_autoui_policy_on_imported_digirl_data(ray_session, tmp_path):
    """import-digirl -> shards -> the offline phase, with the cached BLIP-2 features as the only images."""
    from rlsys.cli.data import main as data_main
    from tests.data.test_data_import import digirl_data, save

    (tmp_path / "shots").mkdir()
    pickle_file = save(digirl_data(tmp_path / "shots") * 4, tmp_path / "general-offline.pt")
    assert data_main(["import-digirl", str(pickle_file), str(tmp_path / "shards"), "--trust-pickle"]) == 0
    t0 = time.time()
    cfg = make_config(
        tmp_path,
        run__training="offline",
        env__action_space="coords",
        policy__kind="autoui",
        policy__constrained=False,
        policy__max_new_tokens=8,
        learner__algorithm="digirl",
        learner__prob_clamp=True,
        learner__digirl={**TINY_DIGIRL, "image_feature_dim": 1408, "validation_fraction": 0.25, "lam": 1.0},
        offline__data=[str(tmp_path / "shards")],
    )
    trainer = run(cfg)
    assert trainer.pool is None and not browsers_started_after(t0)
    records = read_metrics(cfg.output_dir)
    assert [r["digirl/stage"] for r in records] == ["instruction_critic", "step_critic", "actor"]
    assert records[0]["replay/size"] == 12
    # lam = 1 keeps every step of the successes in the train split: 2 of 3 episodes succeed, 4 steps of 6
    actor = records[2]
    assert actor["actor/updates"] == 2 and actor["digirl/actor_transitions"] > 0 and actor["policy_version"] == 1
    assert "instruction_critic/validation_loss" in records[0] and "step_critic/validation_accuracy" in records[1]
