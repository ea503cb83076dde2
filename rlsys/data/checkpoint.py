"""Atomic checkpoints: written to a hidden folder, then renamed into place.

A folder named by its iteration number is therefore always complete; `latest()` ignores
anything else, such as the leftovers of a crash in the middle of writing one, and a write that fails (a full
disk) removes its hidden folder. Each checkpoint lists the sha256 of its files in `manifest.json`, so a file
damaged or lost afterwards (a full disk, a torn copy) is found before anything is loaded: `newest_intact()`
names it and passes over that checkpoint. The manifest also lists the trajectory shards the checkpoint's
replay buffer is read back from (its `references`, with their sizes and sha256: they are not copied into it),
so a shard lost, cut short or altered is named the same way. What no digest vouches for (a checkpoint without
a manifest, or files its manifest does not list) gets structural checks instead: JSON parses, zip archives
and Parquet pages pass their CRCs, safetensors files are as long as their headers say. A remote run folder
publishes these folders by writing the manifest last (rlsys.data.storage).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq

MANIFEST = "manifest.json"
REQUIRED = ("state.json", "learner.pt", "replay.parquet")
REFERENCE_DIGESTS = "references_sha256"  # beside `references` (sizes), which older readers compare
NEARLY_FULL = 1 << 20  # bytes: a write that fails with less space than this left failed for lack of it


class CheckpointError(RuntimeError):
    """A checkpoint file is missing or damaged; the message names it."""


class DamagedShard(CheckpointError):
    """A trajectory shard a checkpoint references is cut short or altered; `path` names it."""

    def __init__(self, path: Path, why: str):
        super().__init__(f"{path}: damaged ({why})")
        self.path = path


class NoCheckpoint(CheckpointError):
    """The run holds no complete checkpoint at all (it stopped before its first one)."""


class DiskFull(RuntimeError):
    """A checkpoint could not be written for lack of space; the message names the folder and the space left.
    Nothing of the checkpoint is left behind and the earlier ones are untouched."""


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
    final = root / f"{iteration:06d}"
    tmp = root / f".tmp-{iteration:06d}-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        references = fill(tmp)
        write_manifest(tmp, references)
    except BaseException as e:  # a full disk, a failed save, Ctrl-C: no half-written folder stays behind
        # torch.save reports a full disk as a RuntimeError without errno: the space left tells
        full = isinstance(e, Exception) and (out_of_space(e) or free_bytes(root) < NEARLY_FULL)
        shutil.rmtree(tmp, ignore_errors=True)
        if full:
            before = latest(run_dir)
            kept = f"checkpoint {before.name} is intact" if before else "there is no earlier checkpoint"
            raise DiskFull(
                f"no space left in {root} to write checkpoint {final.name} ({free_space(root)} free): nothing of it "
                f"was kept, {kept}"
            ) from None
        raise
    if final.exists():  # the same iteration saved again after a resume
        shutil.rmtree(final)
    os.rename(tmp, final)
    for old in complete_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return final


def out_of_space(error: BaseException) -> bool:
    """Whether `error`, or what caused it (a Ray task's error carries the original as `cause`), is a full disk
    or quota."""
    for _ in range(8):
        if error is None:
            return False
        if isinstance(error, OSError) and (
            error.errno in (errno.ENOSPC, errno.EDQUOT) or os.strerror(errno.ENOSPC) in str(error)
        ):
            return True
        error = getattr(error, "cause", None) or error.__cause__ or error.__context__
    return False


def free_bytes(folder: Path) -> int:
    """The space left on the filesystem of `folder`, or of its nearest existing parent."""
    folder = Path(folder)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def free_space(folder: Path) -> str:
    """`free_bytes`, for messages."""
    free = free_bytes(folder)
    return f"{free / 2**20:.1f} MiB" if free >= 2**20 else f"{free / 2**10:.0f} KiB"


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


_referenced_digests: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256


def referenced_digest(path: Path) -> str:
    """The sha256 of a shard a checkpoint references, read once per process: shards are written once and never
    change, and each checkpoint references most of the shards the previous one did."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _referenced_digests:
        _referenced_digests[key] = sha256(path)
    return _referenced_digests[key]


def write_manifest(folder: Path, references: dict[str, int] | None = None) -> None:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    manifest = {"sha256": {p.relative_to(folder).as_posix(): sha256(p) for p in files}}
    if references:
        manifest["references"] = dict(sorted(references.items()))
        manifest[REFERENCE_DIGESTS] = {n: referenced_digest(referenced_path(folder, n)) for n in sorted(references)}
    write_json(folder / MANIFEST, manifest)


def verify(folder: Path, references: bool = True) -> None:
    """Raise CheckpointError naming the first file of `folder` that is missing or damaged (and, with
    `references`, of the shards it references). A file the manifest lists must match its sha256; every other
    file (all of them in a checkpoint without a manifest) gets the structural checks of `_check_structure`, and
    a referenced shard without a recorded digest (manifests written before digests were) its size and pages'
    checksums."""
    for name in REQUIRED:
        if not (folder / name).is_file():
            raise CheckpointError(f"{folder / name}: missing")
    if not any(p.is_file() for p in (folder / "policy").rglob("*")):
        raise CheckpointError(f"{folder / 'policy'}: the policy weights are missing")
    manifest = _read_manifest(folder)
    listed = manifest.get("sha256", {})
    for name, digest in listed.items():
        path = folder / name
        if not path.is_file():
            raise CheckpointError(f"{path}: missing")
        if sha256(path) != digest:
            raise CheckpointError(f"{path}: damaged (its sha256 differs from the one recorded when it was written)")
    _check_structure(folder, vouched=set(listed))
    if references:
        sizes = manifest.get("references") or _state_references(folder)
        _check_references(folder, sizes, manifest.get(REFERENCE_DIGESTS, {}))


def _read_manifest(folder: Path) -> dict:
    """The manifest's maps ({} without a manifest); CheckpointError when it does not parse as one."""
    path = folder / MANIFEST
    if not path.exists():
        return {}
    try:
        manifest = read_json(path)
        maps = (manifest["sha256"], manifest.get("references", {}), manifest.get(REFERENCE_DIGESTS, {}))
        if not all(isinstance(m, dict) for m in maps):
            raise TypeError("its sha256, references and references_sha256 must be mappings")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{path}: unreadable ({type(e).__name__}: {e})") from None
    return manifest


def _state_references(folder: Path) -> dict[str, int]:
    """The shards state.json says the replay buffer is read back from (a checkpoint without a manifest)."""
    try:
        return dict(read_json(folder / "state.json")["replay"].get("shards") or {})
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}  # a damaged state.json is named by the structural checks


