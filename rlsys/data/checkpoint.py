"""Atomic checkpoints: written to a hidden folder, then renamed into place.

A folder named by its iteration number is therefore always complete; `latest()` ignores
anything else, such as the leftovers of a crash in the middle of writing one. Each checkpoint lists
the sha256 of its files in `manifest.json`, so a file damaged or lost afterwards (a full disk, a torn
copy) is found before anything is loaded: `newest_intact()` names it and passes over that checkpoint.
The manifest also lists the trajectory shards the checkpoint's replay buffer is read back from (its
`references`, with their sizes: they are not copied into it), so a shard lost or cut short is named the same
way. A remote run folder publishes these folders by writing the manifest last (rlsys.data.storage).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq

MANIFEST = "manifest.json"
REQUIRED = ("state.json", "learner.pt", "replay.parquet")


class CheckpointError(RuntimeError):
    """A checkpoint file is missing or damaged; the message names it."""


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


def write(run_dir: Path, iteration: int, fill: Callable[[Path], dict | None], keep: int) -> Path:
    """Create checkpoint `iteration` by calling `fill(tmp_folder)`, then publish it atomically. `fill` may return
    the files outside the checkpoint that it references ({path relative to the run folder, or absolute: size in
    bytes}); the manifest lists them."""
    root = checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{iteration:06d}"
    tmp = root / f".tmp-{iteration:06d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    references = fill(tmp)
    write_manifest(tmp, references)
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


# ---------------------------------------------------------------- integrity


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: Path, references: dict[str, int] | None = None) -> None:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    manifest = {"sha256": {p.relative_to(folder).as_posix(): sha256(p) for p in files}}
    if references:
        manifest["references"] = dict(sorted(references.items()))
    write_json(folder / MANIFEST, manifest)


def verify(folder: Path, references: bool = True) -> None:
    """Raise CheckpointError naming the first file of `folder` that is missing or damaged (and, with
    `references`, the shards it references). Checkpoints written before manifests existed get structural checks
    instead (JSON parses, zip and Parquet read)."""
    for name in REQUIRED:
        if not (folder / name).is_file():
            raise CheckpointError(f"{folder / name}: missing")
    if not any(p.is_file() for p in (folder / "policy").rglob("*")):
        raise CheckpointError(f"{folder / 'policy'}: the policy weights are missing")
    if (folder / MANIFEST).exists():
        try:
            manifest = read_json(folder / MANIFEST)
            listed = manifest["sha256"]
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{folder / MANIFEST}: unreadable ({e})") from None
        for name, digest in listed.items():
            path = folder / name
            if not path.is_file():
                raise CheckpointError(f"{path}: missing")
            if sha256(path) != digest:
                raise CheckpointError(f"{path}: damaged (its sha256 differs from the one recorded when it was written)")
        if references:
            _check_references(folder, manifest.get("references", {}))
        return
    _check_structure(folder)


def referenced_path(checkpoint_folder: Path, name: str) -> Path:
    """Where a file a checkpoint references lives: `name` is absolute or relative to the run folder."""
    return Path(name) if Path(name).is_absolute() else checkpoint_folder.parent.parent / name


def _check_references(folder: Path, references: dict[str, int]) -> None:
    for name, size in references.items():
        path = referenced_path(folder, name)
        if not path.is_file():
            raise CheckpointError(f"{path}: missing (the checkpoint's replay buffer is read back from it)")
        if path.stat().st_size != size:
            raise CheckpointError(
                f"{path}: damaged (its size differs from the one recorded when the checkpoint referenced it)"
            )


def _check_structure(folder: Path) -> None:
    path = folder / "state.json"
    try:
        read_json(path)["iteration"]
        path = folder / "learner.pt"  # torch.save writes a zip archive; testzip checks every member's CRC
        with zipfile.ZipFile(path) as archive:
            if archive.testzip() is not None:
                raise zipfile.BadZipFile("a member's CRC does not match")
        for path in folder.glob("*.parquet"):
            pq.read_metadata(path)
    except (ValueError, KeyError, TypeError, OSError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"{path}: damaged ({type(e).__name__}: {e})") from None


def newest_intact(run_dir: Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest checkpoint that passes `verify`, and the newer ones that did not with the reason."""
    damaged = []
    for folder in reversed(complete_checkpoints(run_dir)):
        try:
            verify(folder)
        except CheckpointError as e:
            damaged.append((folder, str(e)))
            continue
        return folder, damaged
    return None, damaged
