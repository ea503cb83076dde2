"""Packed scoring (one sequence, no padding) gives each row the numbers padded scoring gives it: the same
per-token log-probs and the same gradients. A leak of attention across rows, or a dropped or shifted token,
changes them."""

from dataclasses import replace

import pytest
import torch

from rlsys.config import LoraConfig, PolicyConfig
from rlsys.policies import build_policy
from rlsys.policies.packing import action_positions, packed_positions
from tests.policies.test_causal_lm import observations

CAUSAL = PolicyConfig(kind="causal_lm", d_model=64, d_ff=128, num_layers=2, max_new_tokens=16)
ACTIONS = ["click [1]", 'type [4] "ab"', "click [3]"]


def scored(policy, packing: str, obs, actions, **kw):
    policy.cfg = replace(policy.cfg, packing=packing)
    policy.model.zero_grad(set_to_none=True)
    logp, mask = policy.token_logprobs(obs, actions, **kw)
    (logp.sum(-1) * torch.tensor([1.0, -2.0, 0.5])).sum().backward()
    grads = {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.grad is not None}
    return logp.detach(), mask, grads


@pytest.mark.parametrize("cfg", [CAUSAL, replace(CAUSAL, lora=LoraConfig(enabled=True, r=4, alpha=8, dropout=0.0))],
                         ids=["full", "lora"])  # fmt: skip
@pytest.mark.parametrize("constrained", [False, True])
def test_packed_causal_lm_scores_and_gradients_equal_padded(cfg, constrained):
    policy = build_policy(replace(cfg, constrained=constrained), seed=0)
    policy.train()
    obs = observations()
    padded_logp, padded_mask, padded_grads = scored(policy, "off", obs, ACTIONS)
    packed_logp, packed_mask, packed_grads = scored(policy, "on", obs, ACTIONS)
    assert torch.equal(padded_mask, packed_mask)
    assert (padded_logp[padded_mask] != 0).any()
    torch.testing.assert_close(packed_logp, padded_logp, rtol=1e-6, atol=1e-6)
    assert padded_grads.keys() == packed_grads.keys() and padded_grads
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_packed_scores_change_when_rows_see_each_other():
    """The equality above is not vacuous: the same pack scored with one causal mask over all rows (rows
    attending to the rows before them) gives the second and third rows other numbers."""
    policy = build_policy(CAUSAL, seed=0)
    policy.eval()
    obs = observations()
    rows = [policy.prompt_ids(o) + policy.tokenizer(a).input_ids + [policy.tokenizer.eos_token_id]
            for o, a in zip(obs, ACTIONS)]  # fmt: skip
    lengths = [len(r) for r in rows]
    ids = torch.tensor([sum(rows, [])])
    with torch.no_grad():
        separate = policy.model(input_ids=ids, position_ids=packed_positions(lengths), use_cache=False).logits
        leaking = policy.model(input_ids=ids, position_ids=packed_positions(lengths)).logits  # a cache: one mask
    first = lengths[0]
    torch.testing.assert_close(separate[0, :first], leaking[0, :first])
    assert not torch.allclose(separate[0, first:], leaking[0, first:], atol=1e-4)


def test_action_positions_point_at_the_logits_that_predict_each_action_token():
    keep, layout = action_positions([5, 3], [2, 1])
    # row 0 holds positions 0-4, its action tokens are 3 and 4, predicted at 2 and 3; row 1's action is 7, at 6
    assert keep.tolist() == [2, 3, 6]
    assert layout.tolist() == [[0, 1], [0, 2]]


@pytest.mark.parametrize("arch", ["llava", "qwen2_vl"])
@pytest.mark.parametrize("lora", [False, True])
def test_packed_vlm_scores_and_gradients_equal_padded(arch, lora):
    from tests.policies.test_policy_vlm import config, mixed_batch

    lora_cfg = LoraConfig(enabled=lora, r=4, alpha=8, dropout=0.0)
    policy = build_policy(config(arch, lora=lora_cfg), seed=0)
    policy.train()
    obs, actions = mixed_batch(), ["click [1]", 'type [0] "ab"', "click [3]"]
    padded_logp, padded_mask, padded_grads = scored(policy, "off", obs, actions)
    packed_logp, packed_mask, packed_grads = scored(policy, "on", obs, actions)
    assert torch.equal(padded_mask, packed_mask)
    torch.testing.assert_close(packed_logp, padded_logp, rtol=1e-6, atol=1e-6)
    assert padded_grads.keys() == packed_grads.keys() and padded_grads
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    lengths = policy.sequence_lengths(obs, actions)
    assert lengths == [int(n) for n in policy.inputs.packed(policy._encoded(obs), policy._action_ids(actions))[1]]
