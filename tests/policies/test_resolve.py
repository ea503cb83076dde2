"""`resolve(policy_cfg)`: which base model and which LoRA adapter a policy config means, for tiny causal LMs saved
with save_pretrained and loaded back through from_pretrained (Hub ids from a cache filled offline)."""

import json
from dataclasses import replace

import pytest
import torch

from rlsys.config import ConfigError
from rlsys.policies import build_policy
from rlsys.policies.lora_checkpoint import BaseSource
from rlsys.policies.resolve import resolve
from tests.policies.test_causal_lm import CFG, LORA, observations
from tests.support.hub_cache import fill_hub_cache

ACTIONS = ["click [1]", "type [0] hello", "click [4]"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hf-cache"


def at(path) -> object:
    return replace(CFG, path=str(path))


def trained_lora(base_path: str | None = None):
    """A LoRA policy on `base_path` (None: a base built from config) whose adapter is no longer zero."""
    policy = build_policy(replace(LORA, path=base_path), seed=1)
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return policy


def log_probs(policy) -> torch.Tensor:
    with torch.no_grad():
        return policy.log_probs(observations(), ACTIONS)


def adapter_folder(policy, folder):
    """What peft writes for the adapter alone: adapter_config.json, whose base_model_name_or_path names the base."""
    policy.model.save_pretrained(folder)
    return folder


def test_a_model_folder_is_the_base_and_no_adapter(tmp_path):
    build_policy(CFG, seed=2).save_pretrained(tmp_path / "model")

    base, adapter = resolve(at(tmp_path / "model"))

    assert adapter is None
    assert base.folder == tmp_path / "model" and base.name == str(tmp_path / "model")
    assert base.source == BaseSource(str((tmp_path / "model").resolve()))


def test_a_peft_adapter_folder_names_its_base_in_adapter_config(tmp_path):
    build_policy(CFG, seed=3).save_pretrained(tmp_path / "base")
    trained = trained_lora(str(tmp_path / "base"))
    folder = adapter_folder(trained, tmp_path / "my-adapter")
    assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tmp_path / "base")

    base, adapter = resolve(at(folder))

    assert base.folder == tmp_path / "base" and base.name == str(tmp_path / "base")
    assert adapter.folder == folder
    settings = adapter.settings | {"target_modules": sorted(adapter.settings["target_modules"])}
    assert settings == trained.adapter_config()
    # a replica built from the adapter folder is the trained policy, not its base
    assert not torch.allclose(log_probs(build_policy(at(tmp_path / "base"))), log_probs(trained))
    torch.testing.assert_close(log_probs(build_policy(replace(LORA, path=str(folder)))), log_probs(trained))


def test_an_rlsys_lora_checkpoint_is_its_adapter_and_the_base_beside_it(tmp_path):
    trained = trained_lora()
    trained.save_pretrained(tmp_path / "ckpt")

    base, adapter = resolve(at(tmp_path / "ckpt"))

    assert base.folder == tmp_path / "ckpt" / "base" and base.source is None  # the checkpoint's own copy
    assert adapter.folder == tmp_path / "ckpt" / "adapter"
    assert adapter.settings["r"] == LORA.lora.r and adapter.settings["lora_alpha"] == LORA.lora.alpha
    torch.testing.assert_close(log_probs(build_policy(at(tmp_path / "ckpt"))), log_probs(trained))


def test_a_hub_id_is_its_snapshot_in_the_offline_cache(tmp_path, cache):
    build_policy(CFG, seed=4).save_pretrained(tmp_path / "saved")
    snapshot = fill_hub_cache(cache, "tiny-org/tiny-lm", tmp_path / "saved")

    base, adapter = resolve(at("tiny-org/tiny-lm"))

    assert adapter is None and base.folder == snapshot
    assert base.name == "tiny-org/tiny-lm"  # another machine looks the id up in its own cache
    assert base.source == BaseSource("tiny-org/tiny-lm", snapshot.name)
    torch.testing.assert_close(log_probs(build_policy(at("tiny-org/tiny-lm"))), log_probs(build_policy(CFG, seed=4)))


def test_an_adapter_on_a_hub_base_names_the_base_by_id(tmp_path, cache):
    build_policy(CFG, seed=5).save_pretrained(tmp_path / "saved")
    snapshot = fill_hub_cache(cache, "tiny-org/tiny-lm", tmp_path / "saved")
    folder = adapter_folder(trained_lora(), tmp_path / "adapter")
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps(config | {"base_model_name_or_path": "tiny-org/tiny-lm"}))

    base, adapter = resolve(at(folder))

    assert (base.folder, base.name, adapter.folder) == (snapshot, "tiny-org/tiny-lm", folder)


def test_what_cannot_be_resolved_names_the_key_and_the_file(tmp_path, cache):
    with pytest.raises(FileNotFoundError, match=r"^policy.path '.*nowhere' is not a folder"):
        resolve(at(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="policy.path is not set"):
        resolve(CFG)
    folder = adapter_folder(trained_lora(), tmp_path / "adapter")
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps(config | {"base_model_name_or_path": None}))
    with pytest.raises(ValueError, match=r"^policy.path: .*adapter_config.json names no base model"):
        resolve(at(folder))
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "tiny-org/not-cached"}))
    with pytest.raises(ValueError, match=r"^policy.path: .*adapter_config.json has no r, lora_alpha, target_modules"):
        resolve(at(folder))
    (folder / "adapter_config.json").write_text(json.dumps(config | {"base_model_name_or_path": "tiny-org/not-cached"}))
    with pytest.raises(ConfigError, match=r"adapter_config.json base_model_name_or_path: tiny-org/not-cached .*HF_HUB"):
        resolve(at(folder))
