"""Steps per second of the synthetic web suite (env.kind synthweb) on one core, played by the random clicker.

Cold: the first `--seconds` from empty caches, while each page's screenshot is drawn for the first time (about 3
ms a page layout); warm: the next `--seconds`, when most layouts' screenshot, element list and grammar are kept.
Both with set-of-marks screenshots (160x210) and with the default task mix (200 tasks, depth 1-4), with
`env.synthweb.wrong_link` at its default (detour).

python benchmarks/synthweb_speed.py --seconds 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from pathlib import Path

from rlsys.config import load_config
from rlsys.envs import make_env
from rlsys.envs.tasks import TaskSource

RESULTS = Path(__file__).parent / "results" / "synthweb_speed.json"


def play(env, source: TaskSource, rng: random.Random, seconds: float) -> dict:
    steps = episodes = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        obs, done = env.reset(source.next()), False
        episodes += 1
        while not done:
            result = env.step(f"click [{rng.randrange(len(obs.extras['elements']))}]")
            obs, done = result.observation, result.done
            steps += 1
    elapsed = time.perf_counter() - start
    return {"steps": steps, "episodes": episodes, "seconds": round(elapsed, 3), "steps_per_s": round(steps / elapsed)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0, help="for each of the cold and warm measurements")
    p.add_argument("--max-steps", type=int, default=10)
    args = p.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    data = {"env": {"kind": "synthweb", "max_steps": args.max_steps}, "tasks": {"suite": "synthweb"}}
    cfg = load_config(None, data=data)
    env = make_env(cfg.env, "speed")
    source, rng = TaskSource(cfg.tasks, seed=0), random.Random(0)
    cold = play(env, source, rng, args.seconds)
    warm = play(env, source, rng, args.seconds)
    result = {
        "cold": cold,
        "warm": warm,
        "max_steps": args.max_steps,
        "tasks": cfg.tasks.synthweb.num_tasks,
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"cold {cold['steps_per_s']:,} steps/s, warm {warm['steps_per_s']:,} steps/s on one core ({RESULTS.name})")


if __name__ == "__main__":
    main()
