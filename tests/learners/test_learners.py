"""The learners' numbers, checked by hand against the formulas in docs/algorithms/ (DigiRL, filtered BC, PAE)."""

import math

import numpy as np
import pytest
import torch

from rlsys.config import LearnerConfig, PolicyConfig
from rlsys.core.returns import discounted_returns, success_labels
from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.data.replay import ReplayBuffer
from rlsys.learners.digirl.advantages import curriculum_scores, digirl_compat, doubly_robust, keep_mask, top_quantile
from rlsys.learners.filtered_bc import FilteredBC
from rlsys.learners.losses import clamp_probs, importance_weights, sequence_nll, token_nll
from rlsys.learners.optim import ModuleOptimizer
from rlsys.learners.selection import non_empty, policy_lag, reward_quantile, select, shortest_successes
from rlsys.policies import build_policy


def traj(task: str, rewards, outcome: str | None = None, errors=None, tid: str | None = None) -> Trajectory:
    errors = errors or [None] * len(rewards)
    steps = [
        Step(Observation(b"", "", "", task), f"click [{i}]", None, float(r), i == len(rewards) - 1, 0, -1.0, error=e)
        for i, (r, e) in enumerate(zip(rewards, errors))
    ]
    outcome = outcome or ("success" if sum(rewards) > 0 else "failure")
    return Trajectory(Task(task, task, "test"), steps, outcome, **({"id": tid} if tid else {}))


# ------------------------------------------------------------------ returns and labels


def test_returns_and_success_labels():
    assert discounted_returns([0, 0, 1], 0.5) == [0.25, 0.5, 1.0]
    assert discounted_returns([0, 0, 1], 0.95) == pytest.approx([0.9025, 0.95, 1.0])
    assert discounted_returns([0, 0], 0.5) == [0.0, 0.0]
    assert success_labels([0.25, 0.5, 1.0]).tolist() == [1, 1, 1]
    assert success_labels([0.0, 0.0]).tolist() == [0, 0]


# ------------------------------------------------------------------ advantages


def test_doubly_robust_advantage_by_hand():
    # success at the last of three steps, lambda 0.5: weights lam^(H-t) = 0.25, 0.5, 1
    adv = doubly_robust([0, 0, 1], values=[0.2, 0.4, 0.7], next_values=[0.4, 0.7, 0.9], lam=0.5)
    # A0 = 0.25*1 + 0.75*(0 + 0.4 - 0.2); A1 = 0.5*1 + 0.5*(0 + 0.7 - 0.4); A2 = 1*1
    assert adv == pytest.approx([0.4, 0.65, 1.0])
    failed = doubly_robust([0, 0, 0], values=[0.5, 0.3, 0.1], next_values=[0.3, 0.1, 0.05], lam=0.5)
    assert failed == pytest.approx([-0.15, -0.1, 0.0])
    assert keep_mask(adv, "doubly_robust", 0.05).tolist() == [True, True, True]
    assert keep_mask(failed, "doubly_robust", 0.05).tolist() == [False, False, False]
    # lambda 1: the outcome alone; lambda 0: the one-step critic advantage, except at the last step, where
    # lam^0 = 1 and the advantage is the outcome
    assert doubly_robust([0, 1], [0.9, 0.9], [0.1, 0.5], lam=1.0) == pytest.approx([1.0, 1.0])
    assert doubly_robust([0, 1], [0.9, 0.2], [0.1, 0.5], lam=0.0) == pytest.approx([-0.8, 1.0])


def test_digirl_compat_advantage_by_hand():
    returns = discounted_returns([0, 0, 1], 0.5)
    # p(s') - p(s) + r + G: 0.2 + 0.25, 0.3 + 0.5, 0.2 + 1 + 1 -> all above 0.05
    assert digirl_compat([0, 0, 1], returns, [0.2, 0.4, 0.7], [0.4, 0.7, 0.9], 0.05).tolist() == [1, 1, 1]
    # a failure: -0.2, -0.2, -0.05 -> none; a small rise of 0.02 stays under the threshold, 0.06 passes
    assert digirl_compat([0, 0, 0], [0, 0, 0], [0.5, 0.3, 0.1], [0.3, 0.1, 0.05], 0.05).tolist() == [0, 0, 0]
    assert digirl_compat([0, 0], [0, 0], [0.5, 0.5], [0.52, 0.56], 0.05).tolist() == [0, 1]
    assert keep_mask(np.array([0.0, 1.0]), "digirl_compat", 0.05).tolist() == [False, True]


def test_curriculum_keeps_the_top_quantile_of_reward_minus_instruction_value():
    scores = curriculum_scores([1, 1, 0, 0, 1], [0.9, 0.2, 0.1, 0.8, 0.5])
    assert scores == pytest.approx([0.1, 0.8, -0.1, -0.8, 0.5])
    # 90th percentile of [-0.8, -0.1, 0.1, 0.5, 0.8] (linear) = 0.5 + 0.6 * 0.3 = 0.68
    assert top_quantile(scores, 0.9).tolist() == [False, True, False, False, False]
    assert top_quantile(scores, 0.5).tolist() == [True, True, False, False, True]
    assert top_quantile(scores, 0.0).all()


