"""The weight store: the learner publishes versioned weights, runners pull when the version moved on.

The store puts each published state dict into the Ray object store itself, so it owns the
object; runners fetch it by reference (shared memory on the same node, one transfer per node
otherwise) and only when their version is older. How the weights travel without copies, and why
the tensors a reader gets must not be modified in place: `rlsys.policies.weights`.
"""

from __future__ import annotations

import ray

from rlsys.policies.weights import PackedStateDict, pack_state_dict


class WeightStore:
    def __init__(self) -> None:
        self.version = -1
        self._ref: ray.ObjectRef | None = None
        self._model_files: ray.ObjectRef | None = None

    def publish(self, version: int, state_dict: dict) -> int:
        """Store `state_dict` (name -> tensor; best sent as `pack_state_dict(state)`, which arrives here
        as a dict of tensors over shared memory) as version `version`, which must be newer than the last."""
        if version <= self.version:
            raise ValueError(f"weights version {version} is not newer than {self.version}")
        self._ref = ray.put(state_dict if isinstance(state_dict, PackedStateDict) else pack_state_dict(state_dict))
        self.version = version
        return version

    def put_model_files(self, files: dict[str, bytes]) -> None:
        """The files of a model built from config (file name -> bytes), for inference engines that load a
        folder: the store keeps them for as long as the run, so an engine Ray restarts finds them again."""
        self._model_files = ray.put(files)

    def get_model_files(self) -> list:
        """[ref] to what `put_model_files` stored, wrapped so Ray does not inline it; [] before."""
        return [self._model_files] if self._model_files is not None else []

    def get_version(self) -> int:
        return self.version

    def get_if_newer(self, version: int) -> tuple[int, list] | None:
        """(version, [ref]) when newer weights exist; the ref is wrapped so Ray does not inline it.
        Fetching the ref gives a dict of read-only torch tensors (see the module docstring)."""
        if self.version > version and self._ref is not None:
            return self.version, [self._ref]
        return None


def pull_if_newer(store, current_version: int, timeout_s: float = 60.0) -> tuple[int, dict] | None:
    """Fetch weights from a WeightStore actor when its version is newer than `current_version`.

    The state dict's tensors are zero-copy, read-only views of the object store's shared memory:
    pass them to `load_state_dict` (which copies) and do not modify them in place."""
    found = ray.get(store.get_if_newer.remote(current_version), timeout=timeout_s)
    if found is None:
        return None
    version, (ref,) = found
    return version, ray.get(ref, timeout=timeout_s)
