"""Digi-Q end to end: candidates from a real policy, representations from a real (tiny) VLM, both
through `rlsys-digiq`, then the two-phase run through the real driver and Ray actors on a
synthetic dataset where one action is known to be better."""

import json

import numpy as np
import pytest
import yaml

from rlsys.cli.digiq import main as digiq_main
from rlsys.config import PolicyConfig, load_config
from rlsys.data import checkpoint
from rlsys.data.shards import ShardWriter, read_trajectories
from rlsys.driver.metrics import read_metrics
from rlsys.driver.trainer import Trainer
from rlsys.envs import action_validator
from rlsys.learners.digiq.candidates import sample_candidates
from rlsys.learners.digiq.representations import Z_KEY
from rlsys.policies import build_policy
from tests.support.digiq_data import ACTIONS, GOOD, P_SUCCESS, synthetic_dataset, tiny_learner

K = 5


def experiment(tmp, vlm_folder) -> dict:
    return {
        "run": {"name": "digiq", "training": "offline", "output_dir": str(tmp / "run"), "eval_every": 0},
        "ray": {"dashboard": False},
        "policy": {"d_model": 32, "d_ff": 64, "num_heads": 2},
        "offline": {"data": [str(tmp / "ready")]},
        "learner": tiny_learner(vlm_folder, K) | {"num_cpus": 0.25},
        "metrics": {"progress": False},
    }


def train(cfg) -> list[dict]:
    trainer = Trainer(cfg, cfg.output_dir)
    try:
        trainer.run()
    finally:
        trainer.shutdown()
    return read_metrics(cfg.output_dir)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The dataset after both preparation commands, and the config that trains on it."""
    tmp = tmp_path_factory.mktemp("digiq")
    raw = synthetic_dataset(48, seed=3)
    ShardWriter(tmp / "raw").write(raw)
    vlm = tmp / "change-vlm"
    vlm_cfg = PolicyConfig(kind="vlm", d_model=32, d_ff=64, num_heads=2, num_layers=2)
    build_policy(vlm_cfg, seed=0).save_pretrained(vlm)
    config_file = tmp / "digiq.yaml"
    config_file.write_text(yaml.safe_dump(experiment(tmp, vlm)))
    common = ["--config", str(config_file)]
    assert digiq_main(["candidates", "--data", str(tmp / "raw"), "--out", str(tmp / "cands"), *common]) == 0
    assert digiq_main(["represent", "--data", str(tmp / "cands"), "--out", str(tmp / "ready"), *common]) == 0
    return tmp, config_file, raw


def test_preparation_stores_candidates_and_representations(prepared):
    tmp, _, raw = prepared
    ready = read_trajectories(tmp / "ready")
    assert [t.id for t in ready] == [t.id for t in raw]
    for t, original in zip(ready, raw):
        for step, before in zip(t.steps, original.steps):
            candidates = step.info["digiq"]["candidates"]
            assert candidates[0] == before.action_text and len(candidates) == K
            assert set(candidates) <= set(ACTIONS)  # the grammar keeps every sample valid
            assert step.observation.features[Z_KEY].shape == (K, step.info["digiq"]["representation"]["dim"])
    summary = json.loads((tmp / "ready" / "digiq.json").read_text())
    assert summary["pairs"] == K * sum(len(t.steps) for t in raw) and summary["method"] == "answer_state"


def test_two_phase_run_extracts_a_policy_that_prefers_the_better_action(prepared, ray_session):
    tmp, config_file, raw = prepared
    cfg = load_config(config_file)
    records = train(cfg)
    assert [r["digiq/stage"] for r in records] == ["critic", "critic", "actor", "actor"]
    assert [r["policy_version"] for r in records] == [0, 0, 1, 2]  # only the actor phase publishes
    assert records[1]["critic/updates"] == 300 and records[3]["actor/updates"] == 40

    # the critic stage: its files, and every candidate's Q, V and advantage written with the trajectories
    assert sorted(p.name for p in (cfg.output_dir / "critic").iterdir()) == ["critic.json", "critic.safetensors"]
    scored = read_trajectories(cfg.output_dir / "scored")
    assert len(scored) == len(raw)
    good_adv, other_adv = [], []
    for t in scored:
        info = t.steps[1].info["digiq"]
        assert len(info["q"]) == len(info["advantage"]) == K
        for candidate, adv in zip(info["candidates"], info["advantage"]):
            (good_adv if candidate == GOOD else other_adv).append(adv)
    assert np.mean(good_adv) > np.mean(other_adv) + 0.2

    # the extracted policy picks the better action on the deciding screen
    final = checkpoint.latest(cfg.output_dir) / "policy"
    policy = build_policy(cfg.policy.__class__(**{**cfg.policy.__dict__, "path": str(final)}))
    deciding = [t.steps[1].observation for t in raw[:16]]
    chosen = [s.text for s in policy.act(deciding, greedy=True)]
    behaviour = np.mean([t.outcome == "success" for t in raw])
    extracted = np.mean([P_SUCCESS[a] for a in chosen])
    assert behaviour <= 0.35 and extracted >= 2 * behaviour, (behaviour, chosen)


def test_reusing_the_critic_stage_skips_the_critic_phase(prepared, ray_session, tmp_path):
    tmp, config_file, _ = prepared
    first = load_config(config_file).output_dir
    if not (first / "critic").is_dir():
        pytest.skip("needs the two-phase run's critic stage")
    cfg = load_config(
        config_file,
        [
            f"run.output_dir={tmp_path / 'reuse'}",
            f"learner.digiq.critic_path={first / 'critic'}",
            "learner.digiq.actor_iterations=1",
        ],
    )
    records = train(cfg)
    assert [r["digiq/stage"] for r in records] == ["actor"] and records[0]["actor/updates"] == 40


def test_invalid_samples_are_redrawn_a_bounded_number_of_times(prepared):
    _, config_file, raw = prepared
    cfg = load_config(config_file)
    observations = [t.steps[1].observation for t in raw[:3]]
    valid = action_validator(cfg.env)
    assert valid(observations[0], "click [3]") is None and "does not exist" in valid(observations[0], "click [7]")

    free = build_policy(PolicyConfig(d_model=32, d_ff=64, num_heads=2, constrained=False, max_new_tokens=6))
    lists, stats = sample_candidates(free, observations, ["click [1]"] * 3, k=4, valid=valid, max_redraws=2)
    # an untrained, unconstrained model writes no valid action: 3 slots x 3 draws each, then they stay empty
    assert lists == [["click [1]"]] * 3
    assert stats == {"samples": 27, "invalid": 27, "unfilled": 9}

    constrained = build_policy(PolicyConfig(d_model=32, d_ff=64, num_heads=2, temperature=1.2))
    lists, stats = sample_candidates(constrained, observations, ["click [1]"] * 3, k=4, valid=valid, max_redraws=2)
    assert all(len(c) == 4 and c[0] == "click [1]" for c in lists) and stats["invalid"] == stats["unfilled"] == 0
