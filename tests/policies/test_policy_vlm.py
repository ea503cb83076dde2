"""VLM policies (LLaVA and Qwen2-VL families) built from tiny configs, through the real
transformers / peft loading paths."""

import importlib.util
import io
import json

import pytest
import torch
from PIL import Image

from rlsys.config import LoraConfig, PolicyConfig
from rlsys.core.grammar import Grammar
from rlsys.core.types import Observation
from rlsys.envs.web.spaces import element
from rlsys.policies import build_policy
from rlsys.policies.prompts import agent_prompt
from rlsys.policies.vlm import language_model_linear_layers

ARCHS = ["llava", "qwen2_vl"]


def config(arch: str, **kw) -> PolicyConfig:
    base = dict(kind="vlm", arch=arch, d_model=32, d_ff=64, num_heads=2, num_layers=2, max_new_tokens=20)
    return PolicyConfig(**(base | kw))


def png(color, size) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def observation(n: int, color=(200, 30, 30), task="press the button", grammar=True) -> Observation:
    elements = [{"tag": "input" if i == 0 else "button", "text": f"e{i}", "editable": i == 0} for i in range(n)]
    extras = {"grammar": element.grammar(elements, max_text=6).to_dict()} if grammar else {}
    ui = "\n".join(f'[{i}] {e["tag"]} "{e["text"]}"' for i, e in enumerate(elements))
    return Observation(png(color, (40 + 7 * n, 36)), ui, "http://site.test/", task, extras)


def mixed_batch() -> list[Observation]:
    """Prompts of different lengths, so rows are padded."""
    return [
        observation(2),
        observation(12, (20, 20, 220), "a much longer task that makes this prompt longer"),
        observation(5),
    ]


@pytest.fixture(scope="module", params=ARCHS)
def arch(request):
    return request.param


@pytest.mark.parametrize("greedy", [False, True])
def test_act_time_logprob_equals_teacher_forced(arch, greedy):
    policy = build_policy(config(arch), seed=0)
    obs = mixed_batch()
    samples = policy.act(obs, greedy=greedy)
    forced = policy.log_probs(obs, [s.text for s in samples])
    torch.testing.assert_close(torch.tensor([s.logprob for s in samples]), forced.detach(), atol=1e-4, rtol=0)


def test_constrained_decoding_only_emits_parseable_actions(arch):
    policy = build_policy(config(arch), seed=1)
    obs = [observation(n) for n in (1, 3, 8, 12)] * 3
    for sample, o in zip(policy.act(obs), obs):
        assert Grammar.from_dict(o.extras["grammar"]).accepts(sample.text), sample.text
        element.parse(sample.text, o.ui_text.count("\n") + 1)


def test_padding_does_not_change_log_probs(arch):
    policy = build_policy(config(arch), seed=2)
    obs = mixed_batch()
    actions = ["click [1]", "type [0] hello", "click [4]"]
    together = policy.log_probs(obs, actions)
    alone = torch.cat([policy.log_probs([o], [a]) for o, a in zip(obs, actions)])
    torch.testing.assert_close(together, alone, atol=1e-4, rtol=1e-4)


def test_the_screenshot_reaches_the_model(arch):
    policy = build_policy(config(arch), seed=3)
    red, blue = observation(3, (255, 0, 0)), observation(3, (0, 0, 255))
    scores = policy.log_probs([red, blue], ["click [1]", "click [1]"])
    assert abs(float((scores[0] - scores[1]).detach())) > 1e-4


def test_save_and_from_pretrained_round_trip(arch, tmp_path):
    policy = build_policy(config(arch), seed=4)
    policy.save_pretrained(tmp_path / "p")
    assert (tmp_path / "p" / "model.safetensors").exists() and (tmp_path / "p" / "config.json").exists()
    loaded = build_policy(config(arch, path=str(tmp_path / "p")))
    obs = mixed_batch()
    actions = ["click [0]", "type [0] abc", "click [2]"]
    torch.testing.assert_close(policy.log_probs(obs, actions), loaded.log_probs(obs, actions))
    assert [s.text for s in policy.act(obs, greedy=True)] == [s.text for s in loaded.act(obs, greedy=True)]


