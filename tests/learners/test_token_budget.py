"""A token budget cuts micro-batches into chunks that go through forward and backward one at a time; the
update stays the one the config describes: the same loss, gradient norm and weights as without a budget."""

from dataclasses import replace

import pytest
import torch

from rlsys.config import LearnerConfig, PolicyConfig
from rlsys.config.errors import ConfigError
from rlsys.config.loader import load_config
from rlsys.learners.imitation import ActorSample, ActorUpdate
from rlsys.learners.losses import LossSum
from rlsys.learners.optim import ModuleOptimizer
from rlsys.learners.token_budget import activation_bytes_per_token, split_by_tokens, token_budget
from rlsys.policies import build_policy
from tests.policies.test_causal_lm import observation

CAUSAL = PolicyConfig(kind="causal_lm", d_model=64, d_ff=128, num_layers=2, max_new_tokens=16)


def samples() -> list[ActorSample]:
    """Rows of different lengths (prompts of 1 to 12 elements, actions of 9 to 17 characters)."""
    out = []
    for n in range(1, 13):
        action = f"click [{n % 3}]" if n % 2 else f'type [0] "{"x" * (n % 5)}"'
        out.append(ActorSample(observation(n, editable={0}), action, None, weight=0.5 + n / 10))
    return out


@pytest.mark.parametrize("reduction", ["token_mean", "sequence_mean"])
@pytest.mark.parametrize("packing", ["off", "on"])
def test_a_token_budget_changes_no_number_of_the_update(reduction, packing):
    learner = LearnerConfig(lr=1e-3, batch_size=6, grad_accumulation=2, max_tokens_per_micro_batch="off")
    results, chunks = [], []
    for budget in ("off", 150):
        policy = build_policy(replace(CAUSAL, packing=packing), seed=0)
        update = ActorUpdate(replace(learner, max_tokens_per_micro_batch=budget), policy, reduction, False, seed=3)
        if budget != "off":  # record the chunks each micro-batch is cut into
            update._chunks = lambda batch, cut=update._chunks: chunks.append(cut(batch)) or chunks[-1]
        metrics = update.run(samples(), steps=2)
        results.append((metrics, [p.detach().clone() for p in policy.model.parameters()]))
    assert all(len(c) >= 2 for c in chunks) and len(chunks) == 2 * 2  # every micro-batch was cut
    (plain, plain_weights), (cut_metrics, cut_weights) = results
    assert cut_metrics["actor/loss"] == pytest.approx(plain["actor/loss"], rel=1e-5)
    assert cut_metrics["actor/grad_norm"] == pytest.approx(plain["actor/grad_norm"], rel=1e-4)
    for a, b in zip(plain_weights, cut_weights):
        # Adam divides by sqrt(v): an element whose gradients are near 0 moves by a rounding-sized amount times
        # ~1/sqrt(v), so summing chunks in another order may move it ~1e-6; a lost or doubled chunk moves
        # elements by a share of lr (1e-3)
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_a_step_averages_over_the_whole_batch_not_over_micro_batch_means():
    """Two micro-batches with 1 and 3 tokens: the step's loss is their sum over 4 tokens, as one batch of both
    would give, not the mean of the two means."""
    weight = torch.nn.Parameter(torch.tensor(1.0))
    opt = ModuleOptimizer("w", [weight], lr=0.0, max_norm=1e9)
    out = opt.step([lambda: LossSum(weight * 2.0, 1.0), lambda: LossSum(weight * 6.0, 3.0)])
    assert out["loss"] == pytest.approx(8.0 / 4)
    assert float(weight.grad) == pytest.approx(8.0 / 4)


def test_split_keeps_every_row_once_and_each_chunk_within_the_budget():
    items = list("abcdefgh")
    lengths = [5, 40, 7, 12, 12, 3, 90, 8]
    for packed in (False, True):
        chunks = split_by_tokens(items, lengths, budget=30, packed=packed)
        assert sorted(sum(chunks, [])) == items
        for chunk in chunks:
            sizes = [lengths[items.index(x)] for x in chunk]
            cost = sum(sizes) if packed else len(sizes) * max(sizes)
            assert cost <= 30 or len(chunk) == 1  # a row over the budget goes alone
    assert split_by_tokens(items, lengths, 30, packed=False)[0] == ["g"]  # longest first


def test_auto_sets_no_limit_on_cpu_and_the_estimate_reads_model_sizes():
    policy = build_policy(CAUSAL, seed=0)
    assert token_budget("auto", policy) is None
    assert token_budget("off", policy) is None and token_budget(512, policy) == 512
    full = activation_bytes_per_token(policy.model.config, 2, checkpointing=False)
    assert full == 2 * (10 * 64 + 3.5 * 128) * 2
    assert activation_bytes_per_token(policy.model.config, 2, checkpointing=True) < full


def test_a_budget_below_one_token_is_refused():
    with pytest.raises(ConfigError, match="learner.max_tokens_per_micro_batch"):
        load_config(None, data={"learner": {"max_tokens_per_micro_batch": 0}})


def test_rows_are_spread_evenly_over_as_few_chunks_as_the_budget_needs():
    """16 rows of 1,197 tokens under a budget of 15 rows: two chunks of 8, not 15 and 1."""
    chunks = split_by_tokens(list(range(16)), [1197] * 16, budget=18793, packed=False)
    assert [len(c) for c in chunks] == [8, 8]
    assert split_by_tokens(list("abcd"), [10, 1, 1, 1], budget=12, packed=True) == [["a", "b"], ["c", "d"]]
    # where an even spread would break the budget, the greedy cut stays
    assert split_by_tokens(list("abcd"), [10, 9, 1, 1], budget=12, packed=True) == [["a"], ["b", "c", "d"]]
