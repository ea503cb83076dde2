"""GRPO's update (rlsys/learners/grpo/): the loss of a group against a hand computation, what is skipped and
counted, the behaviour weight, the KL to the reference, learning on every policy family, epochs as passes, and
the checkpoint round trip. Real tiny policies throughout."""

import io
import math
import random
from collections import Counter
from dataclasses import replace

import pytest
import torch

from rlsys.config import GRPOConfig, LearnerConfig, LoraConfig, PolicyConfig, load_config
from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.learners.grpo.algorithm import GRPO
from rlsys.learners.grpo.groups import group_samples
from rlsys.learners.grpo.passes import Passes, steps_for
from rlsys.learners.losses import LossSum
from rlsys.learners.optim import ModuleOptimizer, train_steps
from rlsys.learners.registry import build_algorithm
from rlsys.policies import build_policy
from tests.policies.test_causal_lm import observation, randomize_adapter
from tests.policies.test_policy_vlm import observation as screen_observation

T5 = PolicyConfig(d_model=32, d_ff=64, num_heads=2, max_new_tokens=24)
CAUSAL_LORA = PolicyConfig(
    kind="causal_lm", d_model=64, d_ff=128, num_layers=1, max_new_tokens=16,
    lora=LoraConfig(enabled=True, r=4, alpha=8, dropout=0.0),
)  # fmt: skip
VLM_LORA = PolicyConfig(
    kind="vlm", arch="qwen2_vl", d_model=32, d_ff=64, num_heads=2, num_layers=2, max_new_tokens=20,
    lora=LoraConfig(enabled=True, r=4, alpha=8, dropout=0.0),
)  # fmt: skip
OBS = observation(4, editable={0})
# four actions of different lengths, each inside the element grammar of OBS
ACTIONS = ["click [1]", "type [0] abc", "type [0] ab", "type [0] hello"]


def step(obs: Observation, action: str, reward: float, logprob: float | None, error: str | None = None) -> Step:
    return Step(obs, action, None, reward, False, 0, logprob, error=error)


def group(name: str, rewards, actions=ACTIONS, policy=None, obs: Observation = OBS, size: int | None = None):
    """One trajectory per reward, each of one step playing the matching action; mu is the policy's log-prob when
    a policy is given (a runner's record at policy lag 0), else unknown."""
    meta = {"rollout_group": name, "group_size": size or len(rewards)}
    out = []
    for reward, action in zip(rewards, actions):
        mu = float(policy.log_probs([obs], [action])[0].detach()) if policy is not None else None
        task = Task(f"task-{name}", obs.task, "synthweb", meta=dict(meta))
        out.append(Trajectory(task, [step(obs, action, reward, mu)], "success" if reward > 0 else "failure"))
    return out


def learner(reduction="token_mean", **grpo) -> LearnerConfig:
    return LearnerConfig(lr=1e-2, batch_size=4, grpo=GRPOConfig(reduction=reduction, **grpo))


def weights(policy) -> list[torch.Tensor]:
    return [p.detach().clone() for p in policy.parameters()]


# ---------------------------------------------------------------------------------------------- the loss by hand


