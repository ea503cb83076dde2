"""Model paths that are local folders or Hugging Face Hub ids (resolved offline from a cache the test fills in the
hub's own layout), and LoRA checkpoints whose base pointer survives moving the run folder."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import RobertaModel

from rlsys.config import ConfigError, check_paths
from rlsys.config.hub_id import is_hub_id
from rlsys.learners.text_encoder import TextEncoder
from rlsys.policies import build_policy
from rlsys.policies.hub import fetch_models, model_folder
from rlsys.policies.image_features import PooledImageFeatures, tiny_vision
from tests.conftest import make_config
from tests.policies.test_policy_vlm import config, lora_config, mixed_batch, observation, train_a_little
from tests.support.hub_cache import fill_hub_cache

ACTIONS = ["click [1]", "type [0] hello", "click [4]"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache of the test's own, named the way users name it."""
    folder = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(folder))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return folder


def test_what_is_a_path_and_what_is_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert is_hub_id("Qwen/Qwen2-VL-2B-Instruct") and is_hub_id("roberta-base") and is_hub_id("models/Auto-UI-Base")
    for path in ("/models/x", "./org/name", "../org/name", "~/models/x", "runs/a/checkpoints/000010/policy", ""):
        assert not is_hub_id(path), path
    assert not is_hub_id(tmp_path / "org" / "name")  # a Path object is always a path
    assert not is_hub_id("Auto-UI-Base@0123456789abcdef")  # a Digi-Q representation id
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert not is_hub_id("org/name")  # it exists here: a local folder wins


def test_a_local_folder_still_loads(tmp_path, monkeypatch):
    policy = build_policy(config("llava"), seed=1)
    policy.save_pretrained(tmp_path / "models" / "tiny")
    monkeypatch.chdir(tmp_path)
    loaded = build_policy(config("llava", path="models/tiny"))  # relative, spelled like an id, but it exists
    obs = mixed_batch()
    torch.testing.assert_close(loaded.log_probs(obs, ACTIONS), policy.log_probs(obs, ACTIONS))


def test_a_hub_id_loads_offline_from_the_cache_through_from_pretrained(tmp_path, cache):
    policy = build_policy(config("qwen2_vl"), seed=2)
    policy.save_pretrained(tmp_path / "saved")
    snapshot = fill_hub_cache(cache, "tiny-org/tiny-vlm", tmp_path / "saved")
    cfg = make_config(tmp_path, policy__kind="vlm", policy__arch="qwen2_vl", policy__path="tiny-org/tiny-vlm")
    fetch_models(cfg)
    check_paths(cfg)
    assert model_folder("tiny-org/tiny-vlm", "policy.path") == snapshot
    loaded = build_policy(config("qwen2_vl", path="tiny-org/tiny-vlm"))
    obs = mixed_batch()
    torch.testing.assert_close(loaded.log_probs(obs, ACTIONS), policy.log_probs(obs, ACTIONS))


def test_hf_home_locates_the_cache_too(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    vision = tiny_vision(16, 32)
    vision.save_pretrained(tmp_path / "vision")
    fill_hub_cache(tmp_path / "hf-home" / "hub", "tiny-org/blip2-vision", tmp_path / "vision")
    obs = [observation(2), observation(5, (20, 20, 220))]
    by_id = PooledImageFeatures("tiny-org/blip2-vision", 16, 32)(obs)
    for o in obs:
        o.features.clear()
    torch.testing.assert_close(by_id, PooledImageFeatures(str(tmp_path / "vision"), 16, 32)(obs))


def test_a_text_encoder_by_hub_id(tmp_path, cache):
    tiny = TextEncoder(None, hidden=16, max_tokens=32)
    RobertaModel(tiny.model.config).save_pretrained(tmp_path / "roberta")  # with its pooler, as roberta-base
    tiny.tokenizer.save_pretrained(tmp_path / "roberta")
    fill_hub_cache(cache, "tiny-org/roberta", tmp_path / "roberta")
    texts = ["open the settings", "search for a flight"]
    by_id = TextEncoder("tiny-org/roberta", hidden=16, max_tokens=32)
    torch.testing.assert_close(by_id(texts), TextEncoder(str(tmp_path / "roberta"), hidden=16, max_tokens=32)(texts))


@pytest.mark.parametrize(
    "overrides, key",
    [
        ({"policy__kind": "vlm", "policy__path": "tiny-org/not-cached"}, "policy.path"),
        ({"policy__vision_path": "tiny-org/not-cached"}, "policy.vision_path"),
        (
            {"learner__algorithm": "digirl", "learner__digirl": {"text_encoder_path": "tiny-org/not-cached"}},
            "learner.digirl.text_encoder_path",
        ),
    ],
)
def test_an_id_missing_offline_names_the_key_the_id_and_the_cache(tmp_path, cache, overrides, key):
    cfg = make_config(tmp_path, **overrides)
    check_paths(cfg)  # the config's own check accepts a Hub id: fetching its files is the policies' part
    with pytest.raises(ConfigError) as err:
        fetch_models(cfg)
    message = str(err.value)
    assert message.startswith(f"{key}: tiny-org/not-cached ") and str(cache) in message, message
    assert "HF_HUB_OFFLINE" in message and "hf download tiny-org/not-cached" in message


def test_a_missing_local_path_keeps_its_error(tmp_path, cache):
    cfg = make_config(tmp_path, policy__kind="vlm", policy__path=str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"policy.path: .*nowhere does not exist \(set it to a local folder or"):
        check_paths(cfg)


def test_a_fresh_process_resolves_a_hub_id_config_from_the_environments_cache(tmp_path):
    """The cache and offline mode come from the environment a user starts the process with."""
    build_policy(config("llava"), seed=3).save_pretrained(tmp_path / "saved")
    fill_hub_cache(tmp_path / "cache", "tiny-org/tiny-vlm", tmp_path / "saved")
    (tmp_path / "run.yaml").write_text(
        "policy: {kind: vlm, path: tiny-org/tiny-vlm, d_model: 32, d_ff: 64, num_heads: 2}\n"
        f"run: {{output_dir: {tmp_path / 'runs'}}}\n"
    )
    script = (
        "import sys; from rlsys.config import load_config, check_paths; from rlsys.policies import build_policy\n"
        "from rlsys.policies.hub import fetch_models\n"
        "cfg = load_config(sys.argv[1]); fetch_models(cfg); check_paths(cfg); policy = build_policy(cfg.policy)\n"
        "print(type(policy).__name__, policy.base.name, policy.base.revision)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_HUB_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "run.yaml")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    kind, name, revision = done.stdout.split()[-3:]
    assert (kind, name) == ("VLMPolicy", "tiny-org/tiny-vlm") and len(revision) == 40
    env["HF_HUB_CACHE"] = str(tmp_path / "empty-cache")
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "run.yaml")], env=env, capture_output=True, text=True
    )
    assert done.returncode != 0 and "policy.path: tiny-org/tiny-vlm" in done.stderr
    assert str(tmp_path / "empty-cache") in done.stderr


