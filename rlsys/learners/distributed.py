"""Data parallelism inside a learner group (torch.distributed: gloo on CPU, NCCL on GPUs).

Every process holds the same data, draws the same micro-batches with the same RNG and trains on its
own slice of each; gradients and loss normalisers are summed across processes, so N processes take
exactly the optimizer steps one process would take on the whole batch. Outside a group (a single
learner) every function here is the identity. The group itself is set up by the learner actors
(rlsys.learners.runtime.rendezvous).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


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


def sum_gradients(params: list[torch.nn.Parameter]) -> None:
    """Replace each gradient by its sum over the group, in one flat all-reduce; a process whose shard
    was empty contributes zeros."""
    if not in_group():
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1).float() for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[offset : offset + n].view_as(p).to(p.dtype)
        offset += n


def _device() -> str:
    return "cuda" if dist.get_backend() == "nccl" else "cpu"
