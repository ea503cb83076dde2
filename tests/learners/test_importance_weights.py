"""Off-policy correction at zero lag: pi for the ratio is scored as the runner scored mu, so a policy with
dropout gets weights of exactly 1 when nothing changed between acting and learning."""

import dataclasses

import pytest
import torch

from rlsys.config import LearnerConfig, PolicyConfig
from rlsys.learners.imitation import ActorSample, ActorUpdate
from rlsys.policies import build_policy
from tests.policies.test_policy import observation

CFG = PolicyConfig(d_model=32, d_ff=64, num_heads=2, max_new_tokens=24)


@pytest.fixture(scope="module")
def policy_with_dropout(tmp_path_factory):
    """A tiny T5 saved with dropout 0.3 and loaded back as a checkpoint is (AutoUI's released one has 0.1)."""
    folder = tmp_path_factory.mktemp("dropout")
    fresh = build_policy(CFG, seed=0)
    fresh.model.config.dropout_rate = 0.3
    fresh.save_pretrained(folder)
    policy = build_policy(dataclasses.replace(CFG, path=str(folder)))
    assert policy.model.config.dropout_rate == 0.3
    return policy


def test_importance_weights_are_exactly_one_at_zero_lag_with_dropout(policy_with_dropout):
    policy = policy_with_dropout
    observations = [observation(n, editable={0}) for n in (3, 5, 7, 9) for _ in range(4)]
    samples = policy.act(observations)  # mu, as a runner records it
    batch = [ActorSample(o, s.text, s.logprob) for o, s in zip(observations, samples)]
    update = ActorUpdate(LearnerConfig(importance_clip=100.0), policy, "sequence_mean", correct_off_policy=True)
    policy.train()
    torch.manual_seed(0)
    update.loss_sum(batch)
    mean, clipped, unknown = update._stats[-1]
    assert unknown == 0 and clipped == 0
    assert mean == pytest.approx(1.0, abs=1e-5)
    # the gradient pass still trains with dropout on: its log-probs differ from the ones mu was recorded with
    train_logp = policy.token_logprobs(observations, [s.text for s in samples])[0].sum(-1)
    assert not torch.allclose(train_logp, torch.tensor([s.logprob for s in samples]), atol=1e-3)
    assert policy.model.training


def test_run_reports_the_mean_importance_weight(policy_with_dropout):
    policy = policy_with_dropout
    observations = [observation(4, editable={0}) for _ in range(8)]
    samples = policy.act(observations)
    batch = [ActorSample(o, s.text, s.logprob) for o, s in zip(observations, samples)]
    update = ActorUpdate(LearnerConfig(batch_size=8, lr=0.0), policy, "sequence_mean", correct_off_policy=True)
    metrics = update.run(batch, steps=2)
    assert metrics["actor/importance_weight"] == pytest.approx(1.0, abs=1e-5)