def test_unconstrained_pae_turn_decodes_text(arch):
    """Without a grammar the model writes free text; the prompt is the PAE one."""
    policy = build_policy(config(arch, max_new_tokens=8), seed=5)
    (sample,) = policy.act([observation(3, grammar=False)])
    assert isinstance(sample.text, str) and sample.logprob < 0
    prompt = policy.inputs.chat(agent_prompt(observation(3), "pae_agent"))
    assert "Thought:" in prompt and "press the button" in prompt and '[2] button "e2"' in prompt


# -- LoRA


def lora_config(arch: str, **kw) -> PolicyConfig:
    return config(arch, lora=LoraConfig(enabled=True, r=4, alpha=8, dropout=0.0), **kw)


def train_a_little(policy, steps=3):
    obs, actions = mixed_batch(), ["click [1]", "type [0] hello", "click [4]"]
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.05)
    policy.train()
    for _ in range(steps):
        logp, mask = policy.token_logprobs(obs, actions)
        loss = -logp.sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return obs, actions


def test_lora_targets_only_language_model_linear_layers(arch):
    policy = build_policy(lora_config(arch), seed=6)
    trainable = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert all(".language_model." in n for n in trainable), [n for n in trainable if "language_model" not in n][:3]
    assert not any("vision" in n or "visual" in n for n in trainable)
    targets = language_model_linear_layers(build_policy(config(arch), seed=6).model)
    assert len(targets) == 7 * 2  # q k v o gate up down per layer, 2 layers


def test_adapter_only_update_matches_the_learner_exactly(arch):
    learner = build_policy(lora_config(arch), seed=7)
    runner = build_policy(lora_config(arch), seed=7)  # the same base: a replica built from the same seed
    obs, actions = train_a_little(learner)
    before = runner.log_probs(obs, actions).detach()
    state = learner.state_dict()
    assert state and all("lora_" in k for k in state)
    full_size = sum(v.numel() for v in learner.model.state_dict().values())
    assert sum(v.numel() for v in state.values()) < full_size / 4
    runner.load_state_dict(state, version=1)
    after = runner.log_probs(obs, actions).detach()
    expected = learner.log_probs(obs, actions).detach()
    torch.testing.assert_close(after, expected)
    assert (after - before).abs().max() > 1e-3  # the update changed the replica's outputs
    # publishing the full state dict instead gives the same replica
    full = build_policy(lora_config(arch, publish="full"), seed=7)
    full.load_state_dict(learner.model.state_dict())
    torch.testing.assert_close(full.log_probs(obs, actions).detach(), expected)


def test_lora_checkpoint_round_trip(arch, tmp_path):
    policy = build_policy(lora_config(arch), seed=8)
    obs, actions = train_a_little(policy)
    policy.save_pretrained(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "adapter" / "adapter_config.json").exists()
    assert (tmp_path / "ckpt" / "base" / "config.json").exists()  # built from config: the base is kept too
    loaded = build_policy(lora_config(arch, path=str(tmp_path / "ckpt")))
    torch.testing.assert_close(loaded.log_probs(obs, actions), policy.log_probs(obs, actions))
    assert sum(p.numel() for p in loaded.parameters()) == sum(p.numel() for p in policy.parameters())


def test_lora_on_a_base_folder_saves_a_pointer_not_a_copy(tmp_path):
    build_policy(config("llava"), seed=9).save_pretrained(tmp_path / "base")
    policy = build_policy(lora_config("llava", path=str(tmp_path / "base")))
    obs, actions = train_a_little(policy)
    policy.save_pretrained(tmp_path / "ckpt")
    assert not (tmp_path / "ckpt" / "base").exists()
    assert json.loads((tmp_path / "ckpt" / "base.json").read_text())["absolute"] == str((tmp_path / "base").resolve())
    loaded = build_policy(lora_config("llava", path=str(tmp_path / "ckpt")))
    torch.testing.assert_close(loaded.log_probs(obs, actions), policy.log_probs(obs, actions))


