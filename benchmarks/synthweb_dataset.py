"""A fixed offline dataset for the synthweb bench (docs/algorithms/predictions.md, setting S4): episodes of a weak
scripted policy on the suite's tasks, written as trajectory shards that `offline.data` reads.

    python benchmarks/synthweb_dataset.py --out runs/synthweb-s4-data --episodes 2000 \\
        --set tasks.synthweb.min_depth=8 tasks.synthweb.max_depth=15 tasks.synthweb.min_distractors=1 \\
              tasks.synthweb.max_distractors=4 tasks.synthweb.impossible=0.1 env.max_steps=30

The policy clicks the link the instruction names with probability `--p-right` (0.7) and another element of the
page otherwise; on a "Not here" page it clicks Back with probability `--p-back` (0.7). It reads which link is
right from the env (it is a script, not an agent), and records the exact probability of each action it took as
the behaviour log-prob. Episodes are played on the training tasks in turn; the success rate is printed and written
beside the shards (`dataset.json`), with the share of successes that hold a wrong click.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

from rlsys.config import load_config
from rlsys.core.types import Step, Trajectory
from rlsys.data.shards import ShardWriter
from rlsys.envs.synthweb import FORWARD, GO_BACK, SynthWebEnv, suite_tasks

SHARD_EPISODES = 500


def scripted_action(env: SynthWebEnv, rng: random.Random, p_right: float, p_back: float) -> tuple[str, float]:
    """(the action's text, its probability under this policy, as a log)."""
    page = env._page
    wanted = GO_BACK if env.trail else FORWARD
    good = [k for k, kind in enumerate(page.kinds) if kind == wanted]
    n = len(page.texts)
    if not good:  # the impossible task's last page: nothing leads on
        return f"click [{rng.randrange(n)}]", -math.log(n)
    p = p_back if env.trail else p_right
    if n == 1 or rng.random() < p:
        return f"click [{good[0]}]", math.log(p if n > 1 else 1.0)
    other = rng.choice([k for k in range(n) if k != good[0]])
    return f"click [{other}]", math.log((1 - p) / (n - 1))


def episode(env: SynthWebEnv, task, rng: random.Random, p_right: float, p_back: float) -> tuple[Trajectory, int]:
    """One episode and how many of its steps were not the scripted policy's good choice."""
    obs, steps, wrong = env.reset(task), [], 0
    while True:
        text, logprob = scripted_action(env, rng, p_right, p_back)
        good = env._page.kinds[int(text.split("[")[1].rstrip("]"))] == (GO_BACK if env.trail else FORWARD)
        wrong += not good
        result = env.step(text)
        info = {k: v for k, v in result.info.items() if k in ("outcome", "clean_reward", "synthweb", "slipped")}
        steps.append(Step(obs, text, result.info.get("action"), result.reward, result.done, -1, logprob, info=info))
        obs = result.observation
        if result.done:
            outcome = result.info.get("outcome", "failure")
            return Trajectory(task, steps, outcome, env_id=env.env_id, final_observation=obs), wrong


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="a new folder for the shards")
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--p-right", type=float, default=0.7)
    parser.add_argument("--p-back", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", help="a config whose tasks and env to use (the defaults' otherwise)")
    parser.add_argument("--set", nargs="*", default=[], help="config overrides, KEY=VALUE")
    args = parser.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"{args.out} is not empty: the dataset goes in a new folder")
    cfg = load_config(args.config, overrides=["env.kind=synthweb", "tasks.suite=synthweb", *args.set])
    env, rng = SynthWebEnv(cfg.env, env_id="dataset"), random.Random(args.seed)
    tasks = suite_tasks(cfg.tasks.synthweb, "train")
    writer, batch = ShardWriter(args.out), []
    successes = with_wrong = 0
    for i in range(args.episodes):
        trajectory, wrong = episode(env, tasks[i % len(tasks)], rng, args.p_right, args.p_back)
        successes += trajectory.outcome == "success"
        with_wrong += trajectory.outcome == "success" and wrong > 0
        batch.append(trajectory)
        if len(batch) == SHARD_EPISODES:
            writer.write(batch)
            batch = []
    writer.write(batch)
    summary = {"episodes": args.episodes, "success_rate": successes / max(args.episodes, 1),
               "successes_with_a_wrong_click": with_wrong / max(successes, 1), "steps": writer.steps_written,
               "p_right": args.p_right, "p_back": args.p_back, "seed": args.seed, "overrides": args.set}  # fmt: skip
    (args.out / "dataset.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