@pytest.mark.parametrize("reduction", ["token_mean", "sequence_mean"])
def test_the_loss_of_a_group_of_four_by_hand(reduction):
    """Rewards 1, 0, 0, 0: A = 1.5, -0.5, -0.5, -0.5 (mean 0.25, sample std 0.5). The proximal log-probs are set so
    that the ratios are 1.5 (A > 0: held at 1 + clip_high = 1.28), 0.5 (A < 0: held at 1 - clip_low = 0.8),
    1.0 and 1.1 (inside the clip range)."""
    policy = build_policy(T5, seed=0)
    algo = GRPO(learner(reduction), policy)
    samples = group_samples(group("g", [1, 0, 0, 0]), scale_by_std=True).samples
    torch.testing.assert_close(torch.tensor([s.advantage for s in samples]), torch.tensor([1.5, -0.5, -0.5, -0.5]))
    logp, mask = policy.token_logprobs([OBS] * 4, ACTIONS)
    ratios = [1.5, 0.5, 1.0, 1.1]
    for s, row, m, r in zip(samples, logp.detach(), mask, ratios):
        s.proximal = row[m] - math.log(r)
    per_token = [1.28 * 1.5, 0.8 * -0.5, 1.0 * -0.5, 1.1 * -0.5]  # min(rho A, clip(rho) A) at each ratio
    n = mask.sum(-1).tolist()
    assert len(set(n)) == 4  # the reductions differ only when the actions' lengths do

    loss = algo.loss_sum(samples)

    if reduction == "token_mean":
        expected = LossSum(-sum(v * k for v, k in zip(per_token, n)), sum(n))
    else:
        expected = LossSum(-sum(per_token), 4)
    assert loss.count == expected.count
    assert loss.total.item() == pytest.approx(expected.total, rel=1e-5)
    metrics = algo.token_metrics()
    assert metrics["grpo/clip_fraction_high"] == pytest.approx(n[0] / sum(n))
    assert metrics["grpo/clip_fraction_low"] == pytest.approx(n[1] / sum(n))
    # the clipped actions give no gradient: the gradient is that of the two unclipped ones' rho A alone
    loss.total.backward()
    got = [p.grad.clone() for p in policy.parameters()]
    policy.model.zero_grad()
    logp, mask = policy.token_logprobs([OBS] * 2, ACTIONS[2:])
    hand = 0.0
    for row, m, s in zip(logp, mask, samples[2:]):
        rho_a = torch.exp(row[m] - s.proximal) * s.advantage
        hand = hand - (rho_a.sum() if reduction == "token_mean" else rho_a.mean())
    hand.backward()
    for g, p in zip(got, policy.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("kind", ["tiny_t5", "causal_lm_lora"])
def test_the_kl_term_against_a_hand_k3_to_a_reference_that_differs(kind):
    """The reference is the policy as the algorithm found it: a frozen copy (tiny T5), or the base with the adapter
    switched off (LoRA, no copy). Once the policy has moved away, the loss gains kl_coef x the token mean of
    k3 = exp(q) - q - 1, q = log ref - log pi, with ref scored by an independent build of the starting weights."""
    cfg = T5 if kind == "tiny_t5" else CAUSAL_LORA
    policy = build_policy(cfg, seed=0)
    with_kl, without = GRPO(learner(kl_coef=0.5), policy), GRPO(learner(), policy)
    assert (with_kl.reference.frozen is None) == (kind == "causal_lm_lora")
    if kind == "tiny_t5":
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.05)
    else:
        randomize_adapter(policy, seed=1)
    start = build_policy(cfg, seed=0)  # the starting weights (a fresh LoRA adapter is zero: the base model)
    ref, mask = start.token_logprobs([OBS] * 4, ACTIONS)
    logp, _ = policy.token_logprobs([OBS] * 4, ACTIONS)
    q = (ref - logp).detach()
    k3 = (torch.exp(q) - q - 1)[mask]
    assert k3.sum() > 1e-3  # the reference differs

    samples = group_samples(group("g", [1, 0, 0, 0]), scale_by_std=True).samples
    with_kl._score_before_update(samples)
    torch.testing.assert_close(torch.cat([s.reference for s in samples]), ref[mask].detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(policy.token_logprobs([OBS] * 4, ACTIONS)[0], logp)  # the adapter is back on
    gained = with_kl.loss_sum(samples).total - without.loss_sum(samples).total
    assert gained.item() == pytest.approx(0.5 * float(k3.sum()), rel=1e-4)
    assert with_kl.token_metrics()["grpo/kl"] == pytest.approx(float(k3.mean()), rel=1e-4)


def test_without_a_kl_coefficient_no_reference_is_kept():
    assert GRPO(learner(), build_policy(T5, seed=0)).reference is None


# ------------------------------------------------------------------------------------------ groups, counted


def test_every_turn_of_a_trajectory_carries_its_advantage_and_broken_steps_none():
    turns = [step(OBS, "click [1]", 0.0, None), step(OBS, "", 0.0, None), step(OBS, "click [9]", 1.0, None, "bad")]
    meta = {"rollout_group": "g", "group_size": 2}
    long = Trajectory(Task("t", "x", "synthweb", meta=dict(meta)), turns, "success")
    short = Trajectory(Task("t", "x", "synthweb", meta=dict(meta)), [step(OBS, "click [2]", 0.0, None)], "failure")
    groups = group_samples([long, short], scale_by_std=False)
    assert [(s.action, s.advantage) for s in groups.samples] == [("click [1]", 0.5), ("click [2]", -0.5)]


def test_uniform_small_and_ungrouped_are_skipped_counted_and_change_no_gradient():
    informative = group("a", [1, 0, 0, 1])
    uniform = group("b", [1, 1, 1, 1])
    small = group("c", [1], size=4)  # the rest of its group never arrived
    alone = [Trajectory(Task("solo", "x", "synthweb"), [step(OBS, "click [1]", 1.0, None)], "success")]

    policy = build_policy(T5, seed=0)
    before = weights(policy)
    metrics = GRPO(learner(), policy).update(uniform + small + alone)
    assert metrics["actor/updates"] == 0 and metrics["grpo/samples"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, weights(policy)))
    assert (metrics["grpo/uniform_groups"], metrics["grpo/skipped_small_groups"]) == (1, 1)
    assert (metrics["grpo/groups"], metrics["grpo/ungrouped_trajectories"]) == (2, 1)

    # with an informative group beside them, the update is the informative group's alone, to the last bit
    alone_policy, mixed_policy = build_policy(T5, seed=0), build_policy(T5, seed=0)
    GRPO(learner(), alone_policy).update(informative)
    metrics = GRPO(learner(), mixed_policy).update(uniform + informative + small + alone)
    assert metrics["actor/updates"] == 1 and metrics["grpo/samples"] == 4 and metrics["grpo/uniform_groups"] == 1
    assert metrics["grpo/advantage_abs_mean"] == pytest.approx(0.866, abs=1e-3)  # 0.5 / sqrt(1/3)
    assert all(torch.equal(a, b) for a, b in zip(weights(alone_policy), weights(mixed_policy)))
    assert not all(torch.equal(a, b) for a, b in zip(before, weights(mixed_policy)))


