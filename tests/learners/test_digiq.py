"""Digi-Q's critic and Best-of-N actor against hand computation, and its schedule."""

import numpy as np
import pytest
import torch

from rlsys.config import ConfigError, check_paths, load_config
from rlsys.learners.digiq.algorithm import DigiQ
from rlsys.learners.digiq.inputs import step_refs
from rlsys.learners.digiq.representations import Z_KEY, RepresentationMismatch
from rlsys.learners.registry import offline_phase_length
from rlsys.policies import build_policy
from tests.support.digiq_data import ACTIONS, GOOD, synthetic_dataset, with_candidates

MODEL = "tiny-change-vlm@0123456789abcdef"
Z_DIM = 8
TINY_DIGIQ = {
    "text_hidden": 16,
    "max_text_tokens": 32,
    "image_feature_dim": 8,
    "image_size": 16,
    "critic_hidden": 16,
    "critic_steps": 1,
    "actor_steps": 1,
    "critic_iterations": 2,
    "actor_iterations": 1,
    "validation_fraction": 0.0,
    "representation": {"model": MODEL},
}


def config(tmp_path, **digiq):
    data = {
        "run": {"training": "offline", "output_dir": str(tmp_path / "run")},
        "offline": {"data": ["unused"]},
        "policy": {"d_model": 32, "d_ff": 64, "num_heads": 2},
        "learner": {"algorithm": "digiq", "batch_size": 8, "digiq": TINY_DIGIQ | digiq},
    }
    return load_config(None, data=data)


def with_z(trajectories, model=MODEL, method="answer_state", seed=0):
    """Representations as `rlsys-digiq represent` stores them (seeded vectors stand in for a VLM's)."""
    rng = np.random.default_rng(seed)
    record = {"model": model, "method": method, "dim": Z_DIM}
    for t in trajectories:
        for step in t.steps:
            k = len(step.info["digiq"]["candidates"])
            step.observation.features[Z_KEY] = rng.normal(size=(k, Z_DIM)).astype(np.float16)
            step.info["digiq"]["representation"] = record
    return trajectories


def dataset(episodes=4, k=4, **kw):
    return with_z(with_candidates(synthetic_dataset(episodes), k), **kw)


def algorithm(tmp_path, **digiq) -> DigiQ:
    cfg = config(tmp_path, **digiq)
    return DigiQ(cfg.learner, build_policy(cfg.policy), seed=0)