def test_gradient_checkpointing_gives_the_same_gradients(arch):
    grads = []
    for checkpointing in (False, True):
        policy = build_policy(lora_config(arch, gradient_checkpointing=checkpointing), seed=10)
        policy.train()
        obs = mixed_batch()
        logp, mask = policy.token_logprobs(obs, ["click [1]", "type [0] hi", "click [3]"])
        (-logp.sum() / mask.sum()).backward()
        grads.append(torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None]))
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is not None, reason="bitsandbytes is installed")
def test_4bit_without_bitsandbytes_says_how_to_fix_it(tmp_path):
    build_policy(config("llava"), seed=11).save_pretrained(tmp_path / "base")
    with pytest.raises(RuntimeError, match="pip install bitsandbytes"):
        build_policy(config("llava", path=str(tmp_path / "base"), load_in_4bit=True))


def test_a_runner_replica_shares_the_learners_frozen_base(tmp_path):
    """Runners get only adapters, so a base built from config must be the learner's."""
    from rlsys.actors.runner import EnvRunner
    from tests.conftest import make_config

    cfg = make_config(
        tmp_path,
        policy__kind="vlm",
        policy__lora={"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0},
        run__seed=3,
    )
    learner = build_policy(cfg.policy, seed=cfg.run.seed)
    obs, actions = train_a_little(learner)
    runner = EnvRunner("runner-5", cfg, weight_store=None, seed=3 * 1000 + 5)
    runner.policy.load_state_dict(learner.state_dict(), version=1)
    torch.testing.assert_close(runner.policy.log_probs(obs, actions), learner.log_probs(obs, actions))


def test_special_token_text_on_a_page_or_in_an_action_stays_text(arch):
    """A page (or a typed action) that spells `<image>` must not become an image placeholder."""
    policy = build_policy(config(arch), seed=12)
    tricky = observation(3, task="find <image> and <|image_pad|> <|vision_start|> on the page", grammar=False)
    tricky.extras["history"] = [{"step": 1, "action": "type [0] <image>"}]
    obs = [tricky, observation(4)]
    samples = policy.act(obs)
    assert all("<image>" not in s.text for s in samples)
    forced = policy.log_probs(obs, ["type [0] <image>", "click [1]"])
    assert torch.isfinite(forced).all()
    special = {policy.tokenizer.convert_tokens_to_ids(t) for t in ("<image>", "<|image_pad|>", "</s>")}
    assert not special & {i for i, text in enumerate(policy.tokens.texts) if text}  # never typed as text


def test_an_observation_is_encoded_once_while_it_is_among_the_last_kept(monkeypatch):
    from rlsys.policies import vlm

    policy = build_policy(config("qwen2_vl"), seed=0)
    encode, calls = policy.inputs.encode, []
    monkeypatch.setattr(policy.inputs, "encode", lambda *a: calls.append(1) or encode(*a))
    monkeypatch.setattr(vlm, "ENCODINGS_KEPT", 3)
    batch = mixed_batch()
    first = policy._encoded(batch)
    assert policy._encoded(batch) == first and len(calls) == 3  # the same inputs, not encoded again
    policy.sequence_lengths(batch, ["click [0]"] * 3)
    policy.token_logprobs(batch, ["click [0]"] * 3)
    assert len(calls) == 3
    policy._encoded([observation(3)])  # a fourth pushes out the oldest
    policy._encoded(batch[1:])
    assert len(calls) == 4
    policy._encoded(batch[:1])
    assert len(calls) == 5
    kept = dict(policy._encodings)
    policy.act([observation(4), observation(6)])  # acting sees each observation once: it keeps none
    assert policy._encodings == kept and len(calls) == 7


def test_token_logprobs_score_the_sampled_ids_when_given():
    """An engine's sampled ids are what is scored, not the text tokenized again (which a tokenizer with merges
    may spell otherwise): ids of another action give that action's log-prob."""
    policy = build_policy(config("qwen2_vl"), seed=0)
    obs = mixed_batch()[:2]
    other = [policy.tokenizer("click [3]", add_special_tokens=False).input_ids] * 2
    with torch.no_grad():
        as_ids, _ = policy.token_logprobs(obs, ["click [1]"] * 2, token_ids=other)
        as_text, _ = policy.token_logprobs(obs, ["click [3]"] * 2)
        own, _ = policy.token_logprobs(obs, ["click [1]"] * 2, token_ids=[None, None])
        plain, _ = policy.token_logprobs(obs, ["click [1]"] * 2)
    torch.testing.assert_close(as_ids, as_text)
    torch.testing.assert_close(own, plain)
    assert not torch.allclose(as_ids.sum(-1), plain.sum(-1))
