"""Judge throughput under a rate limit: many episodes waiting on one evaluator pool.

A local OpenAI-compatible judge answers every call after `--latency` seconds; the pool may start
`--rate` calls per second (burst 1). `--episodes` threads each play the runner's part over and over:
build a PAE-style query for a new answer (so the cache never helps) and wait for its verdict through
`PoolJudge`, exactly as an `EnvRunner` does. Reports the sustained verdict rate after a warm-up, the
most calls the judge saw start in any one-second window, and how long an episode waited.

    python benchmarks/judge_throughput.py --episodes 32 --rate 5 --latency 1 --seconds 60
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test stubs live in tests/

import ray  # noqa: E402
from PIL import Image  # noqa: E402

from rlsys.config import EvaluatorConfig, EvaluatorPoolConfig, JudgeConfig  # noqa: E402
from rlsys.core.types import Observation, Step, Task, Trajectory  # noqa: E402
from rlsys.envs.evaluators.pool import PoolJudge, start_pool  # noqa: E402
from tests.support.http_stubs import OpenAIStub, Reply  # noqa: E402


def screenshot() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (1024, 768), (240, 240, 240)).save(buf, format="PNG")
    return buf.getvalue()


def episode(png: bytes, answer: str) -> Trajectory:
    task = Task("bench", "Find the price of the cheapest item", "webvoyager")
    step = Step(
        Observation(png, "", "https://shop.example/", task.instruction), "ANSWER; [x]", None, 0.0, True, 0, None
    )
    step.info["answer"] = answer
    return Trajectory(task, [step], "unknown")


def max_in_window(times: list[float], window: float = 1.0) -> int:
    times = sorted(times)
    return max((sum(1 for u in times if t <= u < t + window) for t in times), default=0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=32)
    p.add_argument("--rate", type=float, default=5.0)
    p.add_argument("--latency", type=float, default=1.0)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--out", default="benchmarks/results/judge_throughput.json")
    args = p.parse_args()

    reply = Reply(200, OpenAIStub.completion("The answer is on the page.\nVerdict: SUCCESS"), delay_s=args.latency)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    with OpenAIStub(responder=lambda rec: reply) as stub:
        judge = JudgeConfig(provider="openai", model_id="stub-judge", endpoint_url=stub.endpoint_url, timeout_s=30)
        pool_cfg = EvaluatorPoolConfig(rate_per_s=args.rate, burst=1, max_concurrency=16, deadline_s=300)
        pool = start_pool(EvaluatorConfig(kind="judge", judge=judge, pool=pool_cfg))
        client = PoolJudge(pool, judge, pool_cfg.deadline_s)
        png = screenshot()
        done: list[tuple[float, float, bool | None]] = []  # (finished, waited, success)
        lock = threading.Lock()
        stop = time.monotonic() + args.warmup + args.seconds

        def play(index: int) -> None:
            n = 0
            while time.monotonic() < stop:
                n += 1
                traj = episode(png, f"episode {index} answer {n}")
                t0 = time.monotonic()
                verdict = client.judge(traj.task, traj)
                with lock:
                    done.append((time.monotonic(), time.monotonic() - t0, verdict.success))

        start = time.monotonic()
        threads = [threading.Thread(target=play, args=(i,)) for i in range(args.episodes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = ray.get(pool.stats.remote())
        starts = [r.t_start for r in stub.requests]
    ray.shutdown()

    window_start, window_end = start + args.warmup, start + args.warmup + args.seconds
    in_window = [d for d in done if window_start <= d[0] < window_end]
    result = {
        "episodes": args.episodes,
        "rate_limit_per_s": args.rate,
        "judge_latency_s": args.latency,
        "measured_s": args.seconds,
        "verdicts_per_s": len(in_window) / args.seconds,
        "verdicts": len(done),
        "unknown": sum(d[2] is None for d in done),
        "max_calls_started_in_any_1s": max_in_window(starts),
        "episode_wait_p50_s": float(np.percentile([d[1] for d in in_window], 50)),
        "episode_wait_p90_s": float(np.percentile([d[1] for d in in_window], 90)),
        "pool": stats,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "pool"}, indent=1))


if __name__ == "__main__":
    main()
