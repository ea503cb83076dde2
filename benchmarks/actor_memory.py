"""Memory of every actor of a long run: does anything grow per iteration?

Runs `rlsys-train` (the quick start's config, `--iterations` iterations) and samples, every
`--every` seconds, the unique memory (USS) of every process of the run: the driver, each Ray actor by
name (runners, learner, replay buffer, weight store, ...) and each runner's Chromium (all its
processes together). Per process group: the memory after the first tenth of the run, at the end, and
the slope over the second half in MiB per iteration.

    python benchmarks/actor_memory.py --iterations 100
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import psutil

RESULTS = Path(__file__).parent / "results"


def descendants(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def group_of(proc: psutil.Process, by_pid: dict[int, psutil.Process]) -> str | None:
    """A Ray worker by its actor name (pid-qualified for runners), Chromium by the runner that owns it."""
    cmdline = proc.cmdline()
    name = cmdline[0].split(" ")[0] if cmdline and cmdline[0].startswith("ray::") else proc.name()
    if "chrom" in name:
        parent = proc.parent()
        while parent is not None and parent.pid in by_pid and not parent.cmdline()[0].startswith("ray::"):
            parent = parent.parent()
        return f"chromium of runner {parent.pid}" if parent is not None else "chromium"
    if name.startswith("ray::"):
        actor = name.split(".")[0].removeprefix("ray::")
        return f"{actor} {proc.pid}" if actor == "EnvRunner" else actor
    if name in ("raylet", "gcs_server"):
        return name
    if proc.pid == next(iter(by_pid)):
        return "driver"
    return None


def sample(root: psutil.Process) -> dict[str, float]:
    procs = descendants(root)
    by_pid = {p.pid: p for p in procs}
    totals: dict[str, float] = defaultdict(float)
    for proc in procs:
        try:
            group = group_of(proc, by_pid)
            if group is not None:
                totals[group] += proc.memory_full_info().uss / 2**20
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return dict(totals)


def iterations_done(metrics: Path) -> int:
    try:
        return sum(1 for line in metrics.read_text().splitlines() if '"learner/' in line)
    except FileNotFoundError:
        return 0


def summarize(samples: list[dict], iterations: int) -> dict:
    series = defaultdict(list)
    for s in (s for s in samples if s["iteration"] < iterations):  # the last samples see the run shutting down
        for group, mib in s["uss_mib"].items():
            series[group].append((s["iteration"], mib))
    out = {}
    for group, points in sorted(series.items()):
        it, mib = np.array(points).T
        warm = mib[it >= iterations / 10]
        late = it >= iterations / 2
        slope = float(np.polyfit(it[late], mib[late], 1)[0]) if late.sum() >= 3 and np.ptp(it[late]) > 0 else None
        out[group] = {
            "after_first_tenth_mib": float(warm[0]) if len(warm) else None,
            "end_mib": float(mib[-1]),
            "max_mib": float(mib.max()),
            "slope_second_half_mib_per_iteration": slope,
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra overrides")
    p.add_argument("--tag", default="")
    args = p.parse_args()
    run_dir = Path(f"runs/bench-actor-memory{'-' + args.tag if args.tag else ''}")
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [sys.executable, "-m", "rlsys.cli.train", "--config", "configs/quickstart.yaml",
               f"run.output_dir={run_dir}", f"run.iterations={args.iterations}", "run.eval_every=0",
               "run.checkpoint_every=0", "metrics.progress=false", "ray.dashboard=false", *args.set]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    root = psutil.Process(proc.pid)
    samples = []
    while proc.poll() is None:
        time.sleep(args.every)
        done = iterations_done(run_dir / "metrics.jsonl")
        uss = sample(root)
        if uss:
            samples.append({"t_s": time.perf_counter() - started, "iteration": done, "uss_mib": uss})
            print(f"iteration {done:>4}: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(uss.items())), flush=True)
    if proc.returncode:
        raise SystemExit(f"the run failed with exit code {proc.returncode}")
    summary = summarize(samples, args.iterations)
    for group, s in summary.items():
        slope = s["slope_second_half_mib_per_iteration"]
        print(f"{group:>40}: {s['after_first_tenth_mib'] or 0:7.0f} -> {s['end_mib']:7.0f} MiB, "
              f"slope {slope if slope is not None else float('nan'):+.3f} MiB/iteration")  # fmt: skip
    name = f"actor_memory{'-' + args.tag if args.tag else ''}.json"
    (RESULTS / name).write_text(
        json.dumps(
            {
                "command": "python benchmarks/actor_memory.py " + " ".join(sys.argv[1:]),
                "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
                "wall_s": time.perf_counter() - started,
                "summary": summary,
                "samples": samples,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