# ------------------------------------------------------------------------------------------ behaviour weight


def test_the_behaviour_weight_applies_where_mu_differs():
    """pi_prox / mu per action, capped at importance_clip (1.5 here), 1 where mu is unknown, detached; at the first
    step (rho = 1) each action's objective is A x weight on each of its tokens."""
    policy = build_policy(T5, seed=0)
    algo = GRPO(replace(learner(), importance_clip=1.5), policy)
    trajectories = group("g", [1, 0, 0, 0], policy=policy)
    pi = [t.steps[0].logprob for t in trajectories]
    mus = [pi[0] + math.log(2), pi[1] - math.log(2), None, pi[3]]  # pi/mu: 0.5, 2 (capped at 1.5), unknown, 1
    for t, mu in zip(trajectories, mus):
        t.steps[0].logprob = mu
    samples = group_samples(trajectories, scale_by_std=True).samples
    metrics = algo._score_before_update(samples)
    assert [s.weight for s in samples] == pytest.approx([0.5, 1.5, 1.0, 1.0], abs=1e-5)
    assert metrics["actor/importance_weight"] == pytest.approx(1.0, abs=1e-5)
    assert (metrics["actor/importance_clipped"], metrics["actor/no_behaviour_logprob"]) == (1, 1)
    _, mask = policy.token_logprobs([OBS] * 4, ACTIONS)
    n = mask.sum(-1).tolist()
    expected = -sum(s.advantage * w * k for s, w, k in zip(samples, [0.5, 1.5, 1.0, 1.0], n))
    assert algo.loss_sum(samples).total.item() == pytest.approx(expected, rel=1e-4)