def referenced_path(checkpoint_folder: Path, name: str) -> Path:
    """Where a file a checkpoint references lives: `name` is absolute or relative to the run folder."""
    return Path(name) if Path(name).is_absolute() else checkpoint_folder.parent.parent / name


def _check_references(folder: Path, sizes: dict[str, int], digests: dict[str, str]) -> None:
    for name, size in sizes.items():
        path = referenced_path(folder, name)
        if not path.is_file():
            raise CheckpointError(f"{path}: missing (the checkpoint's replay buffer is read back from it)")
        if path.stat().st_size != size:
            raise DamagedShard(path, "its size differs from the one recorded when the checkpoint referenced it")
        if name in digests:
            if sha256(path) != digests[name]:
                raise DamagedShard(path, "its sha256 differs from the one recorded when the checkpoint referenced it")
            continue
        try:
            _check_parquet(path)
        except (ValueError, OSError) as e:
            raise DamagedShard(path, f"{type(e).__name__}: {e}") from None


def _check_json(path: Path) -> None:
    data = read_json(path)
    if path.name == "state.json":
        data["iteration"]


def _check_zip(path: Path) -> None:
    """torch.save writes a zip archive; testzip checks every member's CRC."""
    with zipfile.ZipFile(path) as archive:
        if archive.testzip() is not None:
            raise zipfile.BadZipFile("a member's CRC does not match")


