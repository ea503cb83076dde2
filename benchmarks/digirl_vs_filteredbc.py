"""DigiRL against filtered BC where step-level credit can matter, at equal environment steps, over seeds.

The suite: multi-step MiniWoB++ tasks with many instructions, played with `env.max_steps` >= 5, where a
wrong action does not end the episode (a checkbox toggled back, another tab opened, a field typed
again), so a policy can waste steps and recover. Every arm starts from the same weak policy: filtered
BC run for `--start-iterations` iterations on the same tasks (seed 1000), whose checkpoint every arm
loads, as DigiRL starts from an SFT policy. Every arm then trains for the same `--env-steps` training
env steps (`run.max_env_steps`) with the published optimiser settings (Adam, lr 1e-4, gradient clip
0.01, 128 samples per step as 4 x 32, 20 actor steps per iteration) and is evaluated greedily on the
same `--eval-episodes` held-out problems every `--eval-every` iterations and at the end.

Arms:
- `filtered_bc`: DigiRL's baseline (reward quantile 0.9 over the run's history);
- `digirl`: the paper's settings (curriculum quantile 0.9, lambda 0.5, advantage threshold 0.05);
- `digirl_no_curriculum`: every trajectory passes the curriculum (quantile 0);
- `sanity_fbc_equivalent`: no curriculum, lambda 1 (A_t = r_H) and filtered BC's token-mean loss: its actor
  update is filtered BC's on the same data (docs/algorithms/digirl.md, "Sanity arm"), so only the runs' own
  randomness (which trajectories were collected) separates it from filtered BC.

Per arm and evaluation point: the mean over seeds with a 95% confidence interval (t distribution), and
each seed's value. What the curriculum keeps per task and the instruction critic's p_instr per task
are read from each run's metrics.jsonl and kept per iteration.

    python benchmarks/digirl_vs_filteredbc.py --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

TASKS = ["click-checkboxes", "click-option", "click-tab-2", "login-user"]
PUBLISHED = [
    "learner.lr=1.0e-4",
    "learner.grad_clip=0.01",
    "learner.batch_size=32",
    "learner.grad_accumulation=4",
]
ALGORITHMS = {
    "filtered_bc": ["learner.algorithm=filtered_bc", "learner.filter=quantile", "learner.updates_per_iteration=20"],
    "digirl": ["learner.algorithm=digirl"],
    "digirl_no_curriculum": ["learner.algorithm=digirl", "learner.digirl.curriculum_quantile=0.0"],
    "sanity_fbc_equivalent": [
        "learner.algorithm=digirl",
        "learner.digirl.curriculum_quantile=0.0",
        "learner.digirl.lam=1.0",
        "learner.digirl.actor_reduction=token_mean",
    ],
}
DIGIRL_SIZES = [  # critics small enough for 2 CPU cores; the published step counts
    "learner.digirl.instruction_critic_steps=5",
    "learner.digirl.step_critic_steps=5",
    "learner.digirl.actor_steps=20",
    "learner.digirl.text_hidden=32",
    "learner.digirl.image_feature_dim=32",
]
RESULTS = Path(__file__).parent / "results"


@contextlib.contextmanager
def results_lock(folder: Path = RESULTS):
    """Held from reading a results file that runs are added to until it is written back: two benchmarks adding to
    one file at once would otherwise keep only the additions of the one that wrote last."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # and with it the lock


def finished(run_dir: Path, overrides: list[str]) -> bool:
    """Whether the run in `run_dir` finished under these overrides."""
    done = run_dir / "benchmark-overrides.json"
    return done.exists() and json.loads(done.read_text()) == overrides


