"""How a LoRA policy is saved: its adapter in `adapter/`, and its frozen base either copied into `base/` (a base
built from config) or named by a pointer, `base.json` (a base that came from a folder or the Hugging Face Hub:
copying 14 GB per checkpoint buys nothing).

The pointer names a Hub base by id and commit, and a local base by its absolute path and, when it is near (in the
same run folder), its path relative to the checkpoint, so a run folder can move.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rlsys.config.hub_id import is_hub_id
from rlsys.policies.hub import model_folder, snapshot_revision

ADAPTER_DIR = "adapter"
BASE_DIR = "base"
BASE_POINTER = "base.json"
NEAR_LEVELS = 3  # a checkpoint's policy folder is RUN/checkpoints/N/policy: three levels up is the run folder


@dataclass(frozen=True)
class BaseSource:
    """Where a frozen LoRA base came from: a Hugging Face Hub id (and its commit) or a local folder."""

    name: str  # a Hub id, or an absolute local path
    revision: str | None = None

    @classmethod
    def of(cls, value: str | os.PathLike, folder: Path) -> BaseSource:
        if is_hub_id(value):
            return cls(str(value), snapshot_revision(folder))
        return cls(str(folder.resolve()))

    def pointer(self, checkpoint: Path) -> dict:
        """The `base.json` of a checkpoint saved at `checkpoint`."""
        if is_hub_id(self.name):
            return {"hub_id": self.name, "revision": self.revision}
        record = {"absolute": self.name}
        relative = os.path.relpath(self.name, checkpoint.resolve())
        common = Path(os.path.commonpath([self.name, checkpoint.resolve()]))
        if Path(relative).parts.count("..") <= NEAR_LEVELS and common != Path(common.anchor):
            record["relative"] = relative
        return record


def is_peft(model) -> bool:
    """Whether `model` is wrapped in a LoRA adapter."""
    return hasattr(model, "peft_config")


def without_lora(state: dict) -> dict:
    """The base model's own weights from a LoRA-wrapped state dict (what `base/` holds)."""
    return {k.replace(".base_layer.", "."): v for k, v in state.items() if "lora_" not in k}


def lora_base(folder: Path, anchor: Path | None = None) -> tuple[Path, BaseSource | None]:
    """The local folder of a LoRA checkpoint's frozen base, and where it came from (None: the checkpoint's own
    `base/` copy). A local base is looked for at its absolute path, then relative to the checkpoint: `anchor`,
    where `folder` is a copy of, else `folder` itself."""
    anchor = anchor or folder
    pointer = folder / BASE_POINTER
    if not pointer.is_file():
        return folder / BASE_DIR, None
    record = json.loads(pointer.read_text())
    if record.get("hub_id"):
        source = BaseSource(record["hub_id"], record.get("revision"))
        return model_folder(source.name, str(anchor / BASE_POINTER), source.revision), source
    tried = [Path(record[k]) for k in ("absolute", "relative", "path") if record.get(k)]  # "path": older pointers
    for candidate in tried:
        base = candidate if candidate.is_absolute() else anchor / candidate
        if base.is_dir():
            return base, BaseSource(str(base.resolve()))
    raise FileNotFoundError(
        f"{anchor / BASE_POINTER}: the LoRA base folder is not at {' nor '.join(str(p) for p in tried)}; put the "
        f"base back there or edit {BASE_POINTER}"
    )


def write_pointer(checkpoint: Path, source: BaseSource) -> None:
    """The `base.json` of the LoRA checkpoint saved at `checkpoint`, naming `source`."""
    _write(checkpoint / BASE_POINTER, source.pointer(checkpoint))


def base_pointer_for(folder: Path, place: Path) -> None:
    """Make the `base.json` of the LoRA policy saved in `folder` hold where its files will be stored, `place`
    (the learner saves through a temporary folder): its relative path is computed from `place`."""
    pointer = folder / BASE_POINTER
    if pointer.is_file():
        record = json.loads(pointer.read_text())
        if record.get("absolute"):
            _write(pointer, BaseSource(record["absolute"]).pointer(place))


def base_pointer_from(folder: Path, place: Path) -> None:
    """Make the `base.json` of the LoRA policy in `folder`, a copy of the one stored at `place` (the learner loads
    through a temporary folder), name the base it finds from `place` by its absolute path: a run folder that moved
    is found through the path relative to `place`."""
    pointer = folder / BASE_POINTER
    if pointer.is_file() and not json.loads(pointer.read_text()).get("hub_id"):
        base, _ = lora_base(folder, anchor=place)
        _write(pointer, {"absolute": str(base.resolve())})


def _write(pointer: Path, record: dict) -> None:
    pointer.write_text(json.dumps(record, indent=1) + "\n")
