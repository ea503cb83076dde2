"""Does a config learn on every seed? Runs `rlsys.cli.train` once per seed and reports evaluation success at the
start and at the end, per seed and per task, with the mean gain, its spread and a 95% confidence interval.

    python benchmarks/quickstart_seeds.py --seeds 0 1 2 3 4
    python benchmarks/quickstart_seeds.py --seeds 0 1 2 --tag heldout \
        --set "tasks.train=[click-link,click-dialog-2,click-option,enter-text]"

Results go to benchmarks/results/quickstart_seeds[-TAG].json, runs to runs/bench-quickstart-seeds[-TAG]/seedN.
A task "left at its starting rate" ends no higher than it started.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from digirl_vs_filteredbc import t975


def summary(values: list[float]) -> dict:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"mean": mean, "sd": None, "ci95": None, "n": len(values)}
    sd = statistics.stdev(values)
    half = t975(len(values) - 1) * sd / len(values) ** 0.5
    return {"mean": mean, "sd": sd, "ci95": [mean - half, mean + half], "n": len(values)}


def evals(run_dir: Path) -> list[dict]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in records if "eval/success_rate" in r]


def per_task(record: dict) -> dict[str, float]:
    prefix = "eval/success_rate/"
    return {k[len(prefix) :]: v for k, v in record.items() if k.startswith(prefix)}


def run_seed(config: str, seed: int, run_dir: Path, overrides: list[str]) -> dict:
    shutil.rmtree(run_dir, ignore_errors=True)
    args = [
        sys.executable, "-m", "rlsys.cli.train", "--config", config,
        f"run.output_dir={run_dir}", f"run.seed={seed}", "metrics.progress=false", *overrides,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    started = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, env=env)
    seconds = time.perf_counter() - started
    points = evals(run_dir)
    first, last = points[0], points[-1]
    start_tasks, end_tasks = per_task(first), per_task(last)
    result = {
        "seed": seed,
        "wall_s": round(seconds, 1),
        "start": first["eval/success_rate"],
        "end": last["eval/success_rate"],
        "gain_points": round(100 * (last["eval/success_rate"] - first["eval/success_rate"]), 1),
        "eval_episodes": last.get("eval/episodes"),
        "tasks": {t: {"start": start_tasks.get(t), "end": end_tasks[t]} for t in sorted(end_tasks)},
        "tasks_not_improved": sorted(t for t in end_tasks if end_tasks[t] <= start_tasks.get(t, 0.0)),
        "curve": [{"iteration": p["iteration"], "success": p["eval/success_rate"]} for p in points],
    }
    tasks = ", ".join(f"{t} {v['start'] or 0:.0%}->{v['end']:.0%}" for t, v in result["tasks"].items())
    print(
        f"seed {seed}: {100 * result['start']:.1f}% -> {100 * result['end']:.1f}% "
        f"({result['gain_points']:+.1f} points), {seconds:.0f} s, per task {tasks}",
        flush=True,
    )
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/quickstart.yaml")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides for every run")
    p.add_argument("--tag", default="", help="a name for a variant's results")
    args = p.parse_args()
    suffix = f"-{args.tag}" if args.tag else ""
    out = Path(f"runs/bench-quickstart-seeds{suffix}")
    runs = [run_seed(args.config, s, out / f"seed{s}", args.set) for s in args.seeds]
    gains = [r["gain_points"] for r in runs]
    result = {
        "command": "python benchmarks/quickstart_seeds.py " + " ".join(sys.argv[1:]),
        "config": args.config,
        "overrides": args.set,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        or None,
        "seeds": runs,
        "gain_points": summary(gains),
        "start": summary([r["start"] for r in runs]),
        "end": summary([r["end"] for r in runs]),
        "wall_s": summary([r["wall_s"] for r in runs]),
        "min_gain_points": min(gains),
        "seeds_with_a_task_not_improved": [r["seed"] for r in runs if r["tasks_not_improved"]],
    }
    g = result["gain_points"]
    ci = f", 95% CI [{g['ci95'][0]:.1f}, {g['ci95'][1]:.1f}]" if g["ci95"] else ""
    sd = f" ± {g['sd']:.1f}" if g["sd"] is not None else ""
    print(f"gain {g['mean']:.1f}{sd} points{ci}; min {min(gains):+.1f}; {result['wall_s']['mean']:.0f} s per run")
    path = Path(__file__).parent / "results" / f"quickstart_seeds{suffix}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
