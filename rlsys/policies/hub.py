"""The files of a model the config names by Hugging Face Hub id (`org/name`): its snapshot in the Hugging Face
cache (HF_HUB_CACHE, else HF_HOME/hub), which is filled from the Hub unless HF_HUB_OFFLINE is set. Whether a value
is an id or a path is the config's check of the string (rlsys/config/hub_id.py).

A snapshot already in the cache is used as it is (no network); one that is not is downloaded whole, less other
frameworks' weights (and pickled weights when safetensors are there).
"""

from __future__ import annotations

import os
from pathlib import Path

from rlsys.config import Config
from rlsys.config.checks import MODEL_PATH_KEYS, named_paths
from rlsys.config.errors import ConfigError
from rlsys.config.hub_id import is_hub_id

OTHER_FORMATS = [
    "*.h5",
    "*.msgpack",
    "*.ot",
    "*.onnx",
    "*.onnx_data",
    "onnx/*",
    "*.tflite",
    "*.gguf",
    "*.mlmodel",
    "coreml/*",
    "openvino/*",
]
PICKLED_WEIGHTS = ["*.bin", "*.pt", "*.pth", "*.ckpt"]
TRUE = ("1", "true", "yes", "on")


def hub_cache() -> Path:
    """The Hugging Face cache folder, read from the environment now (not when huggingface_hub was imported)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hub_offline() -> bool:
    from huggingface_hub import constants

    return constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in TRUE


def snapshot_revision(folder: str | os.PathLike) -> str | None:
    """The commit of a snapshot folder of the Hugging Face cache (`.../snapshots/<commit>`), else None."""
    folder = Path(folder)
    return folder.name if folder.parent.name == "snapshots" else None


def model_folder(value: str | os.PathLike, key: str, revision: str | None = None) -> Path:
    """The local folder `value` stands for. A path comes back as it is (missing or not: the caller says so);
    a Hub id is looked up in the cache, and downloaded into it when it is not there and the Hub may be used.
    The error names `key`, the id and the cache."""
    if not is_hub_id(value):
        return Path(value).expanduser()
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    cache = hub_cache()
    at = f" at revision {revision}" if revision else ""
    try:
        return Path(
            snapshot_download(
                value,
                revision=revision,
                cache_dir=cache,
                local_files_only=True,
                ignore_patterns=OTHER_FORMATS + PICKLED_WEIGHTS,
            )
        )
    except LocalEntryNotFoundError:
        if hub_offline():
            raise ConfigError(
                f"{key}: {value} does not exist as a local path, and the Hugging Face Hub id {value!r}{at} is not in "
                f"the cache {cache} (HF_HUB_OFFLINE is set, so nothing is downloaded): fetch it where there is "
                f"network (`hf download {value}`, with the same HF_HOME or HF_HUB_CACHE), or set {key} to a local "
                "folder"
            ) from None
    try:
        return Path(_download(value, revision, cache))
    except (RepositoryNotFoundError, RevisionNotFoundError) as e:
        raise ConfigError(
            f"{key}: {value} does not exist as a local path, and the Hugging Face Hub has no model {value!r}{at} "
            f"that this machine may read (private or gated models need `hf auth login` or HF_TOKEN): {e}"
        ) from None
    except OSError as e:
        raise ConfigError(
            f"{key}: the Hugging Face Hub model {value!r}{at} is not in the cache {cache} and could not be "
            f"downloaded: {e}"
        ) from None


def _download(repo_id: str, revision: str | None, cache: Path) -> str:
    from huggingface_hub import HfApi, snapshot_download

    files = HfApi().list_repo_files(repo_id, revision=revision)
    ignore = OTHER_FORMATS + (PICKLED_WEIGHTS if any(f.endswith(".safetensors") for f in files) else [])
    return snapshot_download(repo_id, revision=revision, cache_dir=cache, ignore_patterns=ignore)


def fetch_models(cfg: Config) -> None:
    """Every Hub id the config names for this run, in the Hugging Face cache: downloaded there now unless it is
    there already or HF_HUB_OFFLINE is set (then a missing one is an error naming the key, the id and the cache).
    The driver runs it before Ray starts (then `check_paths` for the local paths), so that no actor downloads or
    fails on its own."""
    for key, value in named_paths(cfg, offline_data=False):
        if key in MODEL_PATH_KEYS and is_hub_id(value):
            model_folder(value, key)
