"""Where a run lives: plain run names, folders that are runs, and what a resume may change."""

from __future__ import annotations

import os
import time
from itertools import chain, count
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


def check_no_dangling_link(path: Path) -> None:
    """A run folder, or a folder above it, that is a symbolic link to nothing cannot be created or read."""
    for link in (path, *path.parents):
        if link.is_symlink() and not link.exists():
            raise ConfigError(
                f"{link} is a symbolic link to {os.readlink(link)}, which does not exist; create that folder or "
                "remove the link"
            )


START_FILES = ("config.yaml", "run_info.json")  # what a start writes before Ray: no iteration ran yet


def check_new_run_dir(run_dir: Path, restart: bool = False) -> bool:
    """A new run starts in a missing or empty folder, or in one where an earlier start wrote no more than its
    START_FILES; never in a folder of other files, whose config.yaml it would overwrite. A run that got further
    (metrics, shards, checkpoints) is refused unless `restart`. Returns whether the folder holds a run that
    `move_aside` must move before this one starts."""
    check_no_dangling_link(run_dir)
    if not run_dir.exists():
        return False
    if not run_dir.is_dir():
        raise ConfigError(f"run folder {run_dir} is a file")
    if not any(run_dir.iterdir()):
        return False
    if not is_run(run_dir):
        raise ConfigError(
            f"{run_dir} is not empty and is not an rlsys run (no {', '.join(RUN_FILES)}); choose another run.name "
            "or run.output_dir"
        )
    if restart:
        return True
    checkpoints = run_dir / "checkpoints"
    if checkpoints.is_dir() and any(p.is_dir() and p.name.isdigit() for p in checkpoints.iterdir()):  # complete ones
        raise ConfigError(
            f"{run_dir} already holds a run; pass --resume {run_dir} to continue it, --restart to move it aside "
            f"(to {run_dir.name}.old-DATE-TIME beside it) and start over, or choose another run.name"
        )
    if any(p.is_file() and p.relative_to(run_dir).as_posix() not in START_FILES for p in run_dir.rglob("*")):
        raise ConfigError(
            f"{run_dir} holds a run that stopped before its first checkpoint, so it cannot be resumed; pass --restart "
            f"to move it aside (to {run_dir.name}.old-DATE-TIME beside it) and start over, or choose another run.name"
        )
    return False


def move_aside(run_dir: Path) -> Path:
    """Move what the run folder holds to a sibling named after it and the time (`runs/NAME.old-20250102-150405`;
    beside its target, for a link) and leave the folder empty; returns where it went."""
    real = Path(run_dir).resolve()
    base = real.with_name(f"{real.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
    tries = chain([base], (base.with_name(f"{base.name}-{n}") for n in count(2)))
    aside = next(p for p in tries if not p.exists())
    real.rename(aside)
    real.mkdir()
    return aside


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
    *(f"policy.lora.{key}" for key in ("enabled", "r", "alpha", "dropout", "target_modules")),  # not how it acts
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
    check_no_dangling_link(run_dir)
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
