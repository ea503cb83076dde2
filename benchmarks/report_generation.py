"""The run report on a large run: generation time and file size at 10,000 trajectories.

A synthetic run folder is written first (outside the clock): `--trajectories` training episodes of
3 steps over `--iterations` iterations (one shard each), 8 tasks, mixed outcomes, 320x240 PNG
screenshots with boxes and text stripes (each distinct), a metrics.jsonl with training and
evaluation records, and one evaluation shard of 40 episodes every 10 iterations. Then timed:
- the first report (every shard indexed, the default selection embedded);
- a rewrite after one more iteration, with the same `RunReport` (as the trainer does after each
  evaluation: shards already indexed are not read again).

    python benchmarks/report_generation.py --trajectories 10000
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import random
import tempfile
import time
from pathlib import Path

from PIL import Image, ImageDraw

from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.data.shards import ShardWriter
from rlsys.report.run_report import RunReport

TASKS = [f"task-{k}" for k in range(8)]
OUTCOMES = ["success", "failure", "timeout"]


def screenshot(rng: random.Random) -> bytes:
    img = Image.new("RGB", (320, 240), (245, 245, 245))
    draw = ImageDraw.Draw(img)
    for _ in range(6):
        x, y = rng.randrange(0, 280), rng.randrange(0, 200)
        colour = tuple(rng.choices(range(256), k=3))
        draw.rectangle([x, y, x + rng.randrange(20, 40), y + rng.randrange(10, 30)], fill=colour)
    for row in range(0, 240, 24):
        draw.text((8, row), f"line {rng.random():.6f}", fill=(20, 20, 20))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def episode(rng: random.Random, index: int, iteration: int, split: str) -> Trajectory:
    name = rng.choice(TASKS)
    task = Task(f"{name}#{index}", f"Do {name}", "miniwob", split, start=name, meta={"seed": index})
    outcome = rng.choice(OUTCOMES)
    steps = []
    for i in range(3):
        obs = Observation(screenshot(rng), f'[0] button "ONE"\n[1] link "{name}"', "file:///x.html", task.instruction)
        done = i == 2
        steps.append(
            Step(obs, f"click [{i % 2}]", {"kind": "click", "element": i % 2}, float(done and outcome == "success"),
                 done, iteration - 1, -0.3 * (i + 1), {"act_s": 0.01}, None, {})
        )  # fmt: skip
    final = Observation(screenshot(rng), "", "file:///done.html", task.instruction)
    return Trajectory(task, steps, outcome, "env-0", "runner-0", final_observation=final, id=f"{split}-{index}")


def write_run(run: Path, trajectories: int, iterations: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    train, evals = ShardWriter(run / "trajectories"), ShardWriter(run / "eval", split="eval")
    per_iteration = trajectories // iterations
    with (run / "metrics.jsonl").open("w") as metrics:
        for it in range(1, iterations + 1):
            batch = [episode(rng, (it - 1) * per_iteration + k, it, "train") for k in range(per_iteration)]
            train.write(batch, iteration=it)
            record = {"iteration": it, "policy_version": it, "trajectories": it * per_iteration,
                      "train/trajectories": per_iteration, "actor/loss": 1.0 / it,
                      "train/success_rate": sum(t.outcome == "success" for t in batch) / per_iteration}  # fmt: skip
            if it % 10 == 0:
                episodes = [episode(rng, 10**6 + it * 100 + k, it, "eval") for k in range(40)]
                evals.write(episodes, iteration=it)
                record["eval/episodes"] = 40
                record["eval/success_rate"] = sum(t.outcome == "success" for t in episodes) / 40
            metrics.write(json.dumps(record) + "\n")
    (run / "config.yaml").write_text("run:\n  name: synthetic\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trajectories", type=int, default=10_000)
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--out", default="benchmarks/results/report_generation.json")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        t0 = time.perf_counter()
        write_run(run, args.trajectories, args.iterations)
        made_s = time.perf_counter() - t0
        report = RunReport(run)
        t0 = time.perf_counter()
        path = report.write()
        first_s = time.perf_counter() - t0
        size = path.stat().st_size
        rng = random.Random(1)
        extra = [episode(rng, 2 * 10**6 + k, args.iterations + 1, "train") for k in range(100)]
        ShardWriter(run / "trajectories").write(extra, iteration=args.iterations + 1)
        t0 = time.perf_counter()
        report.write()
        rewrite_s = time.perf_counter() - t0
        shards_bytes = sum(f.stat().st_size for f in run.rglob("*.parquet"))
    result = {
        "trajectories": args.trajectories,
        "iterations": args.iterations,
        "run_shards_mb": round(shards_bytes / 2**20, 1),
        "synthetic_run_written_s": round(made_s, 1),
        "first_report_s": round(first_s, 2),
        "report_mb": round(size / 2**20, 2),
        "rewrite_after_one_iteration_s": round(rewrite_s, 2),
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
    }
    print(json.dumps(result, indent=1))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