# -- LoRA checkpoints that move


def trained_lora(base: str):
    policy = build_policy(lora_config("llava", path=base))
    obs, actions = train_a_little(policy, steps=1)
    return policy, policy.log_probs(obs, actions).detach(), obs, actions


def test_a_lora_checkpoint_with_its_base_in_the_run_folder_survives_moving_the_folder(tmp_path):
    run = tmp_path / "runs" / "a"
    build_policy(config("llava"), seed=4).save_pretrained(run / "base")
    policy, expected, obs, actions = trained_lora(str(run / "base"))
    ckpt = run / "checkpoints" / "000001" / "policy"
    policy.save_pretrained(ckpt)
    pointer = json.loads((ckpt / "base.json").read_text())
    assert pointer == {"absolute": str((run / "base").resolve()), "relative": "../../../base"}
    shutil.move(run, tmp_path / "moved")
    loaded = build_policy(lora_config("llava", path=str(tmp_path / "moved" / "checkpoints" / "000001" / "policy")))
    torch.testing.assert_close(loaded.log_probs(obs, actions), expected)
    assert loaded.base.name == str((tmp_path / "moved" / "base").resolve())  # a re-save points at the new place


def test_a_lora_checkpoint_with_a_far_base_keeps_its_absolute_path(tmp_path):
    build_policy(config("llava"), seed=5).save_pretrained(tmp_path / "shared" / "models" / "base")
    policy, expected, obs, actions = trained_lora(str(tmp_path / "shared" / "models" / "base"))
    ckpt = tmp_path / "home" / "runs" / "a" / "checkpoints" / "000001" / "policy"
    policy.save_pretrained(ckpt)
    assert json.loads((ckpt / "base.json").read_text()) == {
        "absolute": str((tmp_path / "shared" / "models" / "base").resolve())
    }
    shutil.move(tmp_path / "home" / "runs" / "a", tmp_path / "elsewhere")
    loaded = build_policy(lora_config("llava", path=str(tmp_path / "elsewhere" / "checkpoints" / "000001" / "policy")))
    torch.testing.assert_close(loaded.log_probs(obs, actions), expected)
    shutil.move(tmp_path / "shared", tmp_path / "gone")
    with pytest.raises(FileNotFoundError, match=r"base.json: the LoRA base folder is not at .*shared/models/base"):
        build_policy(lora_config("llava", path=str(tmp_path / "elsewhere" / "checkpoints" / "000001" / "policy")))


def test_a_lora_checkpoint_on_a_hub_base_names_the_id_and_commit(tmp_path, cache):
    build_policy(config("llava"), seed=6).save_pretrained(tmp_path / "saved")
    snapshot = fill_hub_cache(cache, "tiny-org/tiny-vlm", tmp_path / "saved")
    policy, expected, obs, actions = trained_lora("tiny-org/tiny-vlm")
    policy.save_pretrained(tmp_path / "run" / "policy")
    pointer = json.loads((tmp_path / "run" / "policy" / "base.json").read_text())
    assert pointer == {"hub_id": "tiny-org/tiny-vlm", "revision": snapshot.name}
    shutil.move(tmp_path / "run", tmp_path / "moved")
    loaded = build_policy(lora_config("llava", path=str(tmp_path / "moved" / "policy")))
    torch.testing.assert_close(loaded.log_probs(obs, actions), expected)


def test_an_older_absolute_pointer_still_loads(tmp_path):
    build_policy(config("llava"), seed=7).save_pretrained(tmp_path / "base")
    policy, expected, obs, actions = trained_lora(str(tmp_path / "base"))
    policy.save_pretrained(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "base.json").write_text(json.dumps({"path": str(Path(tmp_path / "base").resolve())}))
    loaded = build_policy(lora_config("llava", path=str(tmp_path / "ckpt")))
    torch.testing.assert_close(loaded.log_probs(obs, actions), expected)


def test_a_digiq_representation_model_by_hub_id_has_the_id_of_its_content(tmp_path, cache):
    from rlsys.learners.digiq.representations import expected_model_id, model_id

    build_policy(config("llava"), seed=8).save_pretrained(tmp_path / "tiny-vlm")
    fill_hub_cache(cache, "tiny-org/tiny-vlm", tmp_path / "tiny-vlm")
    local = model_id(tmp_path / "tiny-vlm")
    assert local.startswith("tiny-vlm@") and expected_model_id("tiny-org/tiny-vlm") == local
