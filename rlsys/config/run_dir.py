"""Where a run lives: plain run names, folders that are runs, and what a resume may change."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from rlsys.config.errors import ConfigError, shown
from rlsys.config.yaml_load import load_yaml

RUN_FILES = ("config.yaml", "metrics.jsonl", "checkpoints")  # a folder holding any of these is an rlsys run
REMOTE_SCHEMES = ("s3", "gs", "gcs")  # run.output_dir in an object store (rlsys.data.storage)


def is_remote_uri(location) -> bool:
    """Whether `location` (run.output_dir, a --resume argument) names a folder in an object store."""
    return isinstance(location, str) and urlsplit(location).scheme in REMOTE_SCHEMES


def check_run_name(name: str) -> None:
    """`run.name` names a folder inside runs/: a plain name, never a path."""
    if not name.strip() or name in (".", "..") or any(c in name for c in "/\\\0"):
        raise ConfigError(
            f"run.name must be a plain folder name (no path separators, not '.' or '..', not empty), got "
            f"{shown(name)}; to write elsewhere set run.output_dir"
        )


def is_run(folder: Path) -> bool:
    return any((folder / name).exists() for name in RUN_FILES)


def check_new_run_dir(run_dir: Path) -> None:
    """A new run starts in a missing or empty folder, or in a run without checkpoints (it is started over);
    never in a folder of other files, whose config.yaml it would overwrite."""
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise ConfigError(f"run folder {run_dir} is a file")
    checkpoints = run_dir / "checkpoints"
    if checkpoints.is_dir() and any(checkpoints.iterdir()):
        raise ConfigError(f"{run_dir} already holds a run; pass --resume {run_dir} or choose another run.name")
    if any(run_dir.iterdir()) and not is_run(run_dir):
        raise ConfigError(
            f"{run_dir} is not empty and is not an rlsys run (no {', '.join(RUN_FILES)}); choose another run.name "
            "or run.output_dir"
        )


# keys a checkpoint's weights and learner state depend on: a resumed run must keep them (a key names itself and
# everything under it)
MODEL_KEYS = (
    "run.training",
    "env.action_space",
    "learner.algorithm",
    "policy.kind",
    "policy.arch",
    "policy.path",
    "policy.d_model",
    "policy.d_ff",
    "policy.num_layers",
    "policy.num_heads",
    "policy.image_size",
    "policy.image_feature_dim",
    "policy.vision_path",
    "policy.dtype",
    "policy.load_in_4bit",
    "policy.lora",
    *(
        f"learner.{algo}.{key}"
        for algo in ("digirl", "digiq")
        for key in (
            "text_encoder_path",
            "text_hidden",
            "critic_hidden",
            "image_feature_dim",
            "vision_path",
            "image_size",
        )
    ),
    "learner.digiq.representation",
)
SESSION_KEYS = ("run.output_dir", "run.scratch_dir")  # set by --resume itself, or where this machine keeps it


def check_resumable(run_dir: Path) -> None:
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"--resume {run_dir}: not an rlsys run (no config.yaml there)")


def saved_config(run_dir: Path) -> dict:
    """The run's config.yaml, as stored."""
    path = run_dir / "config.yaml"
    saved = load_yaml(path.read_text(), str(path))
    if not isinstance(saved, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return saved


def resume_changes(saved: dict, stored: dict) -> list[str]:
    """The keys whose values differ between the run's config.yaml (`saved`) and the stored form of the config
    it is resumed with; a ConfigError when any is a key the checkpoint depends on (MODEL_KEYS)."""
    before, after = _leaves(saved), _leaves(stored)
    changed = [k for k in sorted(before.keys() | after.keys()) if before.get(k) != after.get(k)]
    changed = [k for k in changed if not _under(k, SESSION_KEYS)]
    locked = [k for k in changed if _under(k, MODEL_KEYS)]
    if locked:
        shown_keys = ", ".join(f"{k} ({shown(before.get(k))} -> {shown(after.get(k))})" for k in locked)
        raise ConfigError(
            f"cannot resume with a different model or algorithm than the checkpoints were trained with: {shown_keys}; "
            "start a new run (another run.name) instead"
        )
    return changed


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def _leaves(data: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in data.items():
        if isinstance(v, dict) and v:
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
