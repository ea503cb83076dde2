"""Which model a policy config means: `base, adapter = resolve(policy_cfg)`.

`policy.path` is one of
- a model folder, or a Hugging Face Hub id (its snapshot in the Hugging Face cache, hub.py): the whole model;
- a LoRA checkpoint as rlsys saves one: `adapter/` beside its frozen base, a copy in `base/` or a pointer in
  `base.json` (lora_checkpoint.py);
- a peft adapter folder (`adapter_config.json` and the adapter's weights, a folder or a Hub id), whose
  `base_model_name_or_path` names the base.
Every placement loads what this answers: a runner's replica and an inference server through `build_policy` (the
policy families' `from_pretrained`), a vLLM engine through actors/vllm_placement.py.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rlsys.config import PolicyConfig
from rlsys.config.hub_id import is_hub_id
from rlsys.policies.hub import model_folder
from rlsys.policies.lora_checkpoint import ADAPTER_DIR, BaseSource, lora_base

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_SETTINGS = ("r", "lora_alpha", "target_modules")  # what an engine needs to load adapters of this shape
BASE_NAME = "base_model_name_or_path"


@dataclass(frozen=True)
class Base:
    """The model a policy starts from: the whole model, or the frozen base under a LoRA adapter."""

    folder: Path  # its files on this machine
    # what a loader in another process is given: the Hub id when the path named one (every machine finds it in
    # its own cache), else the folder (a LoRA checkpoint's base, even one base.json names by Hub id)
    name: str
    source: BaseSource | None  # what a LoRA checkpoint's base.json names; None: the checkpoint's own base/ copy


@dataclass(frozen=True)
class Adapter:
    """A trained LoRA adapter: peft's folder (the weights and adapter_config.json)."""

    folder: Path
    settings: dict  # ADAPTER_SETTINGS as its adapter_config.json gives them


def resolve(cfg: PolicyConfig) -> tuple[Base, Adapter | None]:
    """The base model and the LoRA adapter (None: the path is a whole model) that `policy.path` means."""
    if not cfg.path:
        raise ValueError("policy.path is not set: the policy is built from config, so there is no model to resolve")
    return resolve_path(cfg.path)


def resolve_path(value: str | os.PathLike, key: str = "policy.path") -> tuple[Base, Adapter | None]:
    """`resolve` for a path or Hub id given elsewhere than `policy.path`; errors name `key`."""
    folder = _folder(value, key)
    if (folder / ADAPTER_DIR).is_dir():
        adapter, _ = _adapter(folder / ADAPTER_DIR, key)
        base, source = lora_base(folder)
        return Base(base, str(base), source), adapter
    if (folder / ADAPTER_CONFIG).is_file():
        adapter, config = _adapter(folder, key)
        named = config.get(BASE_NAME)
        if not named:
            raise ValueError(f"{key}: {folder / ADAPTER_CONFIG} names no base model ({BASE_NAME})")
        return _whole(named, _folder(named, f"{key} {folder / ADAPTER_CONFIG} {BASE_NAME}")), adapter
    return _whole(value, folder), None


def _folder(value: str | os.PathLike, key: str) -> Path:
    folder = model_folder(value, key)
    if not folder.is_dir():
        raise FileNotFoundError(f"{key} {str(value)!r} is not a folder")
    return folder


def _whole(value: str | os.PathLike, folder: Path) -> Base:
    return Base(folder, str(value) if is_hub_id(value) else str(folder), BaseSource.of(value, folder))


def _adapter(folder: Path, key: str) -> tuple[Adapter, dict]:
    """The adapter in `folder` and its adapter_config.json, read once."""
    file = folder / ADAPTER_CONFIG
    try:
        config = json.loads(file.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{key}: {file} is missing (peft writes it beside the adapter's weights)") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{key}: {file} is not a JSON file: {e}") from None
    missing = [name for name in ADAPTER_SETTINGS if not isinstance(config, dict) or name not in config]
    if missing:
        raise ValueError(f"{key}: {file} has no {', '.join(missing)}")
    return Adapter(folder, {name: config[name] for name in ADAPTER_SETTINGS}), config
