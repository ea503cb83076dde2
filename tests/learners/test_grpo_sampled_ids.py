"""GRPO on actions whose runner recorded the sampled token ids (`Step.token_ids`: the vLLM placement's engines
report them): the learner scores those ids, for the proximal policy, the behaviour weight and the surrogate, not
the action's text tokenized again, which a tokenizer with merges may spell otherwise. The test policy's byte
tokenizer has one spelling per text, so the recorded ids here spell another action than the text."""

from dataclasses import replace

import pytest
import torch

from rlsys.learners.grpo.algorithm import GRPO
from rlsys.learners.grpo.groups import group_samples
from rlsys.policies import build_policy
from rlsys.policies.causal_lm import text_ids
from tests.learners.test_grpo import OBS, group, learner
from tests.policies.test_causal_lm import CFG

TEXTS = ["click [0]", "click [0]", "click [1]", "click [1]"]
SPELT = ["click [2]", "click [2]", "click [3]", "click [3]"]  # what the recorded ids spell, in OBS's grammar


def test_grpo_scores_the_recorded_ids_not_the_text():
    policy = build_policy(CFG, seed=0)
    algo = GRPO(replace(learner(), importance_clip=100.0), policy)  # no cap: a weight off 1 either way shows
    trajectories = group("g", [1, 1, 0, 0], TEXTS)
    for t, spelt in zip(trajectories, SPELT):
        step = t.steps[0]
        step.token_ids = text_ids(policy.tokenizer, spelt)
        with torch.no_grad():  # what an engine records: the log-prob of the ids it sampled
            step.logprob = float(policy.token_logprobs([OBS], [step.action_text], [step.token_ids])[0].sum())
    with torch.no_grad():
        as_text = policy.token_logprobs([OBS] * 4, TEXTS)[0].sum(-1)
    assert (as_text - torch.tensor([t.steps[0].logprob for t in trajectories])).abs().min() > 1e-3

    samples = group_samples(trajectories, scale_by_std=True).samples
    metrics = algo._score_before_update(samples)
    assert [s.weight for s in samples] == pytest.approx([1.0] * 4, abs=1e-5)
    assert (metrics["actor/importance_clipped"], metrics["actor/no_behaviour_logprob"]) == (0, 0)
    # at the first step the surrogate's ratio is 1 on every token: -sum A x tokens (the ids and EOS)
    loss = algo.loss_sum(samples)
    expected = -sum(s.advantage * (len(s.token_ids) + 1) for s in samples)
    assert loss.total.item() == pytest.approx(expected, abs=1e-4)

    ids = [t.steps[0].token_ids for t in trajectories]
    before = policy.token_logprobs([OBS] * 4, TEXTS, ids)[0].sum(-1).detach()
    assert algo.update(trajectories)["actor/updates"] == 1
    after = policy.token_logprobs([OBS] * 4, TEXTS, ids)[0].sum(-1).detach()
    assert after[0] > before[0] and after[2] < before[2], (before, after)  # what was sampled, not what the text says