def train(run_dir: Path, overrides: list[str], config: str = "configs/quickstart.yaml") -> list[dict]:
    """One run from `config`; a run that finished under the same overrides is read back instead of repeated."""
    done = run_dir / "benchmark-overrides.json"
    if finished(run_dir, overrides):
        return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    shutil.rmtree(run_dir, ignore_errors=True)
    args = [sys.executable, "-m", "rlsys.cli.train", "--config", config, f"run.output_dir={run_dir}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    started = time.perf_counter()
    subprocess.run(args + overrides, check=True, stdout=subprocess.DEVNULL, env=env)
    print(f"{run_dir.name}: {time.perf_counter() - started:.0f} s", flush=True)
    done.write_text(json.dumps(overrides))
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def common(args) -> list[str]:
    return [
        f"tasks.train=[{','.join(args.tasks)}]",
        f"env.max_steps={args.max_steps}",
        f"policy.kind={args.policy}",
        f"run.rollout_size={args.rollout_size}",
        f"run.eval_episodes={args.eval_episodes}",
        "run.checkpoint_every=0",
        "metrics.progress=false",
        "metrics.report=true",
        "ray.dashboard=false",  # several runs may share the machine
        *PUBLISHED,
        *args.set,
    ]


def warm_start(args, out: Path) -> tuple[str, list[dict]]:
    """The shared start: filtered BC for a few iterations; its last checkpoint's policy."""
    run_dir = out / "start"
    records = train(
        run_dir,
        common(args)
        + [
            "run.seed=1000",
            f"run.iterations={args.start_iterations}",
            f"run.eval_every={args.start_iterations}",
            f"run.checkpoint_every={args.start_iterations}",
            "learner.algorithm=filtered_bc",
            f"learner.lr={args.start_lr}",
            "learner.grad_clip=1.0",
            "learner.updates_per_iteration=24",
        ],
    )
    last = sorted((run_dir / "checkpoints").iterdir())[-1]
    return str(last / "policy"), records


def arm(args, out: Path, algorithm: str, seed: int, start: str) -> dict:
    records = train(
        out / f"{algorithm}-seed{seed}",
        common(args)
        + [
            f"policy.path={start}",
            f"run.seed={seed}",
            "run.iterations=1000",
            f"run.max_env_steps={args.env_steps}",
            f"run.eval_every={args.eval_every}",
            "run.eval_at_start=false",  # the start policy's evaluation is the start run's, shared by every arm
            *ALGORITHMS[algorithm],
            *(DIGIRL_SIZES if algorithm != "filtered_bc" else []),
        ],
    )
    curve = [
        {"iteration": r["iteration"], "env_steps": r.get("env_steps", 0), "success": r["eval/success_rate"]}
        | {k.removeprefix("eval/success_rate/"): v for k, v in r.items() if k.startswith("eval/success_rate/")}
        for r in records
        if "eval/success_rate" in r
    ]
    curriculum = [
        {"iteration": r["iteration"]}
        | {k: v for k, v in r.items() if k.startswith(("digirl/curriculum_kept/", "digirl/p_instr/"))}
        | {k: r.get(k) for k in ("digirl/curriculum_trajectories", "digirl/actor_transitions", "train/success_rate")}
        for r in records
        if "learner/sampled_trajectories" in r
    ]
    return {"curve": curve, "curriculum": curriculum}


# two-sided 95% quantiles of Student's t for 1..30 degrees of freedom; past 30 the 30's (wide by at most 0.06)
# up to 100, then the normal's 1.96
# fmt: off
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
# fmt: on


def t975(df: float) -> float:
    """The quantile for `df` degrees of freedom, interpolated between whole ones (Welch's df is not whole)."""
    if df < 1:
        return T975[0]
    if df >= len(T975):
        return 1.96 if df > 100 else T975[-1]
    whole = int(df)
    return T975[whole - 1] + (T975[whole] - T975[whole - 1]) * (df - whole)


def interval(values: list[float]) -> dict:
    """Mean and 95% confidence interval over seeds (t distribution)."""
    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    half = float(t975(len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")
    return {"mean": mean, "ci95": [mean - half, mean + half], "per_seed": x.tolist()}


def difference(a: list[float], b: list[float]) -> dict:
    """Mean of `a` minus mean of `b` over seeds, with Welch's 95% interval (unequal variances)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    mean = float(a.mean() - b.mean())
    if min(len(a), len(b)) < 2:  # one seed has no spread to estimate: no interval, as interval() gives none
        return {"mean": mean, "ci95": [float("nan"), float("nan")]}
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    if va + vb == 0:  # the same value in every seed of both arms: Welch's df is 0/0, the difference exact
        return {"mean": mean, "ci95": [mean, mean]}
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(t975(df) * np.sqrt(va + vb))
    return {"mean": mean, "ci95": [mean - half, mean + half]}


def summarize(runs: dict[int, dict]) -> list[dict]:
    """Per evaluation point (by index: the same iterations and nearly the same env steps in every seed), the last
    being each run's end: a run whose end came just before an evaluation point has one point fewer."""
    points = min(len(r["curve"]) for r in runs.values())
    out = []
    for i in range(points):
        at = [r["curve"][i if i < points - 1 else -1] for r in runs.values()]
        out.append(
            {"iteration": at[0]["iteration"], "env_steps_mean": float(np.mean([p["env_steps"] for p in at]))}
            | interval([p["success"] for p in at])
        )
    return out


def plot(table: dict[str, list[dict]], path: Path) -> None:
    width, height, pad = 900, 520, 60
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    top = max(p["env_steps_mean"] for rows in table.values() for p in rows) or 1
    colours = [
        (31, 119, 180),
        (214, 39, 40),
        (44, 160, 44),
        (148, 103, 189),
        (255, 127, 14),
        (140, 86, 75),
        (227, 119, 194),
        (23, 190, 207),
        (127, 127, 127),
    ]  # one an arm up to 9 (the synthweb bench has 9)

    def xy(steps, rate):
        return pad + (width - 2 * pad) * steps / top, height - pad - (height - 2 * pad) * rate

    draw.line([xy(0, 0), xy(top, 0)], fill="black")
    draw.line([xy(0, 0), xy(0, 1)], fill="black")
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x, y = xy(0, tick)
        draw.text((x - 40, y - 6), f"{tick:.2f}", fill="black")
        draw.line([xy(0, tick), xy(top, tick)], fill=(230, 230, 230))
    for k in range(5):
        x, y = xy(top * k / 4, 0)
        draw.text((x - 10, y + 6), f"{top * k / 4:.0f}", fill="black")
    draw.text((width / 2 - 80, height - pad + 24), "training env steps", fill="black")
    draw.text((pad, 20), "greedy success rate on held-out problems (mean, 95% CI over seeds)", fill="black")
    for k, (name, rows) in enumerate(table.items()):
        colour = colours[k % len(colours)]
        line = [xy(p["env_steps_mean"], p["mean"]) for p in rows]
        draw.line(line, fill=colour, width=3)
        for p in rows:
            low, high = (min(max(v, 0.0), 1.0) for v in p["ci95"])
            draw.line([xy(p["env_steps_mean"], low), xy(p["env_steps_mean"], high)], fill=colour, width=1)
        draw.text((width - pad - 200, pad + 18 * k), name, fill=colour)
    image.save(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--algorithms", nargs="+", choices=sorted(ALGORITHMS), default=list(ALGORITHMS))
    p.add_argument("--tasks", nargs="+", default=TASKS)
    p.add_argument("--policy", default="element_pointer")
    p.add_argument("--max-steps", type=int, default=6)
    p.add_argument("--rollout-size", type=int, default=32)
    p.add_argument("--env-steps", type=int, default=800, help="training env steps per run (every arm the same)")
    p.add_argument("--eval-every", type=int, default=8)
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--start-iterations", type=int, default=1)
    p.add_argument("--start-lr", type=float, default=1e-3)
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra overrides for every run")
    p.add_argument("--tag", default="")
    args = p.parse_args()
    suffix = f"-{args.tag}" if args.tag else ""
    out = Path(f"runs/bench-digirl-vs-fbc{suffix}")
    start, start_records = warm_start(args, out)
    start_eval = [r for r in start_records if "eval/success_rate" in r]
    print(f"start policy: {start_eval[-1]['eval/success_rate']:.3f} greedy success", flush=True)
    runs = {a: {s: arm(args, out, a, s, start) for s in args.seeds} for a in args.algorithms}
    start_point = {"iteration": 0, "env_steps_mean": 0.0} | interval([start_eval[-1]["eval/success_rate"]])
    table = {a: [start_point, *summarize(by_seed)] for a, by_seed in runs.items()}
    final = {a: interval([r["curve"][-1]["success"] for r in by_seed.values()]) for a, by_seed in runs.items()}
    for a, f in final.items():
        f["env_steps_per_seed"] = [r["curve"][-1]["env_steps"] for r in runs[a].values()]
        print(f"{a:>24} at the budget: {f['mean']:.3f} [{f['ci95'][0]:.3f}, {f['ci95'][1]:.3f}]")
    for a, rows in table.items():
        cells = [f"{r['mean']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] @{r['env_steps_mean']:.0f}" for r in rows]
        print(f"{a:>24}: " + "  ".join(cells))
    name = f"digirl_vs_filteredbc{suffix}"
    plot(table, RESULTS / f"{name}.png")
    result = {
        "command": "python benchmarks/digirl_vs_filteredbc.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "settings": vars(args),
        "start": {"success": start_eval[-1]["eval/success_rate"], "records": start_eval},
        "at_budget": final,
        "table": table,
        "runs": {a: {str(s): r for s, r in by_seed.items()} for a, by_seed in runs.items()},
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
