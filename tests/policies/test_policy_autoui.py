import dataclasses
import io
import json

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw
from safetensors.torch import save_file
from transformers import ByT5Tokenizer, T5Config, T5ForConditionalGeneration

from rlsys.config import PolicyConfig
from rlsys.core.types import Observation
from rlsys.policies.autoui import AutoUIModel, AutoUIPolicy
from rlsys.policies.image_features import FEATURE_KEY

TINY = dict(d_model=32, d_ff=64, num_layers=1, num_heads=2, image_feature_dim=16, image_size=32)
CFG = PolicyConfig(kind="autoui", max_new_tokens=16, **TINY)
LONG_GOAL = "Search for the cheapest direct flight from Lisbon to Oslo next Friday and open the first result"


def screenshot(color: str, box: str | None = None) -> bytes:
    im = Image.new("RGB", (96, 64), color)
    if box:
        ImageDraw.Draw(im).rectangle((20, 10, 60, 40), fill=box)
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def observation(task: str, color: str = "white", box: str | None = "blue", previous=()) -> Observation:
    return Observation(screenshot(color, box), "", "", task, {"previous_actions": list(previous)})


def with_(cfg: PolicyConfig, **changes) -> PolicyConfig:
    return dataclasses.replace(cfg, **changes)


# -- loading a checkpoint in the released layout


def released_checkpoint(folder, fmt: str, tie: bool, image_dim: int = 1408) -> dict:
    """Auto-UI-Base's layout at tiny sizes: a config.json as the release writes it (a plain T5 config, no
    image-feature size) and a T5 state dict with the tied copies the file carries, plus the fusion block.
    `tie=False` is the FLAN-T5 (v1.1) style: gated-GELU, an lm_head of its own, no output scaling."""
    config = {
        "architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "vocab_size": len(ByT5Tokenizer()),
        "d_model": 32, "d_ff": 64, "d_kv": 16, "num_layers": 1, "num_decoder_layers": 1, "num_heads": 2,
        "dropout_rate": 0.1, "feed_forward_proj": "relu" if tie else "gated-gelu", "tie_word_embeddings": tie,
        "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1, "is_encoder_decoder": True,
    }  # fmt: skip
    torch.manual_seed(5)
    state = dict(T5ForConditionalGeneration(T5Config(**config)).state_dict())
    d = config["d_model"]
    state.update({
        "encoder.embed_tokens.weight": state["shared.weight"], "decoder.embed_tokens.weight": state["shared.weight"],
        "lm_head.weight": state["shared.weight"] if tie else torch.randn_like(state["shared.weight"]),
        "image_dense.weight": torch.randn(d, image_dim), "image_dense.bias": torch.randn(d),
        "mha_layer.in_proj_weight": torch.randn(3 * d, d), "mha_layer.in_proj_bias": torch.randn(3 * d),
        "mha_layer.out_proj.weight": torch.randn(d, d), "mha_layer.out_proj.bias": torch.randn(d),
        "gate_dense.weight": torch.randn(d, 2 * d), "gate_dense.bias": torch.randn(d),
    })  # fmt: skip
    state = {k: v.clone().contiguous() for k, v in state.items()}  # separate storage, as in the released file
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    ByT5Tokenizer().save_pretrained(folder)
    if fmt == "bin":
        torch.save(state, folder / "pytorch_model.bin")
    else:
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return state


@pytest.mark.parametrize("fmt", ["bin", "safetensors"])
@pytest.mark.parametrize("tie", [True, False])
def test_released_layout_loads_strictly(tmp_path, fmt, tie):
    written = released_checkpoint(tmp_path, fmt, tie)
    model, info = AutoUIModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info.get("mismatched_keys"), info
    assert model.config.image_feature_dim == 1408
    loaded = model.state_dict()
    for key in ("image_dense.weight", "mha_layer.in_proj_weight", "gate_dense.bias", "shared.weight", "lm_head.weight"):
        torch.testing.assert_close(loaded[key], written[key], rtol=0, atol=0)
    # transformers 5 always declares T5's lm_head tied, but keeps a checkpoint's own lm_head when it differs
    assert (model.lm_head.weight.data_ptr() == model.shared.weight.data_ptr()) == tie
    assert model.config.scale_decoder_outputs == tie


@pytest.mark.parametrize("tie", [True, False])
def test_policy_acts_from_released_layout_and_round_trips(tmp_path, tie):
    released_checkpoint(tmp_path / "released", "bin", tie)
    cfg = with_(CFG, path=str(tmp_path / "released"), image_feature_dim=1408, max_new_tokens=4)
    policy = AutoUIPolicy.create(cfg)
    samples = policy.act([observation("Open settings"), observation(LONG_GOAL)])
    assert len(samples) == 2 and all(s.logprob < 0 for s in samples)
    policy.save_pretrained(tmp_path / "saved")
    loaded = AutoUIPolicy.create(with_(cfg, path=str(tmp_path / "saved")))
    actions = ["tap", "type hello"]
    torch.testing.assert_close(
        policy.log_probs([observation("Open settings"), observation(LONG_GOAL)], actions),
        loaded.log_probs([observation("Open settings"), observation(LONG_GOAL)], actions),
        rtol=0, atol=1e-6,
    )  # fmt: skip
    with pytest.raises(ValueError, match="hidden size"):
        AutoUIPolicy.create(with_(cfg, image_feature_dim=16))


