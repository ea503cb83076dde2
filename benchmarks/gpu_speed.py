"""Rollout and update speed of rlsys policies at real sizes against a plain Hugging Face / peft loop on the
same model and batch, in one run, one JSON line per case. No Ray, no browser: models are built from config
(random weights, Qwen2-VL-shaped 1.5B and 7B, AutoUI-base) directly on the device.

    python benchmarks/gpu_speed.py                          # one GPU: every case, 147 s on an H100
    python benchmarks/gpu_speed.py --device cpu --scale tiny  # the same cases at toy sizes (the test suite's)

Acting: ms per token step of `policy.act` (LoRA merged for acting, and not) against `model.generate` on the same
prompts. Updating: samples/s of filtered BC's update (packing and the token budget as configured, `auto` by
default) against a plain step (padded forward, token-mean NLL, backward, fused AdamW) on the same samples,
TFLOP/s counted as 6 x parameters x tokens (full fine-tuning) or 4 x (LoRA: no weight gradients of the frozen
base), as a share of the bf16 matmul peak measured in the same run, and the peak memory of each.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_throughput import trajectories  # noqa: E402

from rlsys.config import load_config  # noqa: E402
from rlsys.learners.registry import build_algorithm  # noqa: E402
from rlsys.policies import build_policy  # noqa: E402

QWEN_1_5B = {"kind": "vlm", "arch": "qwen2_vl", "d_model": 1536, "d_ff": 8960, "num_layers": 28, "num_heads": 12,
             "image_size": 448}  # fmt: skip
QWEN_7B = QWEN_1_5B | {"d_model": 3584, "d_ff": 18944, "num_heads": 28}
AUTOUI_BASE = {"kind": "autoui", "d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12}
TINY_VLM = {"kind": "vlm", "arch": "qwen2_vl", "d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 2,
            "image_size": 56}  # fmt: skip
TINY_AUTOUI = {"kind": "autoui", "d_model": 32, "d_ff": 64, "num_layers": 2, "num_heads": 2}
LORA = {"enabled": True, "r": 64, "alpha": 64, "dropout": 0.0}


def cases(scale: str) -> list[dict]:
    real = scale == "real"
    vlm, big = (QWEN_1_5B, QWEN_7B) if real else (TINY_VLM, TINY_VLM)
    act_batch, upd = (8, 16) if real else (2, 4)
    return [
        {"name": "1.5B full", "policy": vlm, "act_batch": act_batch, "update_batch": upd},
        {"name": "1.5B lora r64", "policy": vlm | {"lora": LORA}, "act_batch": 4 * act_batch, "update_batch": upd},
        {
            "name": "7B lora r64",
            "policy": big | {"lora": LORA},
            "act_batch": act_batch,
            "update_batch": upd,
            "budgets": ["auto", 4096 if real else 256, 2048 if real else 128],
        },  # fmt: skip
        {
            "name": "autoui-base",
            "policy": AUTOUI_BASE if real else TINY_AUTOUI,
            "update_batch": 32 if real else 4,
            "algorithms": ["filtered_bc", "digirl"],
            "plain": False,
            "action_space": "coords",
        },  # fmt: skip
    ]


class Clock:
    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def best(self, fn, reps: int = 2) -> float:
        """The best of `reps` timed calls after one warm-up."""
        fn()
        self.sync()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - start)
        return min(times)

    def peak_gib(self) -> float | None:
        return round(torch.cuda.max_memory_allocated() / 2**30, 1) if self.cuda else None

    def reset_peak(self) -> None:
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()


def matmul_peak_tflops(clock: Clock, device: str) -> float | None:
    if not clock.cuda:
        return None
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    seconds = clock.best(lambda: [a @ a for _ in range(10)], reps=3) / 10
    return round(2 * 8192**3 / seconds / 1e12, 1)


def build(case: dict, device: str, algorithm: str = "filtered_bc", budget="auto", merge=True, new_tokens: int = 32):
    policy_cfg = case["policy"]
    if "lora" in policy_cfg:
        policy_cfg = policy_cfg | {"lora": policy_cfg["lora"] | {"merge_for_acting": merge}}
    cfg = load_config(None, data={
        "env": {"action_space": case.get("action_space", "pae")},
        "policy": policy_cfg | {"constrained": False, "max_new_tokens": new_tokens},
        "learner": {"algorithm": algorithm, "batch_size": case["update_batch"], "updates_per_iteration": 3,
                    "filter": "success", "max_tokens_per_micro_batch": budget},
    })  # fmt: skip
    with torch.device(device):  # weights initialised where they will live, not on the CPU first
        policy = build_policy(cfg.policy, seed=0, device=device)
    return cfg, policy


def act_rows(case: dict, device: str, clock: Clock, emit, new_tokens: int) -> None:
    observations = [s.observation for t in trajectories(case["act_batch"]) for s in t.steps][: case["act_batch"]]
    lora = "lora" in case["policy"]
    for merge in [True, False] if lora else [True]:
        _, policy = build(case, device, merge=merge, new_tokens=new_tokens)
        seconds = clock.best(lambda policy=policy: policy.act(observations))
        steps = new_tokens + 1
        row = {"case": case["name"], "what": "act", "batch": len(observations), "lora_merged": merge if lora else None,
               "s": round(seconds, 3), "ms_per_token_step": round(1000 * seconds / steps, 1)}  # fmt: skip
        if merge:
            row |= plain_generate(policy, observations, steps, clock)
        emit(row)
        del policy
        clock.reset_peak()


def plain_generate(policy, observations, steps: int, clock: Clock) -> dict:
    """`generate` on the same prompts with no processors, every row running to `steps` tokens."""
    batch = policy._to_device(policy.inputs.batch(policy._encoded(observations), side="left")[0])
    pad = policy.tokenizer.pad_token_id
    settings = dict(do_sample=True, max_new_tokens=steps, min_new_tokens=steps, pad_token_id=pad)
    seconds = clock.best(lambda: policy.model.generate(**batch, **settings))
    ms = round(1000 * seconds / steps, 1)
    return {"hf_generate_ms_per_token_step": ms, "prompt_len": batch["input_ids"].shape[1]}


def plain_step(policy, samples, clock: Clock):
    """A padded teacher-forced NLL step with fused AdamW: what a hand-written loop on the same model does."""
    params = [p for p in policy.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-6, fused=clock.cuda or None)
    policy.cfg = replace(policy.cfg, packing="off")
    observations, actions = [s.observation for s in samples], [s.action_text for s in samples]

    def step():
        logp, mask = policy.token_logprobs(observations, actions)
        (-(logp.sum() / mask.sum())).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    policy.train()
    return step


def update_rows(case: dict, device: str, clock: Clock, peak: float | None, emit) -> None:
    for algorithm in case.get("algorithms", ["filtered_bc"]):
        for budget in case.get("budgets", ["auto"]):
            row = {"case": case["name"], "what": "update", "algorithm": algorithm, "batch": case["update_batch"],
                   "max_tokens_per_micro_batch": budget}  # fmt: skip
            try:
                row |= update_row(case, algorithm, budget, device, clock, peak)
            except Exception as e:  # an OOM is a result; the other rows still run
                row |= {"error": f"{type(e).__name__}: {e}"[:300]}
            emit(row)
            clock.reset_peak()


def update_row(case: dict, algorithm: str, budget, device: str, clock: Clock, peak: float | None) -> dict:
    """rlsys's update (three optimizer steps of `update_batch` samples), then the plain step on the same model."""
    data = trajectories(64)
    clock.reset_peak()
    cfg, policy = build(case, device, algorithm=algorithm, budget=budget)
    algo = build_algorithm(cfg, policy, device)
    metrics = []
    seconds = clock.best(lambda: metrics.append(algo.update(data)), reps=1)
    samples = metrics[-1].get("actor/updates", 0) * case["update_batch"]
    row = {"budget_tokens": algo.actor.token_budget, "packing": getattr(policy, "packing", None),
           "samples_per_s": round(samples / seconds, 1), "peak_GiB": clock.peak_gib()}  # fmt: skip
    algo = None  # its optimizer state is freed before the plain step
    if not case.get("plain", True) or budget != "auto":
        return row
    steps = [s for t in data for s in t.steps][: case["update_batch"]]
    tokens = sum(policy.sequence_lengths([s.observation for s in steps], [s.action_text for s in steps]))
    params = sum(p.numel() for p in policy.model.parameters())
    trainable = sum(p.numel() for p in policy.model.parameters() if p.requires_grad)
    flops = (6 if trainable == params else 4) * params * tokens  # per step of update_batch samples
    row |= {"tokens_per_sample": round(tokens / case["update_batch"]), "params_M": round(params / 1e6),
            "rlsys_tflops": round(flops / case["update_batch"] * row["samples_per_s"] / 1e12, 1)}  # fmt: skip
    clock.reset_peak()
    try:
        plain = clock.best(plain_step(policy, steps, clock), reps=2)
    except torch.OutOfMemoryError as e:
        return row | {"plain_error": f"OutOfMemoryError: {e}"[:120]}
    row |= {"plain_samples_per_s": round(case["update_batch"] / plain, 1),
            "plain_tflops": round(flops / plain / 1e12, 1), "plain_peak_GiB": clock.peak_gib()}  # fmt: skip
    if peak:
        row |= {"rlsys_mfu": round(row["rlsys_tflops"] / peak, 3), "plain_mfu": round(row["plain_tflops"] / peak, 3)}
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--scale", choices=["real", "tiny"], default="real")
    parser.add_argument("--only", nargs="*", help="case names to run (default: all)")
    parser.add_argument("--out", type=Path, help="also write the JSON lines here")
    args = parser.parse_args(argv)
    clock = Clock(args.device)
    lines = []

    def emit(row: dict) -> None:
        lines.append(row)
        print(json.dumps(row), flush=True)
        if args.out:
            args.out.write_text("".join(json.dumps(r) + "\n" for r in lines))

    peak = matmul_peak_tflops(clock, args.device)
    emit({"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if clock.cuda else "cpu",
          "bf16_matmul_peak_tflops": peak, "scale": args.scale})  # fmt: skip
    new_tokens = 32 if args.scale == "real" else 4
    for case in cases(args.scale):
        if args.only and case["name"] not in args.only:
            continue
        parts = {"act": lambda case=case: act_rows(case, args.device, clock, emit, new_tokens),
                 "update": lambda case=case: update_rows(case, args.device, clock, peak, emit)}  # fmt: skip
        for what, run in parts.items():
            if what == "act" and "act_batch" not in case:
                continue
            try:
                run()
            except Exception as e:  # one failing case (an OOM) is a result; the others still run
                emit({"case": case["name"], "what": what, "error": f"{type(e).__name__}: {e}"[:400],
                      "traceback": traceback.format_exc()[-800:]})  # fmt: skip
                clock.reset_peak()


if __name__ == "__main__":
    main()
