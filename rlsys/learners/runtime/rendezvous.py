"""How the processes of a learner group meet: rank 0 opens a store on its node, every rank joins the
torch.distributed group through it (gloo on CPU, NCCL on GPUs)."""

from __future__ import annotations

from datetime import timedelta

import ray
import torch.distributed as dist


def open_rendezvous(timeout_s: float) -> dist.TCPStore:
    """Rank 0: the group's rendezvous store, listening on a port the OS picks while binding it. Choosing a
    free port first and binding it later loses races with other processes on a busy node (EADDRINUSE)."""
    return dist.TCPStore(
        ray.util.get_node_ip_address(),
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_s),
    )


def join(
    store: dist.TCPStore | None, address: str, port: int, rank: int, world_size: int, backend: str, timeout_s: float
) -> None:
    """Join the group through rank 0's store: rank 0 passes the store it opened, the others connect to it."""
    timeout = timedelta(seconds=timeout_s)
    if store is None:
        store = dist.TCPStore(address, port, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