# -- the policy


def test_save_and_from_pretrained_round_trip(tmp_path):
    policy = AutoUIPolicy.create(CFG, seed=1)
    policy.save_pretrained(tmp_path / "p")
    loaded = AutoUIPolicy.create(with_(CFG, path=str(tmp_path / "p")))
    actions = ["click", 'Action Decision: "action_type": "PRESS_BACK"']
    # fresh observations for each, so each policy's own vision encoder computes the features
    before = policy.log_probs([observation("Open settings"), observation(LONG_GOAL, "gray")], actions)
    after = loaded.log_probs([observation("Open settings"), observation(LONG_GOAL, "gray")], actions)
    torch.testing.assert_close(before, after, rtol=0, atol=1e-6)


def test_screenshot_matters_and_features_are_computed_once():
    policy = AutoUIPolicy.create(CFG, seed=2)
    calls = []  # batch size of each call of the vision encoder
    policy.vision.register_forward_hook(
        lambda module, args, kwargs, out: calls.append(len(kwargs["pixel_values"])), with_kwargs=True
    )
    red, green = observation("Open settings", "red", None), observation("Open settings", "green", "black")

    policy.act([red, green])
    assert calls == [2]  # one batch for both
    for obs in (red, green):
        assert obs.features[FEATURE_KEY].shape == (16,) and obs.features[FEATURE_KEY].dtype == np.float32

    action = "Action Decision: tap"
    lp_red, lp_green = policy.log_probs([red, green], [action, action]).tolist()
    assert calls == [2]  # reused, not recomputed
    assert abs(lp_red - lp_green) > 1e-3

    red.features[FEATURE_KEY] = green.features[FEATURE_KEY].copy()  # the cached vector is what the model sees
    # alone instead of in a batch of two, float32 sums round differently: ~1e-7 of a log-prob of ~-115
    assert policy.log_probs([red], [action]).item() == pytest.approx(lp_green, rel=1e-6)
    assert calls == [2]


def teach(policy: AutoUIPolicy, observations, actions, steps: int = 40) -> None:
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    policy.train()
    for _ in range(steps):
        loss = -policy.log_probs(observations, actions).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.parametrize("greedy", [False, True])
def test_behaviour_logprob_equals_teacher_forced(greedy):
    policy = AutoUIPolicy.create(CFG, seed=3)
    obs = [observation("Ok", "white"), observation(LONG_GOAL, "black", previous=["tap"]), observation("Go back")]
    # the first action ends with EOS well before the limit (padding follows it); the second is cut at the limit
    teach(policy, obs[:2], ["ok", "type the whole goal text here"])
    torch.manual_seed(0)
    samples = policy.act(obs, greedy=greedy)
    lengths = [len(s.text) for s in samples]
    assert min(lengths) < CFG.max_new_tokens and max(lengths) == CFG.max_new_tokens, samples
    recorded = torch.tensor([s.logprob for s in samples])
    with torch.no_grad():
        forced = policy.log_probs(obs, [s.text for s in samples])
    torch.testing.assert_close(recorded, forced, rtol=0, atol=1e-4)


def test_padding_does_not_change_log_probs():
    policy = AutoUIPolicy.create(CFG, seed=4)
    short = observation("Go home")
    alone = policy.log_probs([short], ["press home"])
    batched = policy.log_probs([short, observation(LONG_GOAL * 2, "gray")], ["press home", "a much longer action text"])
    torch.testing.assert_close(batched[:1], alone, rtol=0, atol=1e-5)


def test_prompt_is_truncated_from_the_left():
    policy = AutoUIPolicy.create(with_(CFG, max_prompt_tokens=24), seed=5)
    a, b = observation(LONG_GOAL, previous=["tap"]), observation(LONG_GOAL, previous=["type hello"])
    ids = policy.prompt_inputs([a]).input_ids[0].tolist()
    assert len(ids) == 24 and ids[-1] == policy.tokenizer.eos_token_id
    assert policy.tokenizer.decode(ids, skip_special_tokens=True) == LONG_GOAL[-23:]
    # only the goal's end is seen, so the previous action no longer matters...
    torch.testing.assert_close(policy.log_probs([a], ["tap"]), policy.log_probs([b], ["tap"]), rtol=0, atol=0)
    # ...while with room for the whole prompt it does
    full = AutoUIPolicy.create(CFG, seed=5)
    assert abs(full.log_probs([a], ["tap"]).item() - full.log_probs([b], ["tap"]).item()) > 1e-4