def test_at_policy_lag_zero_the_behaviour_weight_is_one():
    policy = build_policy(T5, seed=0)
    metrics = GRPO(learner(), policy).update(group("g", [1, 0, 0, 0], policy=policy))
    assert metrics["actor/importance_weight"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["actor/no_behaviour_logprob"] == 0 and metrics["train/policy_lag"] == 0


# ------------------------------------------------------------------------------------------ every policy family

FAMILIES = {
    "tiny_t5": (T5, OBS),
    "element_pointer": (PolicyConfig(kind="element_pointer", d_model=32, d_ff=64), OBS),
    "learned_pointer": (PolicyConfig(kind="learned_pointer", d_model=32, d_ff=64), OBS),
    "causal_lm_lora": (CAUSAL_LORA, OBS),
    "vlm_lora": (VLM_LORA, screen_observation(4)),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_one_update_raises_the_rewarded_action_and_lowers_the_other(family):
    cfg, obs = FAMILIES[family]
    policy = build_policy(cfg, seed=0)
    good, bad = "click [1]", "click [2]"
    before = policy.log_probs([obs, obs], [good, bad]).detach()
    trajectories = group("g", [1, 1, 0, 0], [good, good, bad, bad], policy=policy, obs=obs)
    metrics = GRPO(learner(kl_coef=0.1), policy).update(trajectories)
    after = policy.log_probs([obs, obs], [good, bad]).detach()
    assert metrics["actor/updates"] == 1
    assert after[0] > before[0] and after[1] < before[1], (before, after)


# ------------------------------------------------------------------------------------------ epochs, checkpoints


@pytest.mark.parametrize(("samples", "epochs", "batch", "accumulation", "steps"), [(10, 2, 4, 1, 6), (10, 1, 4, 2, 2)])
def test_epochs_are_whole_passes_over_the_samples(samples, epochs, batch, accumulation, steps):
    assert steps_for(samples, epochs, batch, accumulation) == steps
    seen = Counter()
    param = torch.nn.Parameter(torch.zeros(1))

    def loss(items):
        seen.update(items)
        return LossSum(param.sum() * 0, len(items))

    cfg = LearnerConfig(batch_size=batch, grad_accumulation=accumulation)
    train_steps(ModuleOptimizer("actor", [param], 1.0, 1.0), list(range(samples)), loss, steps, cfg,
                Passes(random.Random(0)))  # fmt: skip
    whole = epochs * math.ceil(samples / batch)  # micro-batches of the passes asked for
    assert sorted(seen.values())[0] >= epochs and sum(seen.values()) >= epochs * samples
    if whole % accumulation == 0:
        assert set(seen.values()) == {epochs}  # every sample exactly `epochs` times


def test_checkpoint_round_trip():
    """The optimizer's moments and the draws come back: a restored algorithm's next update is the original's."""
    cfg = learner(epochs=2)
    cfg = replace(cfg, batch_size=2)
    policy = build_policy(T5, seed=0)
    algo = GRPO(cfg, policy)
    algo.update(group("a", [1, 0, 0, 0], policy=policy))
    buf = io.BytesIO()
    torch.save({"algorithm": algo.state_dict(), "policy": policy.state_dict()}, buf)
    second = group("b", [0, 1, 1, 0], policy=policy)
    algo.update(second)

    state = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    restored, fresh = build_policy(T5, seed=0), build_policy(T5, seed=0)
    restored.load_state_dict(state["policy"])
    fresh.load_state_dict(state["policy"])
    again = GRPO(cfg, restored)
    again.load_state_dict(state["algorithm"])
    again.update(second)
    GRPO(cfg, fresh).update(second)  # the same weights without the optimizer state: a different step
    assert all(torch.equal(a, b) for a, b in zip(weights(policy), weights(restored)))
    assert not all(torch.equal(a, b) for a, b in zip(weights(policy), weights(fresh)))


def test_the_registry_builds_grpo_from_a_config():
    cfg = load_config(None, ["learner.algorithm=grpo", "run.group_size=4", "run.rollout_size=8"])
    assert isinstance(build_algorithm(cfg, build_policy(T5, seed=0), "cpu"), GRPO)
