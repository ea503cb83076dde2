"""Weights packed for zero-copy transport through Ray's object store (the weight store,
`rlsys.actors.weight_store`, holds them; runners and inference servers pull them).

Zero-copy transport: a torch tensor pickled through Ray is serialised in-band (torch writes its
storage to bytes) and every reader deserialises its own private copy. Numpy arrays instead
travel as out-of-band buffers, and a reader on the same node gets an array that points straight
into the object store's shared memory. So `publish` stores every tensor as a numpy array (dtypes
numpy lacks, such as bfloat16, as a same-width integer view, with the torch dtype recorded), and
unpickling that object rebuilds the dict of torch tensors with `torch.from_numpy(...).view(dtype)`,
without copying. Whoever fetches the object (`pull_if_newer`, or `ray.get`/`await` on the ref
from `get_if_newer`, as the inference server does) gets a dict of torch tensors.

The publisher should pass `pack_state_dict(state)` rather than the torch state dict itself: the
packed form travels to the store actor the same zero-copy way (a 1 GB state dict as torch
tensors costs seconds of pickling in the call; see benchmarks/weight_publish.py). The store
accepts either.

Those tensors are read-only views of memory that every reader on the node shares: load them
with `load_state_dict` (which copies into the module's own parameters) or clone them, and never
modify them in place. Torch has no read-only tensors, so a write would not raise: it would
silently change the weights every other reader sees. Holding on to them keeps that version
pinned in the object store.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

# torch is imported where tensors are handled, not here: Ray imports this module in every process that
# holds a WeightStore handle, and a runner whose policy has no weights must not pay for torch


class PackedStateDict:
    """A state dict whose tensors are held as numpy arrays, for the Ray object store.

    Pickled, it carries the arrays (out-of-band buffers under pickle protocol 5, which Ray uses);
    unpickled, it becomes a plain dict of torch tensors that share the arrays' memory.
    """

    def __init__(self, entries: list[tuple[str, object, torch.dtype | None]]):
        self.entries = entries  # (key, numpy array or untouched value, torch dtype or None)

    def __reduce__(self):
        return _unpack, (self.entries,)


def pack_state_dict(state_dict: dict) -> PackedStateDict:
    """Tensors become numpy arrays that share their memory where they can (a CPU, contiguous tensor
    costs no copy); tensors that are views of the same memory (tied weights) share one array.
    Values that are not tensors, and tensors numpy cannot hold (sparse, quantized), pass as they are."""
    import torch

    entries: list[tuple[str, object, torch.dtype | None]] = []
    seen: dict[tuple, np.ndarray] = {}
    for key, value in state_dict.items():
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided or value.is_quantized or value.is_meta:
            entries.append((key, value, None))
            continue
        alias = (value.device, value.untyped_storage().data_ptr(), value.storage_offset(), value.shape)
        alias += (value.stride(), value.dtype)
        array = seen.get(alias) if value.untyped_storage().data_ptr() else None
        if array is None:
            array = _to_numpy(value.detach())
            seen[alias] = array
        entries.append((key, array, value.dtype))
    return PackedStateDict(entries)


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    import torch

    tensor = tensor.cpu().resolve_conj().resolve_neg().contiguous()
    try:
        return tensor.numpy()
    except TypeError:  # bfloat16, float8, complex32, ...: numpy has no such dtype; an integer view of the same width
        same_width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
        return tensor.view(same_width).numpy()


def _unpack(entries: list) -> dict:
    """Runs where the packed state dict is unpickled: torch tensors over the arrays, no copy."""
    import torch

    state = {}
    with warnings.catch_warnings():
        # arrays read from the object store are read-only; see the module docstring
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for key, value, dtype in entries:
            if dtype is None:
                state[key] = value
                continue
            tensor = torch.from_numpy(value)
            state[key] = tensor if tensor.dtype == dtype else tensor.view(dtype)
    return state