def _check_parquet(path: Path) -> None:
    """Every page is read, its checksum verified where the writer recorded one (trajectory shards do)."""
    for _ in pq.ParquetFile(path, page_checksum_verification=True).iter_batches():
        pass


def _check_safetensors(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        if not 0 < header_len <= size - 8:
            raise ValueError(f"its header length {header_len} does not fit in the file")
        header = json.loads(f.read(header_len))
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if size != 8 + header_len + end:
        raise ValueError(f"it holds {size} bytes, its header says {8 + header_len + end}")


STRUCTURE = {".json": _check_json, ".pt": _check_zip, ".pth": _check_zip, ".parquet": _check_parquet,
             ".safetensors": _check_safetensors}  # fmt: skip


def _check_structure(folder: Path, vouched: set[str]) -> None:
    """The checks for the files of `folder` that no recorded digest vouches for: JSON parses (state.json names
    its iteration), zip archives pass their CRCs (torch.save: learner.pt, element_pointer.pt), Parquet pages
    their checksums, safetensors files are as long as their headers say. Files of other kinds are only
    required to be there."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel not in vouched and rel != MANIFEST and path.suffix in STRUCTURE:
            _check_file(path, STRUCTURE[path.suffix])


def _check_file(path: Path, check: Callable[[Path], None]) -> None:
    try:
        check(path)
    except (ValueError, KeyError, TypeError, IndexError, OSError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"{path}: damaged ({type(e).__name__}: {e})") from None


def _newest_first(run_dir: Path) -> Iterator[tuple[Path, CheckpointError | None]]:
    """Each complete checkpoint, newest first, with what `verify` found wrong with it, up to the first intact one."""
    for folder in reversed(complete_checkpoints(run_dir)):
        try:
            verify(folder)
        except CheckpointError as e:
            yield folder, e
            continue
        yield folder, None
        return


def newest_intact(run_dir: Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest checkpoint that passes `verify`, and the newer ones that did not with the reason."""
    damaged = []
    for folder, error in _newest_first(run_dir):
        if error is None:
            return folder, damaged
        damaged.append((folder, str(error)))
    return None, damaged


def resume_point(run_dir: Path) -> tuple[Path, list[str]]:
    """The checkpoint a resume continues from, the newest intact one, and a line for each newer one passed over
    that names what is wrong with it. A damaged shard of the run is renamed to SHARD.damaged, out of its shards,
    so that the resumed run, which never needs it, does not trip over it when it indexes them. NoCheckpoint when
    the run holds no complete checkpoint; CheckpointError naming every damaged file when none is intact."""
    found, passed_over = None, []
    for folder, error in _newest_first(run_dir):
        if error is None:
            found = folder
            break
        passed_over.append((folder, f"{error}{_set_aside(error, run_dir)}"))
    if found is None and not passed_over:
        raise NoCheckpoint(f"{run_dir} holds no complete checkpoint")
    if found is None:
        raise CheckpointError(f"no intact checkpoint in {run_dir}: " + "; ".join(why for _, why in passed_over))
    return found, [
        f"checkpoint {f.name} is damaged and passed over: {why}; resuming from {found}" for f, why in passed_over
    ]


def _set_aside(error: CheckpointError, run_dir: Path) -> str:
    """Rename a damaged shard of the run (never an offline.data file elsewhere) out of the run's shards."""
    if not isinstance(error, DamagedShard) or not error.path.resolve().is_relative_to(Path(run_dir).resolve()):
        return ""
    aside = error.path.with_name(error.path.name + ".damaged")
    try:
        error.path.rename(aside)
    except OSError:
        return ""
    return f", moved to {aside.name}"
