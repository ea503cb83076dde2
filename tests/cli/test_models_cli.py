"""rlsys-models: merging a LoRA checkpoint into a standalone model, and extracting BLIP-2's vision tower, on tiny
models built offline and loaded back through the real from_pretrained."""

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import Blip2Config, Blip2ForConditionalGeneration, Blip2VisionModel

from rlsys import __version__
from rlsys.cli.models import main
from rlsys.policies import build_policy
from rlsys.policies.image_features import PooledImageFeatures
from tests.policies.test_policy_vlm import config, lora_config, observation, train_a_little
from tests.support.hub_cache import fill_hub_cache


def lora_checkpoint(tmp_path, base: str):
    """A trained LoRA policy saved as a run's checkpoint; returns the checkpoint folder and the policy's scores."""
    policy = build_policy(lora_config("llava", path=base))
    obs, actions = train_a_little(policy, steps=2)
    ckpt = tmp_path / "runs" / "a" / "checkpoints" / "000002"
    policy.save_pretrained(ckpt / "policy")
    return ckpt, obs, actions, policy.log_probs(obs, actions).detach()


def test_merge_lora_gives_a_standalone_model_with_the_adapters_outputs(tmp_path, capsys):
    build_policy(config("llava"), seed=1).save_pretrained(tmp_path / "base")
    ckpt, obs, actions, expected = lora_checkpoint(tmp_path, str(tmp_path / "base"))
    assert main(["merge-lora", str(ckpt), str(tmp_path / "merged")]) == 0
    assert "LoRA merged into" in capsys.readouterr().out
    merged = tmp_path / "merged"
    assert (merged / "config.json").is_file() and (merged / "model.safetensors").is_file()
    assert not (merged / "adapter").exists() and not (merged / "base.json").exists()
    assert any(name.startswith("tokenizer") for name in os.listdir(merged))  # the processor came along
    assert not any("lora" in key for key in json.dumps(json.loads((merged / "config.json").read_text())))
    standalone = build_policy(config("llava", path=str(merged)))
    assert not hasattr(standalone.model, "peft_config")
    torch.testing.assert_close(standalone.log_probs(obs, actions), expected, atol=1e-5, rtol=1e-5)
    base = build_policy(config("llava", path=str(tmp_path / "base")))
    assert (base.log_probs(obs, actions) - expected).abs().max() > 1e-3  # the adapter changed the outputs


def test_merge_lora_on_a_hub_base_from_a_fresh_process(tmp_path, monkeypatch):
    build_policy(config("llava"), seed=2).save_pretrained(tmp_path / "saved")
    fill_hub_cache(tmp_path / "cache", "tiny-org/tiny-vlm", tmp_path / "saved")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_HUB_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    monkeypatch.setenv("HF_HUB_CACHE", env["HF_HUB_CACHE"])
    ckpt, obs, actions, expected = lora_checkpoint(tmp_path, "tiny-org/tiny-vlm")
    cmd = [sys.executable, "-m", "rlsys.cli.models", "merge-lora", str(ckpt / "policy"), str(tmp_path / "merged")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "LoRA merged into tiny-org/tiny-vlm" in done.stdout
    standalone = build_policy(config("llava", path=str(tmp_path / "merged")))
    torch.testing.assert_close(standalone.log_probs(obs, actions), expected, atol=1e-5, rtol=1e-5)


def test_merge_lora_refuses_what_it_cannot_do_and_writes_nothing(tmp_path, capsys):
    build_policy(config("llava"), seed=3).save_pretrained(tmp_path / "plain")
    assert main(["merge-lora", str(tmp_path / "plain"), str(tmp_path / "out")]) == 2
    assert "holds no LoRA adapter (adapter/)" in capsys.readouterr().err and not (tmp_path / "out").exists()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    assert main(["merge-lora", str(tmp_path / "nowhere"), str(tmp_path / "taken")]) == 2
    assert "CHECKPOINT" in capsys.readouterr().err
    build_policy(config("llava"), seed=3).save_pretrained(tmp_path / "base")
    ckpt, *_ = lora_checkpoint(tmp_path, str(tmp_path / "base"))
    assert main(["merge-lora", str(ckpt), str(tmp_path / "taken")]) == 2
    assert "already exists and is not an empty folder" in capsys.readouterr().err
    assert os.listdir(tmp_path / "taken") == ["keep.txt"]


# -- blip2-vision


def tiny_blip2() -> Blip2ForConditionalGeneration:
    torch.manual_seed(0)
    return Blip2ForConditionalGeneration(
        Blip2Config(
            vision_config=dict(
                hidden_size=16,
                intermediate_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                image_size=32,
                patch_size=8,
                initializer_range=0.1,
            ),
            qformer_config=dict(
                hidden_size=16,
                num_hidden_layers=1,
                num_attention_heads=2,
                intermediate_size=32,
                encoder_hidden_size=16,
            ),
            text_config=dict(
                model_type="opt",
                hidden_size=16,
                num_hidden_layers=1,
                num_attention_heads=2,
                ffn_dim=32,
                vocab_size=64,
                word_embed_proj_dim=16,
                max_position_embeddings=32,
            ),
            num_query_tokens=2,
        )  # fmt: skip
    ).eval()


@pytest.mark.parametrize("shard", [None, "20KB"])
def test_blip2_vision_extracts_the_tower_with_the_full_models_outputs(tmp_path, monkeypatch, shard):
    full = tiny_blip2()
    full.save_pretrained(tmp_path / "blip2", **({"max_shard_size": shard} if shard else {}))
    if shard:
        assert (tmp_path / "blip2" / "model.safetensors.index.json").is_file()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    fill_hub_cache(tmp_path / "cache", "tiny-org/blip2", tmp_path / "blip2")
    assert main(["blip2-vision", "tiny-org/blip2", str(tmp_path / "vision")]) == 0
    tower = Blip2VisionModel.from_pretrained(tmp_path / "vision").eval()
    pixels = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        want, got = full.vision_model(pixel_values=pixels), tower(pixel_values=pixels)
    torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state, atol=0, rtol=0)
    torch.testing.assert_close(got.pooler_output, want.pooler_output, atol=0, rtol=0)
    features = PooledImageFeatures(str(tmp_path / "vision"), feature_dim=16, image_size=32)  # policy.vision_path
    assert features([observation(2)]).shape == (1, 16)


def test_blip2_vision_says_what_is_wrong_with_its_source(tmp_path, capsys, monkeypatch):
    tiny_blip2().vision_model.save_pretrained(tmp_path / "tower")
    assert main(["blip2-vision", str(tmp_path / "tower"), str(tmp_path / "out")]) == 2
    assert "already a Blip2VisionModel folder" in capsys.readouterr().err
    build_policy(config("llava"), seed=4).save_pretrained(tmp_path / "llava")
    assert main(["blip2-vision", str(tmp_path / "llava"), str(tmp_path / "out")]) == 2
    assert "is not a BLIP-2 checkpoint (model_type 'llava')" in capsys.readouterr().err
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    assert main(["blip2-vision", "Salesforce/blip2-opt-2.7b", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "SRC: Salesforce/blip2-opt-2.7b" in err and str(tmp_path / "empty") in err
    assert not (tmp_path / "out").exists()


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"rlsys {__version__}"
