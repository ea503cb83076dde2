"""Data parallelism inside a learner group (torch.distributed: gloo on CPU, NCCL on GPUs).

Every process holds the same data, draws the same micro-batches with the same RNG and trains on its
own slice of each; gradients and loss normalisers are summed across processes, so N processes take
exactly the optimizer steps one process would take on the whole batch. Outside a group (a single
learner) every function here is the identity. The group itself is set up by the learner actors
(rlsys.learners.runtime.rendezvous).

Parameters sharded by FSDP2 (`learner.sharding: fsdp2`, rlsys.learners.sharding) are DTensors whose
gradients FSDP has already summed over the group in the backward pass; `sum_gradients` leaves them be.
Their forward and backward passes are collective, so every rank runs as many as the rank with the most
(`agreed_passes`).
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

BUCKET_ELEMENTS = 1 << 25  # gradients summed per all-reduce: 128 MB in float32


def is_loaded_instance(value, module: str, name: str) -> bool:
    """isinstance(value, module.name), without importing `module`: if it was never imported, nothing can be an
    instance of its class. FSDP2's modules (imported by rlsys.learners.sharding where a model is sharded) cost every
    learner and driver process about a second of CPU at start."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(value, getattr(loaded, name))


def is_dtensor(value) -> bool:
    """Whether `value` is a DTensor (a sharded parameter or state)."""
    return is_loaded_instance(value, "torch.distributed.tensor", "DTensor")


def in_group() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank_and_size() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if in_group() else (0, 1)


def shard(items: list) -> list:
    """This process's slice of a batch every process drew identically."""
    rank, size = rank_and_size()
    return items[rank::size]


def sum_over_group(value: float) -> float:
    if not in_group():
        return value
    t = torch.tensor([value], dtype=torch.float64, device=_device())
    dist.all_reduce(t)
    return float(t.item())


def agreed_passes(passes: int, params) -> int:
    """How many forward and backward passes this process runs for a micro-batch it has `passes` parts of: its
    own, or, where `params` are sharded (each pass gathers them from the whole group), the most any process
    of the group has. A process with fewer parts makes up the difference with passes that add nothing (a
    stand-in item's loss times zero)."""
    if not in_group() or not any(is_dtensor(p) for p in params):
        return passes
    t = torch.tensor([passes], dtype=torch.int64, device=_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def sum_gradients(params: list[torch.nn.Parameter]) -> None:
    """Replace each gradient by its sum over the group, summed in float32 through flat buckets of at most
    BUCKET_ELEMENTS (a whole model's flat copy would double a large model's gradient memory); a process
    whose shard was empty contributes zeros. Sharded parameters' gradients are sums already."""
    if not in_group():
        return
    replicated = [p for p in params if not is_dtensor(p)]
    for bucket in _buckets(replicated):
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in bucket]
        flat = torch.cat([g.reshape(-1).float() for g in grads])
        dist.all_reduce(flat)
        offset = 0
        for p, g in zip(bucket, grads):
            n = g.numel()
            p.grad = flat[offset : offset + n].view_as(p).to(p.dtype)
            offset += n


def _buckets(params: list[torch.nn.Parameter]) -> list[list[torch.nn.Parameter]]:
    """Consecutive runs of parameters of at most BUCKET_ELEMENTS elements (a larger one alone)."""
    buckets, current, size = [], [], 0
    for p in params:
        if current and size + p.numel() > BUCKET_ELEMENTS:
            buckets.append(current)
            current, size = [], 0
        current.append(p)
        size += p.numel()
    return buckets + [current] if current else buckets


def _device() -> str:
    return "cuda" if dist.get_backend() == "nccl" else "cpu"