# ------------------------------------------------------------------ filtered BC kept sets


def test_digirl_filtered_bc_keeps_the_reward_quantile():
    half = [traj(f"t{i}", [0, 1] if i % 2 else [0, 0]) for i in range(10)]
    assert {t.task.id for t in reward_quantile(half, 0.9)} == {"t1", "t3", "t5", "t7", "t9"}
    # 1 of 20 succeeds: the cutoff is 0 and the original would clone all 20; only the success is kept
    few = [traj(f"t{i}", [1] if i == 7 else [0]) for i in range(20)]
    assert [t.task.id for t in reward_quantile(few, 0.9)] == ["t7"]
    # untrainable trajectories never count, not even towards the cutoff
    broken = traj("x", [1], outcome="env_error")
    assert reward_quantile([broken, traj("y", [0])], 0.9) == []


def test_digirl_filtered_bc_ranks_the_runs_history_not_what_memory_holds(tmp_path):
    buf = ReplayBuffer(capacity=2, max_bytes=1 << 30, history_dir=str(tmp_path / "replay"))
    buf.add([traj(f"t{i}", [0, 1] if i in (1, 3) else [0, 0], tid=f"x{i}") for i in range(10)])
    policy = build_policy(PolicyConfig(d_model=32, d_ff=64, num_heads=2), seed=0)
    algo = FilteredBC(LearnerConfig(filter="quantile", quantile=0.8), policy)
    assert algo.ranks_history
    assert sorted(t.id for t in algo._from_history(buf)) == ["x1", "x3"]  # both left memory
    metrics = algo.update(buf.sample(2), history=buf)
    assert metrics["learner/selected_trajectories"] == 2 and metrics["actor/updates"] == 20


def test_filtered_bc_counts_the_failures_a_noisy_reward_lets_into_the_quantile(tmp_path):
    buf = ReplayBuffer(capacity=2, max_bytes=1 << 30, history_dir=str(tmp_path / "replay"))
    # a timeout counts: every non-success of synthweb is one
    noisy = [traj("n", [0, 0.95], outcome="timeout", tid="n"), traj("q", [0, 0.02], outcome="failure", tid="q")]
    buf.add([traj(f"t{i}", [0, 1] if i < 3 else [0, 0], tid=f"x{i}") for i in range(8)] + noisy)
    policy = build_policy(PolicyConfig(d_model=32, d_ff=64, num_heads=2), seed=0)
    metrics = FilteredBC(LearnerConfig(filter="quantile", quantile=0.6), policy).update(buf.sample(2), history=buf)
    # the top 40% of ten rewards: three successes and the failure whose noise reached 0.95
    assert metrics["learner/selected_trajectories"] == 4 and metrics["learner/selected_failures"] == 1


def test_policy_lag_of_a_sample_leaves_offline_data_out():
    sample = [traj(f"t{i}", [1]) for i in range(4)]
    for t, version in zip(sample, [3, 5, 7, -1]):
        for s in t.steps:
            s.policy_version = version
    lag = policy_lag(sample, 7)
    assert lag == {"train/policy_lag": 2.0, "train/policy_lag_max": 4, "train/offline_in_sample": 1}
    assert policy_lag(sample[3:], 7)["train/policy_lag"] is None


def collected_by(version: int, trajectories: list[Trajectory]) -> list[Trajectory]:
    for t in trajectories:
        for s in t.steps:
            s.policy_version = version
    return trajectories


def test_filtered_bc_reports_the_policy_lag_of_what_it_imitated_not_of_the_sample(tmp_path):
    """The reward quantile ranks the history: the successes it imitates (collected by version 1) have left
    memory, which holds failures of version 5 only. With the success filter on a sample, the lag is the
    successes' too, not the failures' beside them."""
    policy = build_policy(PolicyConfig(d_model=32, d_ff=64, num_heads=2), seed=0)
    policy.version = 6
    buf = ReplayBuffer(capacity=3, max_bytes=1 << 30, history_dir=str(tmp_path / "replay"))
    old = collected_by(1, [traj(f"s{i}", [0, 1], tid=f"s{i}") for i in range(3)])
    buf.add(old + collected_by(5, [traj(f"f{i}", [0, 0], tid=f"f{i}") for i in range(3)]))
    sample = buf.sample(3)
    assert policy_lag(sample, 6)["train/policy_lag"] == 1  # what the sample alone would say
    metrics = FilteredBC(LearnerConfig(filter="quantile", quantile=0.5), policy).update(sample, history=buf)
    assert metrics["learner/selected_trajectories"] == 3
    assert metrics["train/policy_lag"] == metrics["train/policy_lag_max"] == 5
    assert metrics["train/offline_in_sample"] == 0

    mixed = collected_by(2, [traj("s", [1])]) + collected_by(5, [traj("f", [0])]) + collected_by(-1, [traj("o", [1])])
    metrics = FilteredBC(LearnerConfig(filter="success"), policy).update(mixed)
    assert metrics["train/policy_lag"] == metrics["train/policy_lag_max"] == 4
    assert metrics["train/offline_in_sample"] == 1  # the offline success, imitated, is counted apart


