"""FSDP2 over two gloo processes on the CPU takes the optimizer steps one process takes on the whole batch, and its
gathered weights and optimizer states are the whole ones."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from rlsys.config import LearnerConfig, PolicyConfig
from rlsys.config.policy import LoraConfig
from rlsys.core.types import Observation
from rlsys.learners import distributed, sharding
from rlsys.learners.imitation import ActorSample, ActorUpdate
from rlsys.policies import build_policy

POLICY = PolicyConfig(kind="causal_lm", d_model=64, d_ff=128, num_layers=2, constrained=False)
LORA = replace(POLICY, lora=LoraConfig(enabled=True, r=4, alpha=8, dropout=0.0))
LEARNER = LearnerConfig(batch_size=5, grad_accumulation=2, lr=3e-3, grad_clip=1.0)
STEPS = 3


def samples() -> list[ActorSample]:
    """Actions of different lengths, so the two shards hold different token counts."""
    out = []
    for i in range(12):
        obs = Observation(b"", f'[{i % 5}] button "b{i}"', "about:blank", ["open mail", "buy a sofa"][i % 2])
        out.append(ActorSample(obs, f"click [{i % 5}]" + " x" * (i % 4), None))
    return out


def train(policy_cfg: PolicyConfig, shard: bool, items: int = 12) -> dict:
    """STEPS filtered-BC steps on the first `items` samples; what rank 0 (or the one process) ends with, gathered
    whole."""
    policy = build_policy(policy_cfg, seed=0)
    if shard:
        sharding.shard_model(policy.model, "cpu")
    update = ActorUpdate(LEARNER, policy, "token_mean", correct_off_policy=False, seed=1)
    metrics = update.run(samples()[:items], STEPS)
    optimizer = sharding.optimizer_state(update.optimizer.optimizer)
    return {
        "metrics": metrics,
        "weights": sharding.full_state_dict(policy.model),
        "published": _published(policy),
        "optimizer": optimizer,
        "local_shapes": [tuple(p.to_local().shape) for p in policy.parameters()] if shard else [],
    }


def _published(policy) -> dict:
    """The policy's own `state_dict` (the adapter alone with LoRA), read from the whole weights on rank 0."""
    with sharding.whole_on_rank0(policy.model) as here:
        state = policy.state_dict() if here else {}
    assert all(not isinstance(p, DTensor) for p in policy.parameters()) or sharding.is_sharded(policy.model)
    return state


