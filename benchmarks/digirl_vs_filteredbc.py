"""DigiRL against filtered BC at equal environment steps, over several seeds.

Both start from the same freshly initialised tiny policy (the quick start's byte-level T5) on the
quick start's MiniWoB++ tasks, collect the same number of trajectories per iteration, and are
evaluated greedily on the same held-out task seeds. Filtered BC is DigiRL's baseline (reward
quantile 0.9, i.e. successes here); DigiRL adds the instruction critic, the step critic on
screenshot features, the curriculum and the advantage filter, with tiny critics built from config.

    python benchmarks/digirl_vs_filteredbc.py --seeds 0 1 2 --iterations 8
    python benchmarks/digirl_vs_filteredbc.py --algorithms digirl --set learner.digirl.curriculum_quantile=0.5 \
        --tag curriculum0.5     # a variant: extra overrides for every run, results under their own name
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
from pathlib import Path

import numpy as np

COMMON = [
    "run.eval_every=4",
    "run.eval_episodes=40",
    "run.checkpoint_every=0",
    "metrics.progress=false",
    "learner.lr=2.0e-3",
    "learner.batch_size=16",
]
ALGORITHMS = {
    "filtered_bc": ["learner.algorithm=filtered_bc", "learner.filter=quantile", "learner.updates_per_iteration=24"],
    "digirl": [
        "learner.algorithm=digirl",
        "learner.digirl.actor_steps=24",
        "learner.digirl.instruction_critic_steps=5",
        "learner.digirl.step_critic_steps=10",
        "learner.digirl.critic_lr=1.0e-3",
        "learner.digirl.text_hidden=32",
        "learner.digirl.image_feature_dim=32",
        "learner.digirl.validation_fraction=0.0",
    ],
}


def run(algorithm: str, seed: int, iterations: int, out: Path, extra: list[str]) -> list[dict]:
    run_dir = out / f"{algorithm}-seed{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    args = [
        sys.executable, "-m", "rlsys.train", "--config", "configs/quickstart.yaml",
        f"run.output_dir={run_dir}", f"run.seed={seed}", f"run.iterations={iterations}",
        *COMMON, *ALGORITHMS[algorithm], *extra,
    ]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    print(f"{algorithm} seed {seed}: {time.perf_counter() - started:.0f} s", flush=True)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        {"iteration": r["iteration"], "env_steps": r.get("env_steps", 0), "success": r["eval/success_rate"]}
        for r in records
        if "eval/success_rate" in r
    ]


def summarize(by_seed: dict[int, list[dict]]) -> dict:
    """Per evaluated iteration: mean success over seeds, each seed's, and mean env steps so far."""
    at: dict[int, list[dict]] = {}
    for curve in by_seed.values():
        for point in curve:
            at.setdefault(point["iteration"], []).append(point)
    return {
        i: {
            "success_mean": float(np.mean([p["success"] for p in points])),
            "success_per_seed": [p["success"] for p in points],
            "env_steps_mean": float(np.mean([p["env_steps"] for p in points])),
        }
        for i, points in sorted(at.items())
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--iterations", type=int, default=8)
    p.add_argument("--algorithms", nargs="+", choices=sorted(ALGORITHMS), default=list(ALGORITHMS))
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra config overrides for every run")
    p.add_argument("--tag", default="", help="a name for a variant's results")
    args = p.parse_args()
    suffix = f"-{args.tag}" if args.tag else ""
    out = Path(f"runs/bench-digirl-vs-fbc{suffix}")
    curves = {a: {s: run(a, s, args.iterations, out, args.set) for s in args.seeds} for a in args.algorithms}
    table = {algorithm: summarize(by_seed) for algorithm, by_seed in curves.items()}
    print(f"{'iteration':>9} " + " ".join(f"{a:>28}" for a in table))
    for i in table[args.algorithms[0]]:
        cells = [f"{table[a][i]['success_mean']:.3f} ({table[a][i]['env_steps_mean']:.0f} steps)" for a in table]
        print(f"{i:>9} " + " ".join(f"{c:>28}" for c in cells))
    result = {
        "command": "python benchmarks/digirl_vs_filteredbc.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "seeds": args.seeds,
        "overrides": args.set,
        "curves": curves,
        "table": table,
    }
    (Path(__file__).parent / "results" / f"digirl_vs_filteredbc{suffix}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