def test_pae_filtered_bc_keeps_the_shortest_fifth_of_each_tasks_successes():
    a = [traj("A", [0] * (n - 1) + [1]) for n in (3, 1, 2, 5, 4)] + [traj("A", [0])]
    b = [traj("B", [0] * (n - 1) + [1]) for n in (2, 4, 2, 3, 5, 6)]
    c = [traj("C", [0, 0, 1]), traj("C", [0, 0], outcome="timeout")]
    kept = shortest_successes(a + b + c, 0.2)
    by_task = sorted((t.task.id, len(t.steps)) for t in kept)
    # A: ceil(0.2 * 5) = 1 -> the 1-step one; B: ceil(0.2 * 6) = 2 -> both 2-step ones; C: its only success
    assert by_task == [("A", 1), ("B", 2), ("B", 2), ("C", 3)]


def test_sft_keeps_every_trainable_trajectory_with_something_to_imitate():
    keep = [traj("a", [0, 0]), traj("b", [1]), traj("c", [0], outcome="timeout")]
    drop = [
        traj("d", [1], outcome="env_error"),
        traj("e", [0], outcome="unknown"),
        Trajectory(Task("f", "f", "test"), [], "failure"),
        traj("g", [0, 0], errors=["parse error", "parse error"]),
    ]
    assert [t.task.id for t in non_empty(keep + drop)] == ["a", "b", "c"]
    assert select(LearnerConfig(algorithm="sft"), keep + drop) == non_empty(keep + drop)
    assert [t.task.id for t in select(LearnerConfig(filter="success"), keep + drop)] == ["b"]


# ------------------------------------------------------------------ losses


def test_token_mean_and_sequence_losses_by_hand():
    logp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    weights = torch.tensor([1.0, 2.0])
    # -(1*(-1 - 2) + 2*(-0.5)) / 3 real tokens
    assert token_nll(logp, mask, weights).mean().item() == pytest.approx(4 / 3)
    # -mean(1*(-3), 2*(-0.5))
    assert sequence_nll(logp, weights).mean().item() == pytest.approx(2.0)


def test_probability_clamp_silences_confident_and_hopeless_tokens():
    logp = torch.log(torch.tensor([[0.995, 0.5, 0.0005, 1.0]])).requires_grad_(True)
    mask = torch.tensor([[True, True, True, False]])
    clamped = clamp_probs(logp, mask)
    assert clamped.detach().exp()[0, :3].tolist() == pytest.approx([0.99, 0.5, 0.001])
    assert clamped[0, 3].item() == 0.0  # padding stays zero, not log 0.99
    clamped.sum().backward()
    assert logp.grad.tolist() == [[0.0, 1.0, 0.0, 0.0]]


def test_importance_weights_are_clipped_and_default_to_one():
    current = torch.tensor([-1.0, -3.0, -2.0])
    rho, unknown = importance_weights(current, [-2.0, -1.0, None], clip=1.0)
    assert rho.tolist() == pytest.approx([1.0, math.exp(-2.0), 1.0])
    assert unknown == 1
    rho, _ = importance_weights(current, [-2.0, -1.0, None], clip=2.0)
    assert rho[0].item() == pytest.approx(2.0)  # e^1 = 2.72, clipped at 2


# ------------------------------------------------------------------ per-module optimisation


def test_each_module_clips_only_its_own_gradient():
    actor, critic = torch.nn.Linear(2, 1, bias=False), torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        actor.weight.copy_(torch.tensor([[1.0, 1.0]]))
    critic.weight.grad = torch.tensor([[100.0]])  # a stale gradient another module left behind
    opt = ModuleOptimizer("actor", actor.parameters(), lr=0.1, max_norm=1.0)
    x = torch.tensor([3.0, 4.0])
    out = opt.step([lambda: actor(x).sum()])
    assert out["grad_norm"] == pytest.approx(5.0)  # the actor's own norm, not sqrt(5^2 + 100^2)
    assert actor.weight.grad[0].tolist() == pytest.approx([0.6, 0.8])  # clipped to norm 1 by itself
    assert critic.weight.grad.tolist() == [[100.0]]  # untouched
    # Adam's first step moves each weight by lr in the direction of its gradient's sign
    assert actor.weight.detach()[0].tolist() == pytest.approx([0.9, 0.9])


def test_micro_batches_accumulate_to_their_mean():
    w = torch.nn.Parameter(torch.tensor([2.0]))
    opt = ModuleOptimizer("m", [w], lr=0.1, max_norm=1e9)
    out = opt.step([lambda: 3 * w.sum(), lambda: 5 * w.sum()])
    assert out["loss"] == pytest.approx((6 + 10) / 2)
    assert w.grad.item() == pytest.approx(4.0)  # mean of 3 and 5
