"""A Hugging Face cache filled by hand, in the layout huggingface_hub writes: models--ORG--NAME/blobs/<sha256>,
snapshots/<commit>/<file> linking to its blob, refs/main holding the commit. Nothing is downloaded."""

import hashlib
import os
from pathlib import Path


def fill_hub_cache(cache: Path, repo_id: str, folder: Path, ref: str = "main") -> Path:
    """Put the files of `folder` into `cache` as the snapshot of `repo_id` that `ref` points to; returns the
    snapshot folder (its name is the commit)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    commit = hashlib.sha1(b"".join(p.read_bytes() for p in files)).hexdigest()
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    for file in files:
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / file.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    return snapshot
