"""Where a run lives: plain run names, folders that are runs, and what a resume may change."""

from __future__ import annotations

from pathlib import Path

from rlsys.config.errors import ConfigError, shown

RUN_FILES = ("config.yaml", "metrics.jsonl", "checkpoints")  # a folder holding any of these is an rlsys run


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