def _worker(rank: int, world: int, store: str, out: str, job: str, policy_cfg: PolicyConfig) -> None:
    torch.set_num_threads(1)
    timeout = timedelta(seconds=30)  # a pass one rank runs and the other does not fails, instead of hanging
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=timeout)
    try:
        result = globals()[job](policy_cfg)
        torch.save(result, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()
    # Leave without the interpreter's teardown: about one exit in thirty, a gloo thread still tied to the device
    # mesh is destroyed there while joinable, and std::terminate aborts a rank whose result is already saved.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def in_group(tmp_path, job: str, policy_cfg: PolicyConfig, world: int = 2) -> list:
    """Run `job(policy_cfg)` in `world` gloo processes; each rank's result."""
    out = str(tmp_path / job)
    mp.spawn(_worker, args=(world, str(tmp_path / "store"), out, job, policy_cfg), nprocs=world)
    return [torch.load(f"{out}.{rank}", weights_only=False) for rank in range(world)]


def sharded_training(policy_cfg: PolicyConfig) -> dict:
    return train(policy_cfg, shard=True)


def training_on_one_sample(policy_cfg: PolicyConfig) -> dict:
    return train(policy_cfg, shard=True, items=1)


def distance(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return sum(float((a[k].float() - b[k].float()).pow(2).sum()) for k in a) ** 0.5


@pytest.mark.parametrize("policy_cfg", [POLICY, LORA], ids=["full", "lora"])
def test_fsdp2_over_gloo_matches_one_process_on_the_whole_batch(tmp_path, policy_cfg):
    start = sharding.full_state_dict(build_policy(policy_cfg, seed=0).model)
    one = train(policy_cfg, shard=False)
    ranks = in_group(tmp_path, "sharded_training", policy_cfg)
    two = ranks[0]

    # each rank held about half of every parameter's rows
    assert ranks[0]["local_shapes"] != ranks[1]["local_shapes"] or policy_cfg.lora.enabled
    assert ranks[1]["weights"] == {} and ranks[1]["published"] == {}  # whole tensors go to rank 0 only
    moved = distance(start, one["weights"])
    assert moved > 0
    assert distance(one["weights"], two["weights"]) < 1e-3 * moved
    assert distance(one["published"], two["published"]) < 1e-3 * moved
    assert one["published"].keys() == two["published"].keys()
    for key in ("actor/loss", "actor/grad_norm"):
        assert two["metrics"][key] == pytest.approx(one["metrics"][key], rel=1e-4), key
    # Adam's moments gathered whole on rank 0 equal one process's
    assert ranks[1]["optimizer"] == {}
    for index, state in one["optimizer"]["state"].items():
        for name, value in state.items():
            torch.testing.assert_close(two["optimizer"]["state"][index][name], value, rtol=1e-3, atol=1e-6)


def test_a_micro_batch_smaller_than_the_group_trains_as_one_process(tmp_path):
    """One sample, two ranks: rank 1's shard is empty, yet it must run rank 0's forward and backward passes."""
    start = sharding.full_state_dict(build_policy(POLICY, seed=0).model)
    one = train(POLICY, shard=False, items=1)
    two = in_group(tmp_path, "training_on_one_sample", POLICY)[0]
    assert distance(one["weights"], two["weights"]) < 1e-3 * distance(start, one["weights"])


def uneven_passes(policy_cfg: PolicyConfig) -> dict:
    """Rank 0 runs two backward passes, rank 1 one and a pass that adds nothing (a stand-in item times zero): the
    gradient is the sum of the three real passes'."""
    policy = build_policy(policy_cfg, seed=0)
    sharding.shard_model(policy.model, "cpu")
    update = ActorUpdate(LEARNER, policy, "token_mean", correct_off_policy=False)
    items = samples()
    chunks = [items[0:2], items[2:3]] if dist.get_rank() == 0 else [items[3:6]]
    passes = distributed.agreed_passes(len(chunks), policy.parameters())
    for chunk in chunks:
        update.loss_sum(chunk).total.backward()
    for _ in range(passes - len(chunks)):
        (update.loss_sum(items[:1]).total * 0.0).backward()
    return {"passes": passes, "grads": [p.grad.full_tensor() for p in policy.parameters()]}


def test_a_rank_with_fewer_chunks_matches_the_group_with_passes_that_add_nothing(tmp_path):
    policy = build_policy(POLICY, seed=0)
    update = ActorUpdate(LEARNER, policy, "token_mean", correct_off_policy=False)
    items = samples()
    for chunk in (items[0:2], items[2:3], items[3:6]):
        update.loss_sum(chunk).total.backward()
    assert distributed.agreed_passes(3, policy.parameters()) == 3  # outside a group: this process's own
    ranks = in_group(tmp_path, "uneven_passes", POLICY)
    assert [r["passes"] for r in ranks] == [2, 2]
    for got, p in zip(ranks[0]["grads"], policy.parameters()):
        torch.testing.assert_close(got, p.grad, rtol=1e-4, atol=1e-6)


def checkpoint_round_trip(policy_cfg: PolicyConfig) -> dict:
    """Gathered weights and optimizer state loaded into a fresh sharded model and optimizer: the next step is the
    one the first model would have taken."""
    trained = build_policy(policy_cfg, seed=0)
    sharding.shard_model(trained.model, "cpu")
    first = ActorUpdate(LEARNER, trained, "token_mean", correct_off_policy=False, seed=1)
    first.run(samples(), 2)
    saved = io.BytesIO()  # rank 0 writes the checkpoint; every rank reads the same files
    torch.save([sharding.full_state_dict(trained.model), sharding.optimizer_state(first.optimizer.optimizer)], saved)
    files = [saved.getvalue()]
    dist.broadcast_object_list(files)
    weights, optimizer = torch.load(io.BytesIO(files[0]), weights_only=True)

    fresh = build_policy(policy_cfg, seed=5)
    sharding.shard_model(fresh.model, "cpu")
    second = ActorUpdate(LEARNER, fresh, "token_mean", correct_off_policy=False, seed=1)
    sharding.load_full_state_dict(fresh.model, weights)
    sharding.load_optimizer_state(second.optimizer.optimizer, optimizer)
    second.rng.setstate(first.rng.getstate())
    first.run(samples(), 1)
    second.run(samples(), 1)
    return {"first": sharding.full_state_dict(trained.model), "second": sharding.full_state_dict(fresh.model)}


def test_a_sharded_checkpoint_resumes_the_same_steps(tmp_path):
    rank0 = in_group(tmp_path, "checkpoint_round_trip", POLICY)[0]
    assert distance(rank0["first"], rank0["second"]) == 0


def bucketed_sums(policy_cfg: PolicyConfig) -> dict:
    """Replicated gradients summed through buckets smaller than the model; a sharded parameter is left alone."""
    distributed.BUCKET_ELEMENTS = 8
    rank = dist.get_rank()
    shapes = ((5, torch.float32), (7, torch.bfloat16), (3, torch.float32), (20, torch.float32))
    params = [torch.nn.Parameter(torch.zeros(n, dtype=dtype)) for n, dtype in shapes]
    for p in params:
        p.grad = torch.full_like(p, rank + 1.5)
    if rank == 0:
        params[2].grad = None  # a parameter rank 0's passes left without a gradient: zeros
    sharded = distribute_tensor(torch.ones(4, 2), init_device_mesh("cpu", (2,)), [Shard(0)])
    sharded.grad = sharded.detach() * (rank + 1)
    distributed.sum_gradients(params + [sharded])
    return {"grads": [p.grad for p in params], "sharded": sharded.grad.to_local()}


def test_gradients_are_summed_bucket_by_bucket(tmp_path):
    ranks = in_group(tmp_path, "bucketed_sums", POLICY)
    for rank, result in enumerate(ranks):
        assert [g.dtype for g in result["grads"]] == [torch.float32, torch.bfloat16, torch.float32, torch.float32]
        for n, grad in zip((5, 7, 3, 20), result["grads"]):
            assert torch.equal(grad.float(), torch.full((n,), 4.0 if n != 3 else 2.5))
        assert torch.equal(result["sharded"], torch.full((2, 2), rank + 1.0))
    assert len(distributed._buckets([torch.zeros(n) for n in (5, 7, 3, 20)])) == 1  # at the default size


def test_a_learner_that_shards_nothing_does_not_import_fsdp():
    """FSDP2's and distributed checkpointing's modules cost every learner and driver process about a second of CPU
    to import: they are imported where a model is sharded, and a DTensor is told without them."""
    heavy = ("torch.distributed.tensor", "torch.distributed.fsdp", "torch.distributed.checkpoint")
    code = f"import sys, rlsys.learners.runtime.learner; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    # a plain tensor is no DTensor; that a DTensor is one, the group tests above show (their sums would differ)
    assert not distributed.is_dtensor(torch.zeros(2))
