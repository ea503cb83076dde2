"""Atomic checkpoints: written to a hidden folder, then renamed into place.

A folder named by its iteration number is therefore always complete; `latest()` ignores
anything else, such as the leftovers of a crash in the middle of writing one.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path


def checkpoint_root(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def complete_checkpoints(run_dir: Path) -> list[Path]:
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


def latest(run_dir: Path) -> Path | None:
    found = complete_checkpoints(run_dir)
    return found[-1] if found else None


def write(run_dir: Path, iteration: int, fill: Callable[[Path], None], keep: int) -> Path:
    """Create checkpoint `iteration` by calling `fill(tmp_folder)`, then publish it atomically."""
    root = checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{iteration:06d}"
    tmp = root / f".tmp-{iteration:06d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    fill(tmp)
    if final.exists():  # the same iteration saved again after a resume
        shutil.rmtree(final)
    os.rename(tmp, final)
    for old in complete_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return final


def write_files(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def read_files(folder: Path, prefix: str) -> dict[str, bytes]:
    """Every file under `folder` (subfolders too, e.g. a LoRA policy's adapter/ and base/), keyed
    by `prefix/relative/path`: the inverse of `write_files`."""
    return {
        f"{prefix}/{p.relative_to(folder).as_posix()}": p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1))


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())
