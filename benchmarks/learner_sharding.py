"""FSDP2 on CUDA (`learner.sharding: fsdp2`, rlsys/learners/sharding.py) without Ray: one JSON line per check.

`one_rank`: NCCL with one process, a Qwen2-shaped bf16 model sharded as the learner shards it; three Adam steps
against an unsharded copy of the same model on the same batches (largest weight difference), the whole weights and
optimizer states gathered to the CPU and loaded back, step time and peak memory. `two_ranks_one_gpu`: two NCCL
processes on one GPU, which NCCL may refuse (it is reported, not hidden); where it runs, the two ranks' steps are
compared with one process's on the whole batch.

    python benchmarks/learner_sharding.py [small|real] [--two]
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.tensor import DTensor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from rlsys.learners import distributed, sharding  # noqa: E402

SIZES = {  # hidden, layers, intermediate, vocab
    "small": (256, 2, 512, 1024),
    "real": (1536, 28, 8960, 32000),  # Qwen2-1.5B-shaped
}


def model_of(size: str):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, layers, inter, vocab = SIZES[size]
    heads = hidden // 128
    cfg = Qwen2Config(hidden_size=hidden, num_hidden_layers=layers, intermediate_size=inter, vocab_size=vocab,
                      num_attention_heads=heads, num_key_value_heads=heads, tie_word_embeddings=True)  # fmt: skip
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg).to("cuda", torch.bfloat16)


def batches(vocab: int, rows: int, steps: int = 3) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, vocab, (rows, 256), generator=g) for _ in range(steps)]


def step(model, optimizer, ids: torch.Tensor, total_tokens: int) -> float:
    """Backward on the loss sum, divided by the whole batch's count (the project's convention), clip, Adam."""
    for p in model.parameters():
        p.grad = None
    logits = model(input_ids=ids.cuda()).logits[:, :-1].float()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1).cuda(),
                                             reduction="sum") / total_tokens  # fmt: skip
    loss.backward()
    distributed.sum_gradients(list(model.parameters()))
    norm = torch.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0)
    optimizer.step()
    return float(norm)


def plain(t: torch.Tensor) -> torch.Tensor:
    return (t.to_local() if isinstance(t, DTensor) else t).detach().float().cpu()


def max_difference(a: dict, b: dict) -> float:
    return max(float((plain(a[k]) - plain(b[k])).abs().max()) for k in a)


def one_rank(size: str) -> dict:
    store = tempfile.mktemp()
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        sharded = model_of(size)
        unsharded = copy.deepcopy(sharded)
        sharding.shard_model(sharded, "cuda")
        opts = [torch.optim.Adam(m.parameters(), lr=1e-4) for m in (unsharded, sharded)]
        vocab = SIZES[size][3]
        times, norms = [], []
        for ids in batches(vocab, 4):
            for model, opt in zip((unsharded, sharded), opts):
                torch.cuda.synchronize()
                t = time.perf_counter()
                norms.append(step(model, opt, ids, ids[:, 1:].numel()))
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t)
        whole = sharding.full_state_dict(sharded)
        # torch 2.11 on a one-rank mesh: get_model_state_dict handed back DTensors (whole, as the rank holds all)
        left_sharded = sum(isinstance(v, DTensor) for v in whole.values())
        whole = {k: v.to_local().cpu() if isinstance(v, DTensor) else v for k, v in whole.items()}
        state = sharding.optimizer_state(opts[1])
        sharding.check_gathered(state, "optimizer")
        sharding.load_optimizer_state(opts[1], state)
        sharding.load_full_state_dict(sharded, whole)
        again = {
            k: v.to_local().cpu() if isinstance(v, DTensor) else v for k, v in sharding.full_state_dict(sharded).items()
        }
        reference = {k: v.detach().cpu() for k, v in unsharded.state_dict().items()}
        dtensors_in_copy = sum(isinstance(v, DTensor) for v in reference.values())
        return {
            "check": "one_rank", "size": size, "device": torch.cuda.get_device_name(),
            "torch": torch.__version__, "params": sum(v.numel() for v in reference.values()),
            "max_weight_difference_vs_unsharded": max_difference(reference, whole),
            "dtensors_in_full_state_dict": left_sharded,
            "dtensors_in_unsharded_copy": dtensors_in_copy,
            "reload_exact": max_difference(whole, again) == 0.0,
            "on_cpu": all(v.device.type == "cpu" for v in whole.values()),
            "grad_norms_plain_sharded": norms, "step_s_plain_sharded": times[-2:],
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
        }  # fmt: skip
    finally:
        dist.destroy_process_group()


def _two(rank: int, store: str, out: str) -> None:
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        model = model_of("small")
        sharding.shard_model(model, "cuda")
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for ids in batches(SIZES["small"][3], 4):
            step(model, opt, ids[rank::2], ids[:, 1:].numel())
        whole = sharding.full_state_dict(model)
        if rank == 0:
            torch.save(whole, out)
    finally:
        dist.destroy_process_group()


def two_ranks_one_gpu() -> dict:
    folder = tempfile.mkdtemp()
    try:
        mp.spawn(_two, args=(f"{folder}/store", f"{folder}/w.pt"), nprocs=2)
    except Exception as e:
        return {"check": "two_ranks_one_gpu", "ran": False, "error": str(e)[-600:]}
    model = model_of("small")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for ids in batches(SIZES["small"][3], 4):
        step(model, opt, ids, ids[:, 1:].numel())
    reference = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    whole = torch.load(f"{folder}/w.pt")
    return {"check": "two_ranks_one_gpu", "ran": True, "max_weight_difference": max_difference(reference, whole)}


if __name__ == "__main__":
    size = next((a for a in sys.argv[1:] if a in SIZES), "small")
    checks = [lambda: one_rank(size)] + ([two_ranks_one_gpu] if "--two" in sys.argv else [])
    for check in checks:
        try:
            print(json.dumps(check()), flush=True)
        except Exception:
            print(json.dumps({"error": traceback.format_exc()[-1500:]}), flush=True)
