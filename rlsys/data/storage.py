"""Run folders in object stores (`run.output_dir: s3://bucket/prefix`, `gs://...`), through pyarrow.fs.

A remote run works in a local folder exactly as a local run does (`run.scratch_dir`), and `RunMirror`
publishes that folder to the remote one: new and changed files at every checkpoint and when the run ends,
then the checkpoint's files, its `manifest.json` last. Object stores cannot rename, so a checkpoint there is
published by its manifest: readers trust only checkpoints whose manifest exists and whose files match the
sha256 it lists. `--resume s3://...` pulls what the run needs back into the local folder first.

Credentials are never part of the URI or the config: pyarrow reads them (and AWS_ENDPOINT_URL for an
S3-compatible server) from the environment or the machine's role, as the AWS and Google SDKs do.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

from pyarrow import fs

from rlsys.data import checkpoint

log = logging.getLogger(__name__)

CREDENTIAL_PARAMS = ("access_key", "secret_key", "session_token", "credential_token_expiration")


def shown_uri(uri: str) -> str:
    """`uri` without what may hold credentials (a query, a user:password@), for messages."""
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


class RemoteFolder:
    """A folder of an object store; paths are relative to it, with forward slashes."""

    def __init__(self, uri: str):
        parts = urlsplit(uri)
        query = parse_qs(parts.query)
        given = [k for k in CREDENTIAL_PARAMS if k in query] + (["user:password@"] if "@" in parts.netloc else [])
        if given:
            raise ValueError(
                f"{shown_uri(uri)}: {', '.join(given)} in the URI; credentials come from "
                "the environment (AWS_ACCESS_KEY_ID, ...) or the machine's role, never from the run's config"
            )
        if parts.scheme == "s3":  # one PUT per small file instead of a multipart upload: fewer round trips
            query.setdefault("allow_delayed_open", ["true"])
        self.uri = f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")
        self.fs, self.root = fs.FileSystem.from_uri(f"{self.uri}?{urlencode(query, doseq=True)}")
        self.root = self.root.rstrip("/")

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def uri_of(self, rel: str) -> str:
        return f"{self.uri}/{rel}" if rel else self.uri

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.path(rel)).type == fs.FileType.File

    def files(self, rel: str = "") -> dict[str, int]:
        """Every file under `rel` (recursively), relative to `rel`, with its size; empty when there is none."""
        base = self.path(rel)
        found = self.fs.get_file_info(fs.FileSelector(base, recursive=True, allow_not_found=True))
        return {i.path[len(base) + 1 :]: i.size for i in found if i.type == fs.FileType.File}

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self.path(rel)) as f:
            return f.read()

    def write_bytes(self, rel: str, data: bytes) -> None:
        with self.fs.open_output_stream(self.path(rel)) as f:
            f.write(data)

    def upload(self, local: Path, rel: str) -> None:
        with open(local, "rb") as src, self.fs.open_output_stream(self.path(rel)) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)

    def download(self, rel: str, local: Path) -> None:
        """Copy one file here, through a temporary name: a torn download never looks like a whole file."""
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.part")
        with self.fs.open_input_stream(self.path(rel)) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        tmp.replace(local)

    def delete(self, rel: str) -> None:
        self.fs.delete_file(self.path(rel))

    def delete_dir(self, rel: str) -> None:
        if self.fs.get_file_info(self.path(rel)).type != fs.FileType.NotFound:
            self.fs.delete_dir(self.path(rel))


def published_checkpoints(remote: RemoteFolder) -> list[str]:
    """The checkpoint folders of a remote run that hold a manifest, oldest first; a folder without one is a
    checkpoint whose upload did not finish."""
    return _published(remote.files("checkpoints"))


def _published(listed) -> list[str]:
    names = {p.split("/")[0] for p in listed if p.endswith(f"/{checkpoint.MANIFEST}") and p.count("/") == 1}
    return sorted((n for n in names if n.isdigit()), key=int)


def publish_folder(local: Path, remote: RemoteFolder, rel: str, last: str) -> None:
    """Upload every file under `local` to `rel`, the file `last` (relative to `local`) after all the others: object
    stores cannot rename a folder into place, so a reader that finds `last` finds the whole folder."""
    files = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    for name in [f for f in files if f != last] + [last]:
        remote.upload(local / name, f"{rel}/{name}" if rel else name)


def fetch_checkpoint(remote: RemoteFolder, name: str, dest: Path, references: bool = True) -> Path:
    """Download the published checkpoint `checkpoints/NAME` of a remote run to `dest` (replacing it), through a
    staging folder beside it, verified against its manifest: with `references`, the shards it references must be
    in dest's run folder already (a resume); without, only its own files are (an evaluation). A CheckpointError
    names the remote file that is missing or damaged, or the checkpoint when it is not published."""
    rel = f"checkpoints/{name}"
    files = remote.files(rel)
    if checkpoint.MANIFEST not in files:
        raise checkpoint.CheckpointError(
            f"{remote.uri_of(rel)}: not a published checkpoint (no {checkpoint.MANIFEST} there: it does not exist, "
            "or its upload did not finish)"
        )
    staging = dest.parent / f".pull-{dest.name}"
    shutil.rmtree(staging, ignore_errors=True)
    for file in files:
        remote.download(f"{rel}/{file}", staging / file)
    try:
        checkpoint.verify(staging, references=references)
    except checkpoint.CheckpointError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise checkpoint.CheckpointError(str(e).replace(str(staging), remote.uri_of(rel))) from None
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest


class RunMirror:
    """Publishes the local folder of a run to its remote folder, and pulls it back for a resume."""

    def __init__(self, local: Path, remote: RemoteFolder):
        self.local, self.remote = Path(local), remote
        self._sent: dict[str, tuple[int, int]] = {}  # relative path -> (size, mtime_ns) when last uploaded

    def start(self) -> None:
        """Count the local files the remote already holds with the same size as uploaded (a resumed run on
        the machine that started it re-uploads only what changed)."""
        there = {rel: size for rel, size in self.remote.files().items() if not _is_checkpoint(rel)}
        for rel, path in self._local_files():
            stat = path.stat()
            if there.get(rel) == stat.st_size:
                self._sent[rel] = (stat.st_size, stat.st_mtime_ns)

    def push(self) -> int:
        """Upload every file of the local folder that is new or changed since its last upload (checkpoints
        and hidden temporary files aside); returns how many were uploaded."""
        sent = 0
        for rel, path in self._local_files():
            stat = path.stat()
            if self._sent.get(rel) == (stat.st_size, stat.st_mtime_ns):
                continue
            self.remote.upload(path, rel)
            self._sent[rel] = (stat.st_size, stat.st_mtime_ns)
            sent += 1
        return sent

    def publish_checkpoint(self, folder: Path, keep: int) -> str:
        """Upload the run's files (the shards a checkpoint references among them), then the checkpoint's files,
        then its manifest, which publishes it; then drop published checkpoints beyond the newest `keep` and any
        unfinished upload. Returns the checkpoint's URI."""
        self.push()
        rel = f"checkpoints/{folder.name}"
        if self.remote.exists(f"{rel}/{checkpoint.MANIFEST}"):  # the same iteration again after a resume
            self.remote.delete(f"{rel}/{checkpoint.MANIFEST}")  # unpublished before its files change
        publish_folder(folder, self.remote, rel, last=checkpoint.MANIFEST)
        listed = self.remote.files("checkpoints")  # listed once: what is dropped below is not listed again
        published = _published(listed)
        for old in published[:-keep] if keep > 0 else []:
            self.remote.delete(f"checkpoints/{old}/{checkpoint.MANIFEST}")
            self.remote.delete_dir(f"checkpoints/{old}")
        unfinished = {p.split("/")[0] for p in listed} - set(published)
        for name in unfinished:
            self.remote.delete_dir(f"checkpoints/{name}")
        return self.remote.uri_of(rel)

    def pull(self) -> str | None:
        """What a resume needs here: every file of the remote run this folder lacks (a file it has is newer
        or the same), and the newest published checkpoint that is intact, unless this folder holds it
        already. A damaged one is named and passed over. Returns the name of the checkpoint pulled or found."""
        self.local.mkdir(parents=True, exist_ok=True)
        for rel in self.remote.files():
            if not _is_checkpoint(rel) and not (self.local / rel).exists():
                self.remote.download(rel, self.local / rel)
        for name in reversed(published_checkpoints(self.remote)):
            here = checkpoint.checkpoint_root(self.local) / name
            if here.is_dir() and _intact(here):
                return name
            if self._pull_checkpoint(name):
                return name
        return None

    def _pull_checkpoint(self, name: str) -> bool:
        try:
            fetch_checkpoint(self.remote, name, checkpoint.checkpoint_root(self.local) / name)
        except checkpoint.CheckpointError as e:
            log.warning("checkpoint %s is damaged and passed over: %s", self.remote.uri_of(f"checkpoints/{name}"), e)
            return False
        return True

    def _local_files(self):
        for path in sorted(self.local.rglob("*")):
            rel = path.relative_to(self.local).as_posix()
            if path.is_file() and not _is_checkpoint(rel) and not any(p.startswith(".") for p in rel.split("/")):
                yield rel, path


def _is_checkpoint(rel: str) -> bool:
    return rel == "checkpoints" or rel.startswith("checkpoints/")


def _intact(folder: Path) -> bool:
    try:
        checkpoint.verify(folder)
    except checkpoint.CheckpointError:
        return False
    return True
