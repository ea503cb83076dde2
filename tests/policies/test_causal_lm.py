import random
import string
from dataclasses import replace

import pytest
import torch
from transformers import AutoTokenizer

from rlsys.config import PolicyConfig
from rlsys.config.policy import LoraConfig
from rlsys.core.grammar import Grammar
from rlsys.core.types import Observation
from rlsys.envs.web.spaces.element import grammar
from rlsys.policies import build_policy
from rlsys.policies.causal_lm import byte_tokenizer

CFG = PolicyConfig(kind="causal_lm", d_model=64, d_ff=128, num_layers=1, max_new_tokens=16)
LORA = replace(CFG, lora=LoraConfig(enabled=True, r=4, alpha=8, dropout=0.0))


def observation(n_elements: int, editable=(), task="Click on Tab #2.", previous=()) -> Observation:
    elements = [
        {"tag": "input" if i in editable else "button", "text": f"e{i}", "editable": i in editable}
        for i in range(n_elements)
    ]
    ui = "\n".join(f'[{i}] {e["tag"]} "{e["text"]}"' for i, e in enumerate(elements))
    extras = {"grammar": grammar(elements, max_text=8).to_dict(), "previous_actions": list(previous)}
    return Observation(b"", ui, "about:blank", task, extras)


def observations() -> list[Observation]:
    """Prompts of different lengths, so batches are padded."""
    return [
        observation(2),
        observation(9, editable={1, 4}, task="Type a name into the second box, then submit the form."),
        observation(5, editable={0}, previous=["click [3]"]),
    ]


def test_byte_tokenizer_round_trips_printable_text_one_id_per_byte():
    tokenizer = byte_tokenizer()
    rng = random.Random(0)
    texts = [string.printable, 'type [3] "it\'s  two  spaces"\n', "".join(rng.choices(string.printable, k=300))]
    for text in texts:
        ids = tokenizer(text).input_ids
        assert ids == list(text.encode())
        assert tokenizer.decode(ids) == text
    assert tokenizer.eos_token_id == tokenizer.pad_token_id == 256 and len(tokenizer) == 257


def test_acts_inside_the_element_grammar():
    policy = build_policy(CFG, seed=0)
    rng = random.Random(0)
    obs = [observation(rng.randint(1, 12), editable={0, 3}) for _ in range(12)]
    for sample, o in zip(policy.act(obs), obs):
        assert Grammar.from_dict(o.extras["grammar"]).accepts(sample.text), sample.text
        assert sample.logprob is not None and sample.logprob <= 0


def test_single_legal_action_has_logprob_zero():
    policy = build_policy(CFG, seed=1)
    (sample,) = policy.act([observation(1)])
    assert sample.text == "click [0]" and sample.logprob == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("constrained", [True, False])
def test_behaviour_logprob_matches_teacher_forcing(constrained):
    policy = build_policy(replace(CFG, constrained=constrained, temperature=1.0), seed=2)
    obs = observations()
    torch.manual_seed(0)
    samples = policy.act(obs)
    token_ids = [s.token_ids for s in samples]
    sampled = torch.tensor([s.logprob for s in samples])
    logp, mask = policy.token_logprobs(obs, [s.text for s in samples], token_ids)
    torch.testing.assert_close(logp.sum(-1), sampled, rtol=0, atol=1e-4)
    assert mask.sum(-1).tolist() == [len(ids) + 1 for ids in token_ids]  # the action and its EOS
    if constrained:  # grammar text is printable: re-tokenizing it gives back the sampled ids
        by_text, _ = policy.token_logprobs(obs, [s.text for s in samples])
        torch.testing.assert_close(by_text.sum(-1), sampled, rtol=0, atol=1e-4)
    alone = torch.cat(
        [policy.token_logprobs([o], [s.text], [ids])[0].sum(-1) for o, s, ids in zip(obs, samples, token_ids)]
    )
    torch.testing.assert_close(alone, sampled, rtol=0, atol=1e-4)


