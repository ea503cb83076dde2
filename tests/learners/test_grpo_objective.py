"""GRPO's formulas against hand computations (rlsys/learners/grpo/objective.py)."""

import numpy as np
import pytest
import torch

from rlsys.learners.grpo.objective import clipped_surrogate, group_advantages, informative, kl_k3, reduce


def test_group_advantages_of_four_with_one_success():
    # mean 0.25, sample std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    np.testing.assert_allclose(group_advantages([1, 0, 0, 0]), [1.5, -0.5, -0.5, -0.5], atol=1e-5)
    np.testing.assert_allclose(group_advantages([1, 0, 0, 0], scale=False), [0.75, -0.25, -0.25, -0.25])
    # two successes: mean 0.5, std sqrt(4 * 0.25 / 3)
    np.testing.assert_allclose(group_advantages([1, 1, 0, 0]), np.array([1, 1, -1, -1]) * 0.5 / np.sqrt(1 / 3),
                               atol=1e-5)  # fmt: skip


def test_a_group_with_equal_rewards_carries_nothing_and_is_not_informative():
    np.testing.assert_array_equal(group_advantages([1, 1, 1, 1]), [0, 0, 0, 0])
    np.testing.assert_array_equal(group_advantages([0.3, 0.3]), [0, 0])
    assert not informative([0, 0, 0, 0]) and not informative([1]) and informative([0, 0, 0, 1])


def test_both_clip_ends_and_the_unclipped_middle():
    behaviour = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[0.5, 1.0, 1.1, 1.5]]))  # ratios 0.5, 1.0, 1.1, 1.5
    low, high = 0.2, 0.28
    positive = clipped_surrogate(logp, behaviour, torch.tensor([2.0]), low, high)
    # A > 0: min(rho A, clip(rho) A): 0.5*2 (unclipped below: min keeps the smaller), 2, 2.2, clipped at 1.28*2
    torch.testing.assert_close(positive, torch.tensor([[1.0, 2.0, 2.2, 2.56]]))
    negative = clipped_surrogate(logp, behaviour, torch.tensor([-1.0]), low, high)
    # A < 0: min(-rho, -clip(rho)): ratio 0.5 is clipped at 0.8 -> -0.8; 1.5 keeps -1.5 (the pessimistic side)
    torch.testing.assert_close(negative, torch.tensor([[-0.8, -1.0, -1.1, -1.5]]))


def test_the_gradient_stops_where_the_ratio_is_clipped():
    logp = torch.log(torch.tensor([[1.5, 1.0]])).requires_grad_()
    clipped_surrogate(logp, torch.zeros(1, 2), torch.tensor([1.0]), 0.2, 0.2).sum().backward()
    assert logp.grad[0, 0] == 0 and logp.grad[0, 1] == pytest.approx(1.0)  # d(rho A)/d logp = rho A = 1


def test_kl_k3_is_zero_at_the_reference_and_matches_its_formula():
    logp = torch.log(torch.tensor([0.5, 0.2]))
    torch.testing.assert_close(kl_k3(logp, logp), torch.zeros(2))
    ref = torch.log(torch.tensor([0.25, 0.4]))
    q = torch.log(torch.tensor([0.5, 2.0]))  # ref / pi
    torch.testing.assert_close(kl_k3(logp, ref), torch.exp(q) - q - 1)
    assert (kl_k3(logp, ref) > 0).all()


def test_token_and_sequence_reductions():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    total, count = reduce(per_token, mask, "token_mean")
    assert (float(total), count) == (10.0, 4.0)  # every real token weighs the same: 10 / 4
    total, count = reduce(per_token, mask, "sequence_mean")
    assert (float(total), count) == (6.0, 2.0)  # each row's mean (2 and 4), averaged: 6 / 2
    masked = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0]])
    assert float(reduce(masked, mask, "token_mean")[0]) == 10.0  # padding never counts
    with pytest.raises(ValueError, match="token_mean or sequence_mean"):
        reduce(per_token, mask, "mean")
