"""Learner throughput: (observation, action) samples per second through each algorithm's update,
on synthetic trajectories (no environment), for a policy built from config.

    python benchmarks/learner_throughput.py                      # tiny byte-T5 policy, CPU
    python benchmarks/learner_throughput.py --policy autoui-base # T5-base-sized AutoUI (a GPU machine)

DigiRL's numbers include its critic stages; filtered BC's are actor steps only.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from rlsys.config import load_config
from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.learners.registry import build_algorithm
from rlsys.policies import build_policy

POLICIES = {
    "tiny": {"kind": "tiny_t5"},
    # T5-base sizes (AutoUI-Base): d_model 768, d_ff 3072, 12 layers, 12 heads
    "autoui-base": {"kind": "autoui", "d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12},
}


def screenshot(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (160, 160, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def trajectories(n: int, steps: int = 3) -> list[Trajectory]:
    out = []
    for i in range(n):
        task = f"click button number {i % 7}"
        obs = [
            Observation(screenshot(i * 10 + t), '[0] button "ONE"\n[1] button "TWO"', "", task) for t in range(steps)
        ]
        rewards = [0.0] * (steps - 1) + [float(i % 2)]
        out.append(
            Trajectory(
                Task(f"t{i}", task, "bench"),
                [Step(o, "click [1]", None, r, t == steps - 1, 0, -1.0) for t, (o, r) in enumerate(zip(obs, rewards))],
                "success" if rewards[-1] else "failure",
                final_observation=obs[-1],
            )
        )
    return out


def measure(algorithm: str, policy_name: str, device: str, batch: int, steps: int, data: list[Trajectory]) -> dict:
    cfg = load_config(
        None,
        data={
            "env": {"action_space": "coords" if policy_name != "tiny" else "element"},
            "policy": {**POLICIES[policy_name], "constrained": False},
            "learner": {
                "algorithm": algorithm,
                "batch_size": batch,
                "updates_per_iteration": steps,
                "filter": "success",
                "digirl": {"actor_steps": steps, "instruction_critic_steps": steps, "step_critic_steps": steps,
                           "curriculum_quantile": 0.0, "lam": 1.0},
            },
        },
    )  # fmt: skip
    policy = build_policy(cfg.policy, seed=0, device=device)
    algo = build_algorithm(cfg, policy, device)
    algo.update(data[:8])  # warm-up: features cached, kernels loaded
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    started = time.perf_counter()
    metrics = algo.update(data)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    samples = sum(metrics.get(f"{m}/updates", 0) for m in ("actor", "instruction_critic", "step_critic")) * batch
    return {"algorithm": algorithm, "policy": policy_name, "device": device, "batch": batch, "seconds": seconds,
            "samples": samples, "samples_per_s": samples / seconds,
            "actor_samples_per_s": metrics.get("actor/updates", 0) * batch / seconds}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--policy", choices=sorted(POLICIES), default="tiny")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--trajectories", type=int, default=128)
    args = p.parse_args()
    data = trajectories(args.trajectories)
    rows = [measure(a, args.policy, args.device, args.batch, args.steps, data) for a in ("filtered_bc", "digirl")]
    for r in rows:
        print(
            f"{r['algorithm']:>12} {r['policy']} {r['device']} batch {r['batch']}: "
            f"{r['samples_per_s']:.0f} samples/s ({r['actor_samples_per_s']:.0f} actor samples/s)"
        )
    result = {
        "command": "python benchmarks/learner_throughput.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "rows": rows,
    }
    out = Path(__file__).parent / "results" / f"learner_throughput_{args.policy}_{args.device.split(':')[0]}.json"
    out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
