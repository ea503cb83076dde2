"""Scripted demonstrations of the multi-step MiniWoB++ suite (rlsys/envs/web/miniwob_demos.py), played in headless
Chromium through MiniWoBEnv and written as trajectory shards that `offline.data` reads, for SFT before RL.

    python benchmarks/miniwob_demos.py --out data/miniwob-demos --episodes 400

Episodes are played on the suite's tasks in turn (`--tasks` for fewer), each problem with a fresh seed drawn from
`--seed` as the task source draws training seeds (below the evaluation seeds, so no demonstration is an evaluation
problem). Each step holds its observation (with the previous actions, as the env runner shows them to a policy),
the action's text, its reward and the episode's outcome; the behaviour log-prob is None, as in imported data, since
no policy sampled the actions. Only solved episodes are written unless `--keep all` (`learner.algorithm: sft`
imitates every trajectory it is given, failed ones too). Each task's demonstration success rate is printed and
written beside the shards (`dataset.json`).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

from rlsys.config import load_config
from rlsys.core.env import EnvBrokenError
from rlsys.core.types import Trajectory
from rlsys.data.shards import ShardWriter
from rlsys.envs.tasks import EVAL_SEED_BASE, miniwob_task
from rlsys.envs.web.miniwob import MiniWoBEnv
from rlsys.envs.web.miniwob_demos import MAX_DEMO_STEPS, SUITE, play

SHARD_EPISODES = 200


def generate(env_cfg, tasks: list[str], episodes: int, seed: int, writer: ShardWriter, keep: str) -> dict:
    """Play `episodes` demonstrations over `tasks` in turn; write the kept ones; what happened per task."""
    rng, env, batch = random.Random(seed), MiniWoBEnv(env_cfg, env_id="demos"), []
    per_task = {name: Counter() for name in tasks}
    errors: dict[str, list[str]] = {name: [] for name in tasks}
    started = time.perf_counter()
    try:
        for i in range(episodes):
            name = tasks[i % len(tasks)]
            task = miniwob_task(name, rng.randrange(EVAL_SEED_BASE), "train")
            try:
                trajectory = play(env, task, env_cfg.max_steps)
            except EnvBrokenError as e:  # a fresh browser for the next episode, as the runner does
                env.close()
                env = MiniWoBEnv(env_cfg, env_id="demos")
                trajectory = Trajectory(task, [], "env_error", "demos", error=str(e))
            counts = per_task[name]
            counts["episodes"] += 1
            counts[trajectory.outcome] += 1
            counts["steps"] += len(trajectory.steps)
            if trajectory.outcome != "success":
                errors[name].append(f"seed {task.meta['seed']}: {trajectory.outcome} {trajectory.error or ''}".strip())
            if keep == "all" or trajectory.outcome == "success":
                batch.append(trajectory)
            if len(batch) == SHARD_EPISODES:
                writer.write(batch)
                batch = []
        writer.write(batch)
    finally:
        env.close()
    seconds = time.perf_counter() - started
    report = {}
    for name, c in per_task.items():
        report[name] = {
            "episodes": c["episodes"],
            "success_rate": c["success"] / max(c["episodes"], 1),
            "outcomes": {k: v for k, v in c.items() if k not in ("episodes", "steps")},
            "mean_steps": c["steps"] / max(c["episodes"], 1),
            "not_solved": errors[name][:20],
        }
    return {"tasks": report, "seconds": round(seconds, 1)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="a new folder for the shards")
    parser.add_argument("--episodes", type=int, default=400, help="in all, over the tasks in turn")
    parser.add_argument("--tasks", nargs="*", default=list(SUITE), help=f"of the suite: {' '.join(SUITE)}")
    parser.add_argument("--seed", type=int, default=0, help="draws the problems' seeds")
    parser.add_argument("--keep", choices=("success", "all"), default="success", help="which episodes to write")
    parser.add_argument("--config", help="a config whose env settings to use (the defaults' otherwise)")
    parser.add_argument("--set", nargs="*", default=[], help="config overrides, KEY=VALUE")
    args = parser.parse_args(argv)
    if unknown := [t for t in args.tasks if t not in SUITE]:
        sys.exit(f"no demonstrator for {unknown}; the suite is {' '.join(SUITE)}")
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"{args.out} is not empty: the dataset goes in a new folder")
    base = ["env.kind=miniwob", "tasks.suite=miniwob", f"env.max_steps={MAX_DEMO_STEPS}"]
    cfg = load_config(args.config, overrides=[*base, *args.set])
    writer = ShardWriter(args.out)
    played = generate(cfg.env, args.tasks, args.episodes, args.seed, writer, args.keep)
    episodes = sum(t["episodes"] for t in played["tasks"].values())
    solved = sum(t["outcomes"].get("success", 0) for t in played["tasks"].values())
    summary = {
        "episodes": episodes,
        "success_rate": solved / max(episodes, 1),
        "tasks": played["tasks"],
        "written_steps": writer.steps_written,
        "keep": args.keep,
        "seed": args.seed,
        "env_max_steps": cfg.env.max_steps,
        "overrides": args.set,
        "seconds": played["seconds"],
    }
    (args.out / "dataset.json").write_text(json.dumps(summary, indent=2) + "\n")
    for name, t in played["tasks"].items():
        solved_here = t["outcomes"].get("success", 0)
        print(f"{name:24s} {solved_here:4d} / {t['episodes']:4d} solved  ({t['mean_steps']:.2f} steps)")
    print(json.dumps({k: v for k, v in summary.items() if k != "tasks"}))
    return summary


if __name__ == "__main__":
    main()