def test_prompt_keeps_the_task_and_fits_max_prompt_tokens():
    policy = build_policy(replace(CFG, max_prompt_tokens=40), seed=0)
    ids = policy.prompt_ids(observation(30))
    text = policy.tokenizer.decode(ids)
    assert len(ids) == 40 and text.startswith("Task: Click on Tab #2.") and text.endswith("\nAction: ")


def test_d_model_must_fit_64_wide_heads():
    with pytest.raises(ValueError, match="policy.d_model"):
        build_policy(replace(CFG, d_model=48))


def test_save_and_from_pretrained_round_trip(tmp_path):
    policy = build_policy(CFG, seed=3)
    obs = observations()
    actions = ["click [1]", 'type [4] "ann"', "click [0]"]
    policy.save_pretrained(tmp_path / "p")
    assert AutoTokenizer.from_pretrained(tmp_path / "p")("click [1]").input_ids == list(b"click [1]")
    loaded = build_policy(replace(CFG, path=str(tmp_path / "p")))
    torch.testing.assert_close(policy.log_probs(obs, actions), loaded.log_probs(obs, actions))
    assert [s.text for s in policy.act(obs, greedy=True)] == [s.text for s in loaded.act(obs, greedy=True)]


def randomize_adapter(policy, seed: int) -> None:
    """LoRA starts as the identity (B = 0); give it weights that change the outputs."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)


def test_lora_publishes_the_adapter_alone():
    learner, runner = build_policy(LORA, seed=4), build_policy(LORA, seed=4)
    obs, actions = observations(), ["click [1]", "click [8]", "click [2]"]
    randomize_adapter(learner, seed=0)
    state = learner.state_dict()
    assert state and all("lora_" in k for k in state)
    before = runner.log_probs(obs, actions)
    runner.load_state_dict(state, version=7)
    after = runner.log_probs(obs, actions)
    assert runner.version == 7 and not torch.allclose(before, after, atol=1e-3)
    torch.testing.assert_close(after, learner.log_probs(obs, actions))
    config = learner.adapter_config()
    assert config["r"] == 4 and config["lora_alpha"] == 8 and "q_proj" in config["target_modules"]
    assert build_policy(CFG).adapter_config() is None


def test_lora_save_and_from_pretrained_round_trip(tmp_path):
    policy = build_policy(LORA, seed=5)
    randomize_adapter(policy, seed=1)
    obs, actions = observations(), ["click [0]", "click [3]", "click [4]"]
    policy.save_pretrained(tmp_path / "p")
    assert (tmp_path / "p" / "adapter").is_dir() and (tmp_path / "p" / "base" / "tokenizer.json").is_file()
    loaded = build_policy(replace(LORA, path=str(tmp_path / "p")))
    torch.testing.assert_close(policy.log_probs(obs, actions), loaded.log_probs(obs, actions))
    base = build_policy(replace(CFG, path=str(tmp_path / "p" / "base")))  # the base alone, without the adapter
    assert not torch.allclose(base.log_probs(obs, actions), loaded.log_probs(obs, actions), atol=1e-3)


def test_publish_adapter_needs_lora():
    with pytest.raises(ValueError, match="policy.lora.enabled"):
        build_policy(replace(CFG, publish="adapter"))


def test_training_raises_the_target_logprob():
    policy = build_policy(CFG, seed=6)
    obs, actions = observations(), ["click [1]", 'type [4] "ann"', "click [3]"]
    before = policy.log_probs(obs, actions).detach()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=3e-3)
    policy.train()
    for _ in range(5):
        optimizer.zero_grad()
        (-policy.log_probs(obs, actions).sum()).backward()
        optimizer.step()
    after = policy.log_probs(obs, actions).detach()
    assert (after > before).all() and after.sum() > before.sum() + 1, (before, after)


def test_each_sample_carries_its_prompt_without_the_padding():
    policy = build_policy(replace(CFG, max_prompt_tokens=40), seed=0)
    short, long = observation(1), observation(30)
    samples = policy.act([short, long])  # left-padded to the longer prompt
    assert samples[0].prompt == policy.tokenizer.decode(policy.prompt_ids(short))
    assert samples[1].prompt == policy.tokenizer.decode(policy.prompt_ids(long))
    assert samples[0].prompt.startswith("Task: ") and samples[0].prompt.endswith("\nAction: ")
