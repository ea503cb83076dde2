"""DigiRL with tiny real networks: schedule, critics that learn, actor data, isolation, checkpoints."""

import io
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image

from rlsys.config import DigiRLConfig, LearnerConfig, PolicyConfig
from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.data.history import Summaries
from rlsys.data.replay import ReplayBuffer
from rlsys.learners.digirl.algorithm import DigiRL, Ranked, transitions_of
from rlsys.learners.filtered_bc import FilteredBC
from rlsys.learners.imitation import ActorSample, ActorUpdate
from rlsys.learners.losses import token_nll
from rlsys.learners.selection import is_validation
from rlsys.policies import build_policy


def png(color) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((24, 24, 3), color, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


RED, BLUE = png((220, 30, 30)), png((30, 30, 220))


def traj(task: str, screen: bytes, rewards, tid: str, errors=None) -> Trajectory:
    errors = errors or [None] * len(rewards)
    steps = [
        Step(Observation(screen, '[0] button "OK"', "", task), f"click [{i}]", None, float(r), False, 0, -2.0, error=e)
        for i, (r, e) in enumerate(zip(rewards, errors))
    ]
    steps[-1].done = True
    final = Observation(screen, "", "", task)
    outcome = "success" if sum(rewards) > 0 else "failure"
    return Trajectory(Task(task, task, "test"), steps, outcome, id=tid, final_observation=final)


def learner_cfg(**digirl) -> LearnerConfig:
    tiny = dict(text_hidden=16, max_text_tokens=48, image_feature_dim=8, image_size=16, critic_hidden=16)
    d = DigiRLConfig(**{**tiny, "critic_lr": 1e-2, "validation_fraction": 0.0, **digirl})
    return LearnerConfig(algorithm="digirl", lr=1e-3, batch_size=8, grad_clip=1.0, digirl=d)


@pytest.fixture(scope="module")
def policy():
    return build_policy(PolicyConfig(d_model=32, d_ff=64, num_heads=2), seed=0)


def dataset():
    easy = [traj("open the mail app", RED, [0, 1], f"e{i}") for i in range(12)]
    hard = [traj("buy a red sofa online", BLUE, [0, 0, 0], f"h{i}") for i in range(12)]
    return easy + hard


def test_offline_phase_runs_the_three_stages_in_order(policy):
    algo = DigiRL(learner_cfg(offline_instruction_critic_iterations=2, offline_step_critic_iterations=3,
                              offline_actor_iterations=4), policy)  # fmt: skip
    names = [algo.stages(i)[0][0] for i in range(9)]
    assert names == ["instruction_critic"] * 2 + ["step_critic"] * 3 + ["actor"] * 4
    assert [n for n, _ in algo.stages(None)] == ["instruction_critic", "step_critic", "actor"]
    assert algo.stages(None) == [("instruction_critic", 5), ("step_critic", 5), ("actor", 20)]


def test_critics_learn_which_tasks_and_screens_succeed_and_nothing_else_moves(policy):
    algo = DigiRL(learner_cfg(instruction_critic_steps=40, step_critic_steps=40, actor_steps=0), policy)
    data = dataset()
    actor_before = [p.detach().clone() for p in policy.parameters()]
    metrics = algo.update(data)
    assert metrics["instruction_critic/updates"] == 40 and metrics["step_critic/updates"] == 40
    assert all(torch.equal(a, p) for a, p in zip(actor_before, policy.parameters()))  # critics only
    p_easy, p_hard = algo.instruction_values([data[0], data[-1]])
    assert p_easy > 0.8 and p_hard < 0.2
    values = algo.state_values(transitions_of(data[0], 0.5) + transitions_of(data[-1], 0.5), next_state=False)
    assert values[:2].min() > 0.8 and values[2:].max() < 0.2  # y = 1[G_t > 0]: every step of a success is 1


def test_frozen_step_encoder_is_not_trained_or_checkpointed(policy):
    algo = DigiRL(learner_cfg(instruction_critic_steps=1, step_critic_steps=3, actor_steps=0), policy)
    encoder_before = {k: v.clone() for k, v in algo.step_critic.encoder.state_dict().items()}
    algo.update(dataset())
    assert all(torch.equal(v, algo.step_critic.encoder.state_dict()[k]) for k, v in encoder_before.items())
    assert not any(k.startswith("encoder.") for k in algo.state_dict()["step_critic"])
    assert any(k.startswith("encoder.") for k in algo.state_dict()["instruction_critic"])  # fine-tuned


def test_lambda_one_imitates_exactly_the_imitable_steps_of_successes(policy):
    algo = DigiRL(learner_cfg(lam=1.0, curriculum_quantile=0.0), policy)
    data = dataset() + [traj("open the mail app", RED, [0, 0, 1], "x", errors=[None, "parse error", None])]
    samples, metrics = algo.actor_samples(data)
    # A_t = r_H: every step of the 12 two-step successes, and the errorless two steps of the last one
    assert len(samples) == 12 * 2 + 2
    assert metrics["digirl/actor_transitions"] == 26
    assert all(s.observation.screenshot_png == RED for s in samples)


def test_actor_counts_the_transitions_it_imitates_from_failures(policy):
    algo = DigiRL(learner_cfg(lam=1.0, curriculum_quantile=0.0), policy)
    noisy_failure = replace(traj("open the mail app", RED, [0, 0.4], "n"), outcome="failure")  # reward noise
    _, metrics = algo.actor_samples(dataset() + [noisy_failure])
    # lambda 1: every step of a trajectory whose final reward passes 0.05 is imitated, the noisy failure's too
    assert metrics["digirl/actor_transitions"] == 12 * 2 + 2
    assert metrics["digirl/actor_failure_transitions"] == 2


def test_curriculum_prefers_successes_the_instruction_critic_doubts(policy):
    algo = DigiRL(learner_cfg(instruction_critic_steps=40, step_critic_steps=0, actor_steps=0, lam=1.0), policy)
    data = dataset()
    algo.update(data)
    surprise = traj("buy a red sofa online", BLUE, [0, 1], "s")  # success on a task that always failed
    # scores: surprise 1 - p(hard) ~ 1; easy successes 1 - p(easy) ~ 0; failures 0 - p(hard) ~ 0 but lower
    kept = kept_ids(algo, data + [surprise])
    assert "s" in kept and not any(i.startswith("h") for i in kept)
    assert kept_ids(algo, [surprise, data[0], data[-1]]) == ["s"]  # 90th percentile of 3 scores: only the top one


def kept_ids(algo, trajectories) -> list[str]:
    rows = Summaries.of(trajectories)
    kept, metrics = algo.curriculum(rows)
    assert sum(v for k, v in metrics.items() if k.startswith("digirl/curriculum_kept/")) == len(kept)
    return [rows.ids[i] for i in kept]


def test_actor_step_changes_only_the_policy_and_checkpoint_round_trips(policy):
    cfg = learner_cfg(instruction_critic_steps=2, step_critic_steps=2, actor_steps=2, lam=1.0, curriculum_quantile=0)
    algo = DigiRL(cfg, policy)
    data = dataset()
    algo.update(data)
    critic_state = {k: v.clone() for k, v in algo.step_critic.state_dict().items()}
    instr_state = {k: v.clone() for k, v in algo.instruction_critic.state_dict().items()}
    actor_before = [p.detach().clone() for p in policy.parameters()]
    metrics = algo._train_actor(data, [], Ranked.of(None, data), steps=2)
    assert metrics["actor/updates"] == 2
    assert any(not torch.equal(a, p) for a, p in zip(actor_before, policy.parameters()))
    assert all(torch.equal(v, algo.step_critic.state_dict()[k]) for k, v in critic_state.items())
    assert all(torch.equal(v, algo.instruction_critic.state_dict()[k]) for k, v in instr_state.items())

    state = algo.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    other = DigiRL(cfg, policy, seed=5)
    other.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    probe = transitions_of(data[0], 0.5)
    np.testing.assert_allclose(other.state_values(probe, False), algo.state_values(probe, False), rtol=0, atol=1e-6)
    np.testing.assert_allclose(other.instruction_values(data[:2]), algo.instruction_values(data[:2]), atol=1e-6)
    assert other.optimizers["step_critic"].steps == algo.optimizers["step_critic"].steps == 2
    assert other.rng.random() == algo.rng.random()


def test_validation_split_is_stable_and_near_its_fraction():
    trajs = [traj("t", RED, [1], f"id-{i}") for i in range(2000)]
    held = [is_validation(t, 0.2) for t in trajs]
    assert 0.17 < np.mean(held) < 0.23
    assert held == [is_validation(t, 0.2) for t in trajs]
    assert not any(is_validation(t, 0.0) for t in trajs)


def test_actor_loss_applies_clipped_importance_weights(policy):
    cfg = LearnerConfig(batch_size=2, importance_clip=1.0)
    obs = Observation(b"", '[0] button "OK"', "", "click OK")
    with torch.no_grad():
        logp, mask = policy.token_logprobs([obs, obs], ["click [0]", "click [1]"])
    seq = logp.sum(-1)
    batch = [
        ActorSample(obs, "click [0]", float(seq[0]) + 2.0),  # behaviour was likelier: rho = e^-2
        ActorSample(obs, "click [1]", float(seq[1]) - 2.0),  # less likely: rho = e^2, clipped to 1
    ]
    corrected = ActorUpdate(cfg, policy, "token_mean", correct_off_policy=True)
    plain = ActorUpdate(cfg, policy, "token_mean", correct_off_policy=False)
    with torch.no_grad():
        expected = token_nll(logp, mask, torch.tensor([np.exp(-2.0), 1.0], dtype=torch.float32)).mean()
        assert corrected.loss_sum(batch).mean().item() == pytest.approx(expected.item(), rel=1e-4)
        unweighted = token_nll(logp, mask, torch.ones(2)).mean()
        assert plain.loss_sum(batch).mean().item() == pytest.approx(unweighted.item(), rel=1e-4)


def test_text_encoder_loads_a_saved_roberta_folder(tmp_path):
    from transformers import RobertaConfig, RobertaModel

    from rlsys.learners.text_encoder import TextEncoder

    tiny = TextEncoder(None, hidden=16, max_tokens=32)
    RobertaModel(RobertaConfig(**{**tiny.model.config.to_dict(), "architectures": None})).save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    loaded = TextEncoder(str(tmp_path), hidden=999, max_tokens=32)  # hidden comes from the folder
    out = loaded(["open the mail app", "a much longer instruction " * 10])
    assert out.shape == (2, 16) and loaded.hidden_size == 16
    assert loaded.model.pooler is not None  # RoBERTa-base's pooled output, as DigiRL uses


def test_critic_and_curriculum_rank_the_whole_history_not_the_sample(policy, tmp_path):
    """Memory holds 4 trajectories; the instruction critic learns from all 25, and the curriculum picks the one
    surprising success although it left memory long ago (it is read back from the run folder)."""
    buf = ReplayBuffer(capacity=4, max_bytes=1 << 30, history_dir=str(tmp_path / "replay"))
    surprise = traj("buy a red sofa online", BLUE, [0, 1], "s")
    buf.add([surprise] + dataset())
    cfg = learner_cfg(instruction_critic_steps=40, step_critic_steps=1, actor_steps=1, lam=1.0)
    algo = DigiRL(cfg, policy)
    metrics = algo.update(buf.sample(4), history=buf)  # a ReplayBuffer in this process is a History
    assert metrics["instruction_critic/trajectories"] == 25
    p_easy, p_hard = algo.task_values(["open the mail app", "buy a red sofa online"])
    assert p_easy > 0.8 and p_hard < 0.2  # learnt from the 20 trajectories no longer in memory too
    read_back = []
    ranked = Ranked(buf.summaries(), lambda ids: read_back.extend(ids) or buf.fetch(ids))
    policy.version = 3
    metrics = algo._train_actor([], [], ranked, steps=1)
    assert "s" in read_back
    assert metrics["train/policy_lag"] == metrics["train/policy_lag_max"] == 3  # all collected by 0


def test_policy_lag_is_of_the_trajectories_the_actor_imitated(policy, tmp_path):
    """The successes the curriculum draws from the history were collected by version 0; memory holds only
    failures of version 5. An online iteration reports the successes' lag; a critic-only one, its critics'."""
    buf = ReplayBuffer(capacity=4, max_bytes=1 << 30, history_dir=str(tmp_path / "replay"))
    data = dataset()  # 12 successes, then 12 failures: memory keeps the last 4
    for t in data:
        for s in t.steps:
            s.policy_version = 0 if t.reward > 0 else 5
    buf.add(data)
    policy.version = 6
    try:
        cfg = learner_cfg(instruction_critic_steps=1, step_critic_steps=1, actor_steps=1, lam=1.0,
                          curriculum_quantile=0.0, offline_instruction_critic_iterations=1,
                          offline_step_critic_iterations=1)  # fmt: skip
        algo = DigiRL(cfg, policy)
        online = algo.update(buf.sample(4), history=buf)
        assert online["digirl/actor_transitions"] == 24 and online["actor/updates"] == 1
        assert online["train/policy_lag"] == online["train/policy_lag_max"] == 6
        step_critic_only = algo.update(buf.sample(4), offline_iteration=1, history=buf)
        assert step_critic_only["train/policy_lag"] == 1  # the sample's failures it trained on
        instruction_critic_only = algo.update(buf.sample(4), offline_iteration=0, history=buf)
        assert instruction_critic_only["train/policy_lag"] == 3.5  # half collected by 0, half by 5
    finally:
        policy.version = 0


@pytest.mark.parametrize("ranks_history", [False, True])
def test_sanity_arm_takes_the_same_actor_step_as_filtered_bc(tmp_path, ranks_history):
    """Curriculum off, lambda 1 and filtered BC's loss (the benchmark's sanity arm): DigiRL's actor update is
    filtered BC's on the same sample and history, the critics' validation share included."""
    data = dataset()
    assert any(is_validation(t, 0.2) for t in data if t.reward > 0)  # successes the critics hold out
    buf = ReplayBuffer(capacity=6, max_bytes=1 << 30, history_dir=str(tmp_path / "replay"))
    buf.add(data)
    sample = buf.sample(6) if ranks_history else data
    shared = dict(lr=1e-3, batch_size=4, grad_accumulation=2, grad_clip=1.0, prob_clamp=True)
    shared |= dict(rank_history=ranks_history)
    fbc_cfg = LearnerConfig(algorithm="filtered_bc", filter="quantile", updates_per_iteration=3, **shared)
    sanity = learner_cfg(validation_fraction=0.2, curriculum_quantile=0.0, lam=1.0, actor_reduction="token_mean",
                         instruction_critic_steps=2, step_critic_steps=2, actor_steps=3)  # fmt: skip
    policies = [build_policy(PolicyConfig(d_model=32, d_ff=64, num_heads=2), seed=0) for _ in range(2)]
    fbc = FilteredBC(fbc_cfg, policies[0])
    digirl = DigiRL(replace(sanity, **shared), policies[1])
    history = buf if ranks_history else None
    fbc_metrics = fbc.update(sample, history=history)
    digirl_metrics = digirl.update(sample, history=history)

    assert fbc_metrics["actor/updates"] == digirl_metrics["actor/updates"] == 3
    assert digirl_metrics["digirl/actor_transitions"] == fbc_metrics["learner/samples"] > 0
    assert digirl_metrics["actor/loss"] == pytest.approx(fbc_metrics["actor/loss"], rel=1e-6)
    assert digirl_metrics["actor/grad_norm"] == pytest.approx(fbc_metrics["actor/grad_norm"], rel=1e-6)
    for (name, a), b in zip(policies[0].model.named_parameters(), policies[1].model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=name)


def test_critics_report_their_validation_loss_beside_a_constant_predictors(policy):
    """With half of 48 trajectories held out, the critics that learnt which tasks and screens succeed end below the
    loss of always saying the success rate; the constant's loss is the hand-computed cross-entropy."""
    from rlsys.learners.losses import constant_ce

    assert constant_ce([1, 0, 0, 0], [1, 1]) == pytest.approx(-np.log(0.25))
    assert constant_ce([1, 0], [0, 1, 1]) == pytest.approx(np.log(2))
    algo = DigiRL(learner_cfg(instruction_critic_steps=40, step_critic_steps=40, actor_steps=0,
                              validation_fraction=0.5), policy)  # fmt: skip
    data = [replace(t, id=f"{t.id}{k}") for k in range(2) for t in dataset()]
    metrics = algo.update(data)
    for critic in ("instruction_critic", "step_critic"):
        constant = metrics[f"{critic}/validation_loss_constant"]
        assert constant > 0.5 and metrics[f"{critic}/validation_loss"] < constant / 2, (critic, metrics)
        assert metrics[f"{critic}/validation_auc"] == 1.0  # every success above every failure


def test_ranking_auc_counts_ordered_pairs_and_ties_half():
    from rlsys.learners.losses import ranking_auc

    # successes 0.9, 0.4; failures 0.4, 0.1: pairs (0.9>0.4, 0.9>0.1, 0.4=0.4, 0.4>0.1) -> 3.5 of 4
    assert ranking_auc([0.9, 0.4, 0.4, 0.1], [1, 1, 0, 0]) == pytest.approx(3.5 / 4)
    assert ranking_auc([0.2, 0.8], [1, 0]) == 0.0
    assert ranking_auc([0.2, 0.8], [1, 1]) is None


def test_a_batch_of_empty_texts_encodes_as_zeros_as_an_empty_text_among_others():
    """A critic encodes each distinct text once, so a batch can hold only the empty previous action of first steps,
    which the byte tokenizer gives no token: that crashed a Digi-Q run ("cannot reshape tensor of 0 elements")."""
    from rlsys.learners.text_encoder import TextEncoder

    encoder = TextEncoder(None, hidden=16, max_tokens=32)
    alone = encoder(["", ""])
    among_others = encoder(["", "click [2]"])
    assert alone.shape == (2, 16) and not alone.any()
    assert torch.equal(alone[0], among_others[0]) and among_others[1].abs().sum() > 0
