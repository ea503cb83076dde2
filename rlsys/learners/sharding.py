"""Sharded training inside a learner group (`learner.sharding: fsdp2`): torch's FSDP2 (`fully_shard`) splits the
policy's parameters, gradients and optimizer states across the group, so a model whose training state does not fit
one GPU (a 7B full fine-tune: ~112 GB of weights, gradients and Adam states) trains on several.

Each transformer block (the model's `_no_split_modules`) is one FSDP unit, the rest of the model (embeddings, the
tied output head, the final norm) the root's. A forward gathers a unit's parameters from every rank and a backward
reduce-scatters its gradients, so every rank must run the same number of forward and backward passes
(rlsys.learners.distributed.agreed_passes). The reduce-scatter sums, in float32: FSDP's default divides by the
group's size, but the losses are already divided by the group's total count, as in the replicated group
(rlsys.learners.distributed), so the sum is the whole batch's gradient.

Gathering weights for publishing and checkpoints is collective too: every rank enters `whole_on_rank0` (or calls
`full_state_dict`), and rank 0 gets the whole tensors, on the CPU, one at a time (`get_model_state_dict` with
`full_state_dict` and `cpu_offload`); the other ranks get nothing. Optimizer states are gathered to rank 0 the same
way (`optimizer_state`), and each rank keeps its rows when they are loaded. Outside a sharded model every function
here is the identity (or the module's own state dict). torch's FSDP2 and distributed-checkpoint modules are imported
where a model is sharded or a sharded state gathered, not by every learner (about a second of CPU each).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist

from rlsys.learners.distributed import is_dtensor, is_loaded_instance


def shard_model(model: torch.nn.Module, device_type: str) -> None:
    """Shard `model` in place over the whole group (`device_type`: cpu for gloo, cuda for NCCL). Build optimizers
    after this: it replaces the parameters (by DTensors holding this rank's rows)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device_type, (dist.get_world_size(),))
    # gradients are summed in float32 whatever the weights' dtype, as the replicated group sums them
    settings = {"mesh": mesh, "mp_policy": MixedPrecisionPolicy(reduce_dtype=torch.float32)}
    blocks = set(getattr(model, "_no_split_modules", None) or ())
    for module in list(model.modules())[1:]:
        if type(module).__name__ in blocks:
            fully_shard(module, **settings)
    fully_shard(model, **settings)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # a plain SUM: gloo has no PREMUL_SUM(1 / factor)
            if hasattr(module, "set_reduce_scatter_unused_params"):  # torch >= 2.12
                # a parameter a pass left unused still takes part in the reduce-scatter, with zeros
                module.set_reduce_scatter_unused_params(True, recurse=False)


def is_sharded(model: torch.nn.Module) -> bool:
    return is_loaded_instance(model, "torch.distributed.fsdp", "FSDPModule")


def has_sharded(params) -> bool:
    """Whether any of `params` is sharded: their passes must then be matched across the group."""
    return any(is_dtensor(p) for p in params)


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's whole state dict on the CPU (collective where the model is sharded: rank 0 gets it, the others an
    empty dict)."""
    if not is_sharded(model):
        return {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    on_rank0 = StateDictOptions(full_state_dict=True, cpu_offload=True)
    # torch 2.11 left a one-rank group's tensors on the GPU despite cpu_offload (benchmarks/learner_sharding.py)
    return {k: v.cpu() for k, v in get_model_state_dict(model, options=on_rank0).items()}


@contextmanager
def whole_on_rank0(model: torch.nn.Module) -> Iterator[bool]:
    """Collective: on rank 0, for the duration, the model's parameters are its whole weights on the CPU (tied ones
    stay tied), so the policy's own `state_dict` and `save_pretrained` read them unchanged; yields whether this
    rank holds them. Nothing may run the model meanwhile. A model that is not sharded is left as it is."""
    if not is_sharded(model):
        yield True
        return
    full = full_state_dict(model)
    if dist.get_rank() != 0:
        yield False
        return
    swapped, whole = [], {}
    for name, param in model.named_parameters(remove_duplicate=False):
        owner_name, _, leaf = name.rpartition(".")
        owner = model.get_submodule(owner_name)
        if id(param) not in whole:
            whole[id(param)] = torch.nn.Parameter(full[name], requires_grad=param.requires_grad)
        swapped.append((owner, leaf, param))
        owner._parameters[leaf] = whole[id(param)]
    try:
        yield True
    finally:
        for owner, leaf, param in swapped:
            owner._parameters[leaf] = param


def load_full_state_dict(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a whole state dict (every rank passes the same) into a sharded model: each rank keeps its rows."""
    if not is_sharded(model):
        model.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))


def optimizer_state(optimizer: torch.optim.Optimizer) -> dict:
    """`optimizer.state_dict()` with each sharded state tensor gathered whole, one at a time, to rank 0's CPU
    (collective where the parameters are sharded: the other ranks get an empty dict)."""
    state = optimizer.state_dict()
    if not has_sharded(p for group in optimizer.param_groups for p in group["params"]):
        return state
    keep = dist.get_rank() == 0
    gathered = {}
    for index, values in sorted(state["state"].items()):  # the same order on every rank
        whole = {k: v.full_tensor() if is_dtensor(v) else v for k, v in values.items()}
        gathered[index] = {k: v.cpu() for k, v in whole.items()} if keep else None
    return state | {"state": gathered} if keep else {}


def check_gathered(state, what: str) -> None:
    """Refuse a state to checkpoint that still holds a sharded tensor: it would hold this rank's rows only, and a
    group loading it would train on wrong optimizer states (ModuleOptimizer gathers its own: `optimizer_state`)."""
    if is_dtensor(state):
        raise RuntimeError(f"{what} holds a sharded tensor: gather it whole (rlsys.learners.sharding.optimizer_state)")
    if isinstance(state, dict):
        for key, value in state.items():
            check_gathered(value, f"{what}[{key!r}]")
    elif isinstance(state, (list, tuple)):
        for i, value in enumerate(state):
            check_gathered(value, f"{what}[{i}]")


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Load what `optimizer_state` gave: each rank keeps its rows of the state of a sharded parameter."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if has_sharded(params):
        state = dict(state)
        state["state"] = {
            index: {k: _like(params[int(index)], v) for k, v in values.items()}
            for index, values in state["state"].items()
        }
    optimizer.load_state_dict(state)


def _like(param: torch.Tensor, value):
    """A whole state tensor shaped like a sharded parameter, as that parameter is sharded; a step count as it is."""
    if not is_dtensor(param) or not isinstance(value, torch.Tensor) or value.shape != param.shape:
        return value
    from torch.distributed.tensor import distribute_tensor

    # every rank holds the whole tensor, so each takes its own rows without communication
    return distribute_tensor(value.to(param.device), param.device_mesh, param.placements, src_data_rank=None)
