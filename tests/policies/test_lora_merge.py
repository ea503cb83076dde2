"""Acting with the LoRA adapter merged into the base weights (policy.lora.merge_for_acting): the same actions and
log-probs as the unmerged adapter, and a base that training, loading and thousands of merges leave bit for bit
what it was."""

from dataclasses import replace

import pytest
import torch

from rlsys.policies import build_policy
from tests.policies.test_causal_lm import LORA, observations, randomize_adapter
from tests.policies.test_policy_vlm import lora_config, mixed_batch

KINDS = ["causal_lm", "llava", "qwen2_vl"]
ACTIONS = ["click [1]", "click [0]", "click [2]"]


def build(kind: str, merge: bool, seed: int = 0, **kw):
    cfg = LORA if kind == "causal_lm" else lora_config(kind)
    cfg = replace(cfg, lora=replace(cfg.lora, merge_for_acting=merge), **kw)
    return build_policy(cfg, seed=seed)


def batch(kind: str) -> list:
    return observations() if kind == "causal_lm" else mixed_batch()


def base_weights(policy) -> dict[str, torch.Tensor]:
    """Every weight but the adapter's, as the policy shows them to training and saving."""
    return {k: v.clone() for k, v in policy.model.state_dict().items() if "lora_" not in k}


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    changed = [k for k in a if not torch.equal(a[k], b[k])]
    assert not changed, changed[:5]


def lora_calls(policy) -> list:
    """Counts the calls of the adapter's modules."""
    calls = []
    for name, module in policy.model.named_modules():
        if name.endswith("lora_A.default"):
            module.register_forward_hook(lambda *_: calls.append(1))
    return calls


def acted(policy, obs, seed: int = 0) -> tuple[list[str], torch.Tensor]:
    torch.manual_seed(seed)
    samples = policy.act(obs)
    return [s.text for s in samples], torch.tensor([s.logprob for s in samples])


@pytest.mark.parametrize("kind", KINDS)
def test_merged_acting_samples_what_the_unmerged_adapter_does(kind):
    merged, unmerged = build(kind, merge=True), build(kind, merge=False)
    randomize_adapter(merged, seed=0)
    randomize_adapter(unmerged, seed=0)
    calls_merged, calls_unmerged = lora_calls(merged), lora_calls(unmerged)
    obs = batch(kind)
    for seed in range(3):  # sampled, and the second and third acts on the merge already made
        texts, logp = acted(merged, obs, seed)
        expected_texts, expected_logp = acted(unmerged, obs, seed)
        assert texts == expected_texts
        torch.testing.assert_close(logp, expected_logp, atol=1e-4, rtol=0)
    greedy = [s.text for s in merged.act(obs, greedy=True)]
    assert greedy == [s.text for s in unmerged.act(obs, greedy=True)]
    assert not calls_merged and calls_unmerged  # merged, decoding never runs the adapter's matmuls
    torch.testing.assert_close(merged.log_probs(obs, greedy), unmerged.log_probs(obs, greedy))


@pytest.mark.parametrize("kind", ["causal_lm", "llava"])
def test_training_between_acts_sees_the_adapter_unmerged_and_the_base_exact(kind):
    merged, unmerged = build(kind, merge=True, seed=1), build(kind, merge=False, seed=1)
    for policy in (merged, unmerged):
        randomize_adapter(policy, seed=1)
    start = base_weights(merged)
    obs = batch(kind)
    optimizers = [torch.optim.Adam(p.parameters(), lr=0.01) for p in (merged, unmerged)]
    for _ in range(3):
        texts, logp = acted(merged, obs)
        expected_texts, expected_logp = acted(unmerged, obs)
        assert texts == expected_texts  # the merge follows the adapter that training changed
        torch.testing.assert_close(logp, expected_logp, atol=1e-4, rtol=0)
        for policy, optimizer in zip((merged, unmerged), optimizers):
            policy.train()
            token_logp, mask = policy.token_logprobs(obs, ACTIONS)
            optimizer.zero_grad()
            (-token_logp.sum() / mask.sum()).backward()
            optimizer.step()
        assert_same_weights(base_weights(merged), start)
    assert_same_weights(merged.state_dict(), unmerged.state_dict())  # the adapter is what training made it
    torch.testing.assert_close(merged.log_probs(obs, ACTIONS), unmerged.log_probs(obs, ACTIONS), atol=0, rtol=0)


@pytest.mark.parametrize("kind", ["causal_lm", "llava"])
def test_a_loaded_adapter_is_what_the_next_act_uses(kind):
    runner, reference = build(kind, merge=True, seed=2), build(kind, merge=False, seed=2)
    obs = batch(kind)
    runner.act(obs)  # merged with the adapter it started with
    for version in (1, 2):
        randomize_adapter(reference, seed=version)
        runner.load_state_dict(reference.state_dict(), version=version)
        texts, logp = acted(runner, obs)
        expected_texts, expected_logp = acted(reference, obs)
        assert texts == expected_texts
        torch.testing.assert_close(logp, expected_logp, atol=1e-4, rtol=0)


def test_an_adapter_changed_in_place_between_two_acts_is_merged_again():
    """An optimizer step through references the optimizer holds, with no call to the policy in between."""
    runner, reference = build("causal_lm", merge=True, seed=3), build("causal_lm", merge=False, seed=3)
    obs = batch("causal_lm")
    runner.act(obs)
    randomize_adapter(reference, seed=4)
    adapter = dict(reference.model.named_parameters())
    with torch.no_grad():
        for name, param in runner._model.named_parameters():  # not through `model`, which would unmerge
            if "lora_" in name:
                param.copy_(adapter[name])
    texts, logp = acted(runner, obs)
    expected_texts, expected_logp = acted(reference, obs)
    assert texts == expected_texts
    torch.testing.assert_close(logp, expected_logp, atol=1e-4, rtol=0)


def test_many_versions_in_bfloat16_leave_the_base_bit_for_bit():
    """A runner merges once per published version: unmerging by subtraction would drift in bf16."""
    runner = build("causal_lm", merge=True, seed=5, dtype="bfloat16", max_new_tokens=2)
    learner = build("causal_lm", merge=False, seed=5, dtype="bfloat16")
    start = base_weights(runner)
    obs = batch("causal_lm")[:1]
    for version in range(50):
        randomize_adapter(learner, seed=version)
        runner.load_state_dict(learner.state_dict(), version=version)
        runner.act(obs, greedy=True)
    assert runner.merged_lora.merged
    assert_same_weights(base_weights(runner), start)
