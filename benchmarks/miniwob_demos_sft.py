"""What SFT on the scripted demonstrations (benchmarks/miniwob_demos.py) teaches a policy: the policy of `--config`
(the quick start's `learned_pointer` by default) is trained in this process with `learner.algorithm: sft` on the
shards for `--iterations` iterations of `learner.updates_per_iteration` steps, as a run's offline phase trains it,
then played greedily on `--eval-episodes` evaluation problems of each task (the evaluation seeds, which the
demonstrations never use). The untrained policy is played the same way first, sampling (`--start-episodes` each),
for the chance a run that starts from it has of finding a success.

    python benchmarks/miniwob_demos_sft.py --data data/miniwob-demos --iterations 20 --eval-episodes 10
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from rlsys.config import load_config
from rlsys.data.shards import read_trajectories
from rlsys.envs.tasks import EVAL_SEED_BASE, miniwob_task
from rlsys.envs.web.miniwob import MiniWoBEnv
from rlsys.envs.web.miniwob_demos import MAX_DEMO_STEPS, SUITE
from rlsys.learners.filtered_bc import FilteredBC
from rlsys.policies import build_policy


def success_rate(env: MiniWoBEnv, policy, name: str, episodes: int, greedy: bool, max_steps: int) -> float:
    """The policy's share of solved evaluation problems of `name`, played as the env runner plays them."""
    solved = 0
    for i in range(episodes):
        obs, actions = env.reset(miniwob_task(name, EVAL_SEED_BASE + i, "eval")), []
        for _ in range(max_steps):
            obs.extras["previous_actions"] = list(actions)
            actions.append(policy.act([obs], greedy=greedy)[0].text)
            result = env.step(actions[-1])
            obs = result.observation
            if result.done:
                solved += result.reward > 0
                break
    return solved / max(episodes, 1)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a folder of demonstration shards")
    parser.add_argument("--tasks", nargs="*", default=list(SUITE))
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--start-episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default="quickstart", help="whose policy and learner settings (a name or a path)")
    parser.add_argument("--set", nargs="*", default=[], help="config overrides, KEY=VALUE")
    parser.add_argument("--result", type=Path, help="where to write the result's JSON")
    args = parser.parse_args(argv)
    cfg = load_config(args.config, overrides=["learner.algorithm=sft", f"env.max_steps={MAX_DEMO_STEPS}", *args.set])
    torch.manual_seed(args.seed)
    policy = build_policy(cfg.policy, seed=args.seed)
    demos = [t for t in read_trajectories(args.data) if t.task.start in args.tasks]
    env, result = MiniWoBEnv(cfg.env, "demos-sft"), {"policy": cfg.policy.kind, "demonstrations": len(demos)}
    try:
        result["start_sampled"] = {
            name: success_rate(env, policy, name, args.start_episodes, False, cfg.env.max_steps) for name in args.tasks
        }
        print("untrained, sampled:", json.dumps(result["start_sampled"]), flush=True)
        sft, started, losses = FilteredBC(cfg.learner, policy, seed=args.seed), time.perf_counter(), []
        for _ in range(args.iterations):
            losses.append(round(sft.update(demos)["actor/loss"], 4))
        result |= {"sft_loss": losses, "sft_seconds": round(time.perf_counter() - started, 1)}
        print(f"SFT: loss {losses[0]} -> {losses[-1]} in {result['sft_seconds']} s", flush=True)
        result["after_sft_greedy"] = {
            name: success_rate(env, policy, name, args.eval_episodes, True, cfg.env.max_steps) for name in args.tasks
        }
    finally:
        env.close()
    result |= {"iterations": args.iterations, "updates_per_iteration": cfg.learner.updates_per_iteration,
               "eval_episodes": args.eval_episodes, "start_episodes": args.start_episodes,
               "overrides": args.set}  # fmt: skip
    print("after SFT, greedy:", json.dumps(result["after_sft_greedy"]))
    if args.result:
        args.result.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