def set_constant(head: torch.nn.Sequential, value: float) -> None:
    """Make a head output `value` whatever its input: zero last-layer weights, bias `value`."""
    last = head[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.fill_(value)


def test_targets_start_as_copies_of_the_online_heads(tmp_path):
    algo = algorithm(tmp_path)
    algo._build(dataset())
    online, target = algo.critic.online.state_dict(), algo.critic.target.state_dict()
    assert online.keys() == target.keys()
    assert all(torch.equal(online[k], target[k]) for k in online)
    assert all(not p.requires_grad for p in algo.critic.target.parameters())


def test_td_loss_matches_hand_computation(tmp_path):
    algo = algorithm(tmp_path, gamma=0.95)
    data = dataset()
    data[1].final_observation = None  # its last step is done anyway; bootstrapping is masked by d
    data[2].steps[1].done = False  # a timeout-like last step without s': nothing to bootstrap from
    data[2].final_observation = None
    algo._build(data)
    online = {"q1": 0.3, "q2": 0.5, "v1": 0.2, "v2": 0.4}
    target = {"q1": 0.7, "q2": 0.6, "v1": 0.8, "v2": -0.2}
    for name in online:
        set_constant(algo.critic.online[name], online[name])
        set_constant(algo.critic.target[name], target[name])
    refs = step_refs(data)
    expected = 0.0
    for j in ("1", "2"):
        q_errors, v_errors = [], []
        for ref in refs:
            live = ref.index == 0  # only first steps are not done and have a next state here
            y_q = ref.step.reward + 0.95 * live * target["v" + j]
            q_errors.append((online["q" + j] - y_q) ** 2)
            v_errors.append((online["v" + j] - target["q" + j]) ** 2)
        expected += np.mean(q_errors) + np.mean(v_errors)
    assert [r.bootstraps() for r in refs] == [True, False] * len(data)
    algo.critic.eval()
    assert algo.critic_loss(refs).item() == pytest.approx(expected, rel=1e-5)


def test_polyak_update_after_each_critic_step(tmp_path):
    algo = algorithm(tmp_path, tau=0.1, critic_lr=1e-2)
    data = dataset()
    algo._build(data)
    before_online = {k: v.clone() for k, v in algo.critic.online.state_dict().items()}
    before_target = {k: v.clone() for k, v in algo.critic.target.state_dict().items()}
    metrics = algo.update(data, offline_iteration=0)
    assert metrics["digiq/stage"] == "critic" and metrics["critic/updates"] == 1
    after_online, after_target = algo.critic.online.state_dict(), algo.critic.target.state_dict()
    moved = [k for k in before_online if not torch.equal(before_online[k], after_online[k])]
    assert moved, "the online heads did not train"
    for k in before_online:
        hand = 0.9 * before_target[k] + 0.1 * after_online[k]
        assert torch.allclose(after_target[k], hand, atol=1e-7), k


def refs_with_scores(algo, q_rows, v):
    data = dataset(episodes=1, k=len(q_rows[0]))
    algo._build(data)
    ref = step_refs(data)[1]
    ref.step.info["digiq"]["candidates"] = list(ACTIONS[: len(q_rows[0])])  # distinct, to tell them apart
    return [(ref, np.array(q, dtype=np.float32), v) for q in q_rows]


def test_best_of_n_takes_the_hand_computed_argmax_and_respects_the_threshold(tmp_path):
    algo = algorithm(tmp_path, best_of_n=4, advantage_threshold=0.1)
    (item,) = refs_with_scores(algo, [[0.2, 0.9, 0.4, 0.1]], 0.3)
    (chosen,) = algo.best_of_n([item])
    ref = item[0]
    assert chosen.action == ref.candidates[1] and chosen.weight == 1.0
    assert chosen.observation is ref.step.observation and chosen.behaviour_logprob is None
    # best advantage 0.08 is not above the threshold 0.1: nothing to imitate
    (below,) = refs_with_scores(algo, [[0.2, 0.38, 0.3, 0.1]], 0.3)
    assert algo.best_of_n([below]) == []


@pytest.mark.parametrize(
    ("weighting", "advantage", "weight"),
    [("pg", 0.6, 0.6 * 2.0), ("pg", 3.0, 1.0 * 2.0), ("awr", 0.6, np.exp(0.6 / 0.5))],
)
def test_weightings_use_the_clipped_best_advantage(tmp_path, weighting, advantage, weight):
    algo = algorithm(tmp_path, best_of_n=3, weighting=weighting, pg_scale=2.0, awr_beta=0.5)
    (item,) = refs_with_scores(algo, [[0.0, advantage, 0.1]], 0.0)
    (chosen,) = algo.best_of_n([item])
    assert chosen.weight == pytest.approx(weight)


def test_candidates_are_drawn_afresh_for_every_sample(tmp_path):
    """With N = 1 of K = 4, the chosen candidate is whichever was drawn: one index set per batch would give
    every copy of the state the same one."""
    algo = algorithm(tmp_path, best_of_n=1, advantage_threshold=0.0)
    items = refs_with_scores(algo, [[0.5, 0.6, 0.7, 0.8]] * 200, 0.0)
    ref = items[0][0]
    picked = [ref.candidates.index(s.action) for s in algo.best_of_n(items)]
    counts = np.bincount(picked, minlength=4)
    assert len(picked) == 200 and counts.min() > 20


def test_actor_phase_imitates_the_better_candidate(tmp_path):
    """Scores set by hand: the GOOD candidate of the second step has the highest Q."""
    algo = algorithm(tmp_path, best_of_n=4, advantage_threshold=0.05)
    data = dataset(episodes=8)
    for t in data:
        for s in t.steps:
            s.policy_version = -1  # imported, as Digi-Q's data is
    algo._build(data)
    good = {(r.traj.id, r.index): [c == GOOD for c in r.candidates] for r in step_refs(data)}
    algo.score = lambda refs: [(np.where(good[r.key], 0.9, 0.2).astype(np.float32), 0.3) for r in refs]
    metrics = algo.update(data, offline_iteration=2)  # after the two critic iterations
    assert metrics["digiq/stage"] == "actor" and metrics["actor/updates"] == 1
    with_good = sum(any(v) for v in good.values())
    assert metrics["digiq/promising_states"] == with_good
    # no lag: the trajectories of the states the actor trained on are counted as offline data
    assert metrics["train/policy_lag"] is None
    assert metrics["train/offline_in_sample"] == len({r.traj.id for r in step_refs(data) if any(good[r.key])})


def test_a_dataset_from_another_model_or_method_is_refused(tmp_path):
    algo = algorithm(tmp_path)
    with pytest.raises(RepresentationMismatch, match="learner.digiq.representation.model"):
        algo.update(dataset(model="some-other-vlm@fedcba9876543210"), offline_iteration=0)
    with pytest.raises(RepresentationMismatch, match="learner.digiq.representation.method"):
        algo.update(dataset(method="generated_mean"), offline_iteration=0)


def test_critic_stage_files_reload_to_the_same_scores(tmp_path):
    algo = algorithm(tmp_path, critic_lr=1e-2)
    data = dataset()
    algo.update(data, offline_iteration=0)
    folder = tmp_path / "critic"
    folder.mkdir()
    for name, blob in algo.critic_files().items():
        (folder / name).write_bytes(blob)
    reused = algorithm(tmp_path, critic_path=str(folder), critic_lr=1e-2)
    assert reused.stage(0) == "actor"  # the critic phase is skipped
    refs = step_refs(data)
    for (q1, v1), (q2, v2) in zip(algo.score(refs), reused.score(step_refs(data))):
        np.testing.assert_allclose(q1, q2, atol=1e-6)
        assert v1 == pytest.approx(v2, abs=1e-6)
    annotations = algo.annotations(data)
    first = annotations[data[0].id][1]
    assert len(first["q"]) == len(first["advantage"]) == 4
    assert first["advantage"][first["best"]] == pytest.approx(max(first["advantage"]))
    with pytest.raises(RepresentationMismatch, match="critic_path"):
        cfg = config(tmp_path, critic_path=str(folder), representation={"model": "another@1"})
        DigiQ(cfg.learner, build_policy(cfg.policy))


def test_checkpoint_state_round_trips(tmp_path):
    algo = algorithm(tmp_path, critic_lr=1e-2)
    data = dataset()
    algo.update(data, offline_iteration=0)
    restored = algorithm(tmp_path, critic_lr=1e-2)
    restored.load_state_dict(algo.state_dict())
    for k, v in algo.critic.state_dict().items():
        assert torch.equal(v, restored.critic.state_dict()[k])
    assert restored.critic_optimizer.steps == algo.critic_optimizer.steps == 1
    assert restored.rng.getstate() == algo.rng.getstate()


def test_schedule_and_config_checks(tmp_path):
    cfg = config(tmp_path, critic_iterations=3, actor_iterations=2)
    assert offline_phase_length(cfg) == 5
    algo = DigiQ(cfg.learner, build_policy(cfg.policy))
    assert [algo.stage(i) for i in range(5)] == ["critic"] * 3 + ["actor"] * 2
    with pytest.raises(ConfigError, match="learner.digiq.representation.model"):
        config(tmp_path, representation={"model": None})
    with pytest.raises(ConfigError, match="neither a model folder nor a model id"):
        check_paths(config(tmp_path, representation={"model": str(tmp_path / "not-there")}), offline_data=False)
    check_paths(config(tmp_path), offline_data=False)  # an id string is accepted as it is
    with pytest.raises(ConfigError, match="critic_iterations >= 1"):
        config(tmp_path, critic_iterations=0)
    with pytest.raises(ConfigError, match="run.training = 'offline'"):
        load_config(None, data={"learner": {"algorithm": "digiq", "digiq": {"representation": {"model": MODEL}}}})


def test_synthetic_data_has_the_stated_behaviour_success():
    data = synthetic_dataset(2000, seed=1)
    rate = np.mean([t.outcome == "success" for t in data])
    assert 0.27 < rate < 0.33
    assert {t.steps[1].action_text for t in data} == set(ACTIONS)
