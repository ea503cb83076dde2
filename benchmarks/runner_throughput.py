"""Env-runner throughput: rlsys runners on Ray against a plain Selenium loop.

Both play the same MiniWoB++ episodes (same tasks, same seeds) with the same policy weights,
greedily, so they take the same actions; the ratio of their env steps per second is the
framework's overhead (or its gain, with more than one runner).

    python benchmarks/runner_throughput.py --episodes 60 --runners 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from rlsys.config import load_config
from rlsys.envs.tasks import eval_tasks
from rlsys.policies import build_policy

TASKS = ["click-test-2", "click-tab", "focus-text-2", "click-button-sequence"]


def config(runners: int):
    return load_config(
        None,
        data={
            "runners": {"num": runners},
            "ray": {"dashboard": False},
            "env": {"max_steps": 3},
            "tasks": {"train": TASKS},
        },
    )


def plain_loop(episodes: int) -> dict:
    """What a hand-written script does: one browser, one policy, one episode after another."""
    import torch

    from rlsys.envs.web.miniwob import MiniWoBEnv

    torch.set_num_threads(1)  # as in a runner: a fair measure of the framework's own overhead
    cfg = config(1)
    policy = build_policy(cfg.policy, seed=0)
    env = MiniWoBEnv(cfg.env)
    steps = 0
    try:
        env.reset(eval_tasks(TASKS, 1)[0])  # warm up the browser and page, as the runners are
        start = time.perf_counter()
        for task in eval_tasks(TASKS, episodes):
            obs = env.reset(task)
            for _ in range(cfg.env.max_steps):
                action = policy.act([obs], greedy=True)[0].text
                result = env.step(action)
                steps += 1
                obs = result.observation
                if result.done:
                    break
        elapsed = time.perf_counter() - start
    finally:
        env.close()
    return {
        "episodes": episodes,
        "steps": steps,
        "seconds": elapsed,
        "steps_per_s": steps / elapsed,
        "episodes_per_s": episodes / elapsed,
    }


def rlsys_runners(episodes: int, runners: int) -> dict:
    import ray

    from rlsys.actors.pool import RunnerPool
    from rlsys.actors.replay import ReplayBufferActor
    from rlsys.actors.weight_store import WeightStore
    from rlsys.driver.ray_init import init_ray

    cfg = config(runners)
    init_ray(cfg)
    store = ray.remote(WeightStore).remote()
    ray.get(store.publish.remote(0, build_policy(cfg.policy, seed=0).state_dict()))
    buffer = ReplayBufferActor.remote(10_000, 1 << 30)
    pool = RunnerPool(cfg, store)
    try:
        pool.play(eval_tasks(TASKS, runners))  # every runner starts its browser before the clock starts
        queue = eval_tasks(TASKS, episodes)
        done, steps = 0, 0
        start = time.perf_counter()
        while done < episodes:
            while pool.num_idle and queue:
                pool.submit(queue.pop(0), explore=False)
            finished = [t for t, _ in pool.wait(1.0)]
            buffer.add.remote(finished)
            done += len(finished)
            steps += sum(len(t.steps) for t in finished)
        ray.get(buffer.stats.remote())  # everything has reached the buffer
        elapsed = time.perf_counter() - start
    finally:
        pool.shutdown()
        ray.shutdown()
    return {
        "episodes": episodes,
        "runners": runners,
        "steps": steps,
        "seconds": elapsed,
        "steps_per_s": steps / elapsed,
        "episodes_per_s": episodes / elapsed,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=60)
    p.add_argument("--runners", type=int, nargs="+", default=[1, 2])
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "runner_throughput.json"))
    args = p.parse_args()
    plain = plain_loop(args.episodes)
    print(f"plain Selenium loop: {plain['steps_per_s']:.2f} steps/s ({plain['steps']} steps)")
    results = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "plain": plain, "rlsys": []}
    for n in args.runners:
        r = rlsys_runners(args.episodes, n)
        r["ratio_vs_plain"] = r["steps_per_s"] / plain["steps_per_s"]
        results["rlsys"].append(r)
        print(
            f"rlsys, {n} runner(s): {r['steps_per_s']:.2f} steps/s ({r['steps']} steps), "
            f"{r['ratio_vs_plain']:.2f}x the plain loop"
        )
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
