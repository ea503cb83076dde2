"""Lock-step (sync) against asynchronous (async) collection, with the same N simulated runners.

Both modes drive real `EnvRunner` actors through the real `RunnerPool`, with the simulated env
(`env.kind: sim`, envs/sim.py: it only sleeps) and the random policy (no torch), so hundreds of
runners fit on one machine. The learner is a stand-in Ray actor: its update sleeps `--update-s`
seconds of wall time (it stands for a GPU update that would run elsewhere, so it takes no CPU
here), then publishes a small state dict to a real `WeightStore`, so runners see versions advance.

- sync (DigiRL's recipe): submit `rollout_size` (= number of runners) episodes, wait for every one
  of them, then update while every runner idles, publish, repeat.
- async (`rlsys/driver/trainer.py` `Trainer._async_step`): runners never idle; an update starts whenever
  `rollout_size` new trainable trajectories arrived since the last one started and the learner is
  free.

Latencies imitate an Android emulator (DigiRL / AitW), in "phone seconds" multiplied by
`--time-scale` (default 0.1, so a run takes minutes): step median 2 s, lognormal sigma 0.5 (p99 ~6 s);
reset (snapshot load, home screen) median 6 s, sigma 0.5; a step hangs with probability 0.005 (one in
200) and then waits the 30 s step timeout before the env breaks (an `env_error` episode, a new env);
at most 10 steps; success 5% per step (40% of episodes within 10 steps). The update's `--update-s`
is wall time, not scaled: the default 3 s is a 30 s update in phone time.

Measured over `--window-s` of wall time after `--warmup-s`: trajectories per minute (all outcomes,
and trainable ones), the learner's idle fraction, the runners' busy fraction (mean episodes in
flight / runners), env_error count, and the mean policy lag of the trainable trajectories an
update trained on (the version the update started from minus the version that acted).

    python benchmarks/collection_modes.py --runners 64
    python benchmarks/collection_modes.py --runners 64 256

Memory: a sim runner with the random policy never imports torch, ~63 MB of its own (USS) a runner, so
256 runners need ~16 GiB; a runner that loads torch costs about twice that.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from collections import Counter
from pathlib import Path

import numpy as np
import ray

from rlsys.config import load_config
from rlsys.core.types import Task

RESULTS = Path(__file__).parent / "results" / "collection_modes.json"

# Android-like latencies in phone seconds (scaled by --time-scale), see the module docstring
PHONE = {
    "reset_median_s": 6.0,
    "reset_sigma": 0.5,
    "step_median_s": 2.0,
    "step_sigma": 0.5,
    "step_timeout_s": 30.0,
    "episode_timeout_s": 300.0,  # the pool's deadline for a whole episode (never reached with these numbers)
}
HANG_PROB = 0.005
SUCCESS_PROB = 0.05
MAX_STEPS = 10


def make_config(runners: int, args):
    s = args.time_scale
    return load_config(
        None,
        data={
            "run": {"episode_timeout_s": PHONE["episode_timeout_s"] * s, "rollout_size": runners, "seed": args.seed},
            "ray": {"dashboard": False},
            "runners": {"num": runners, "num_cpus": args.runner_cpus, "max_restarts": 1_000_000},
            "env": {
                "kind": "sim",
                "max_steps": MAX_STEPS,
                "step_timeout_s": PHONE["step_timeout_s"] * s,
                "sim": {
                    "reset_median_s": PHONE["reset_median_s"] * s,
                    "reset_sigma": PHONE["reset_sigma"],
                    "step_median_s": PHONE["step_median_s"] * s,
                    "step_sigma": PHONE["step_sigma"],
                    "hang_prob": HANG_PROB,
                    "success_prob": SUCCESS_PROB,
                    "seed": args.seed,
                },
            },
            "policy": {"kind": "random"},
            "metrics": {"progress": False},
        },
    )


@ray.remote(num_cpus=0)
class StandInLearner:
    """Sleeps for an update (a GPU update elsewhere), then publishes a small state dict."""

    def __init__(self, store, update_s: float, state_floats: int = 16_384):
        self.store = store
        self.update_s = update_s
        self.version = 0
        self.state = {"w": np.zeros(state_floats, dtype=np.float32)}  # 64 KB
        ray.get(store.publish.remote(0, self.state))

    def get_version(self) -> int:
        return self.version

    def update(self, trajectories: int) -> dict:
        started = time.time()
        time.sleep(self.update_s)
        self.version += 1
        self.state = {"w": self.state["w"] + 1.0}
        ray.get(self.store.publish.remote(self.version, self.state))
        return {"policy_version": self.version, "started": started, "ended": time.time(), "trajectories": trajectories}


class Busy:
    """Time-weighted mean of a piecewise-constant count (episodes in flight) over a window."""

    def __init__(self, start: float, end: float):
        self.start, self.end = start, end
        self.area = 0.0
        self.t, self.n = None, 0

    def observe(self, t: float, n: int) -> None:
        if self.t is not None:
            lo, hi = max(self.t, self.start), min(t, self.end)
            if hi > lo:
                self.area += self.n * (hi - lo)
        self.t, self.n = t, n

    def mean(self) -> float:
        return self.area / (self.end - self.start)


class Run:
    """One mode's loop state and its measurements inside [start, end]."""

    def __init__(self, pool, learner, runners: int, warmup_s: float, window_s: float):
        self.pool, self.learner, self.runners = pool, learner, runners
        now = time.time()
        self.start, self.end = now + warmup_s, now + warmup_s + window_s
        self.busy = Busy(self.start, self.end)
        self.finished: list[tuple[float, object]] = []
        self.updates: list[dict] = []
        self.version = ray.get(learner.get_version.remote())
        self.pending = None
        self.new_since_update = 0
        self.unconsumed: list[int] = []  # policy versions of trainable trajectories since the last update started
        self.lags: list[int] = []  # (measured updates only)
        self.task_id = 0
        self.restarts_before = pool.restarts

    def over(self) -> bool:
        return time.time() >= self.end

    def submit(self, budget: int | None = None) -> int:
        n = 0
        while self.pool.num_idle and (budget is None or n < budget):
            self.task_id += 1
            self.pool.submit(Task(f"sim-{self.task_id}", f"simulated task {self.task_id}", "sim"), explore=True)
            n += 1
        self.busy.observe(time.time(), self.pool.num_inflight)
        return n

    def collect(self, timeout_s: float) -> None:
        done = self.pool.wait(timeout_s)
        now = time.time()
        self.busy.observe(now, self.pool.num_inflight)
        for traj, _ in done:
            self.finished.append((now, traj))
            if traj.trainable:
                self.new_since_update += 1
                self.unconsumed.append(traj.policy_version)

    def start_update(self):
        self.busy.observe(time.time(), self.pool.num_inflight)
        if time.time() >= self.start:
            self.lags += [self.version - v for v in self.unconsumed]
        self.unconsumed = []
        self.new_since_update = 0
        return self.learner.update.remote(len(self.finished))

    def finish_update(self, metrics: dict) -> None:
        self.updates.append(metrics)
        self.version = metrics["policy_version"]

    def drain(self) -> None:
        """Episodes and the update still running when the window closed finish unmeasured."""
        while self.pool.num_inflight:
            self.pool.wait(1.0)
        if self.pending is not None:
            self.finish_update(ray.get(self.pending))
            self.pending = None

    def summary(self, mode: str) -> dict:
        window = self.end - self.start
        inside = [t for when, t in self.finished if self.start <= when < self.end]
        outcomes = Counter(t.outcome for t in inside)
        busy_s = sum(max(0.0, min(u["ended"], self.end) - max(u["started"], self.start)) for u in self.updates)
        return {
            "mode": mode,
            "runners": self.runners,
            "window_s": round(window, 1),
            "trajectories": len(inside),
            "trajectories_per_min": round(len(inside) / window * 60, 1),
            "trainable_per_min": round(sum(t.trainable for t in inside) / window * 60, 1),
            "outcomes": dict(outcomes),
            "env_errors": outcomes.get("env_error", 0),
            "env_steps": sum(len(t.steps) for t in inside),
            "learner_idle_fraction": round(1 - busy_s / window, 3),
            "runner_busy_fraction": round(self.busy.mean() / self.runners, 3),
            "updates_started_in_window": sum(self.start <= u["started"] < self.end for u in self.updates),
            "mean_policy_lag": round(statistics.mean(self.lags), 2) if self.lags else None,
            "runner_restarts": self.pool.restarts - self.restarts_before,
        }


def run_sync(run: Run, rollout_size: int) -> None:
    """`Collector.collect` (rlsys/driver/collection.py): `rollout_size` episodes, all finished, then the update."""
    while not run.over():
        remaining = rollout_size
        while remaining > 0 or run.pool.num_inflight:  # the round ends with its slowest episode
            if remaining > 0:
                remaining -= run.submit(budget=remaining)
            run.collect(1.0)
        run.finish_update(ray.get(run.start_update()))  # every runner idles meanwhile


def run_async(run: Run, rollout_size: int) -> None:
    while not run.over():
        run.submit()
        run.collect(0.5)
        if run.pending is None and run.new_since_update >= rollout_size:
            run.pending = run.start_update()
        if run.pending is not None and ray.wait([run.pending], timeout=0)[0]:
            run.finish_update(ray.get(run.pending))
            run.pending = None


def wait_ready(pool, runners: int, timeout_s: float) -> float:
    """Every runner started and idle (its process up, the config unpickled); seconds it took."""
    t0 = time.time()
    ray.get([r.status.remote() for r in pool.runners], timeout=timeout_s)
    while pool.num_idle < runners:  # the pool hears of each start in wait()
        if time.time() - t0 > timeout_s:
            raise TimeoutError(f"only {pool.num_idle} of {runners} runners started within {timeout_s:.0f}s")
        pool.wait(1.0)
    return time.time() - t0


def bench(runners: int, args) -> list[dict]:
    from rlsys.actors.pool import RunnerPool
    from rlsys.actors.weight_store import WeightStore

    cfg = make_config(runners, args)
    store = ray.remote(WeightStore).options(num_cpus=0).remote()
    learner = StandInLearner.remote(store, args.update_s)
    pool = RunnerPool(cfg, store, seed=args.seed)
    results = []
    try:
        started_s = wait_ready(pool, runners, timeout_s=60 + 5 * runners)
        print(f"{runners} runners up in {started_s:.0f}s", flush=True)
        for mode in args.modes:
            run = Run(pool, learner, runners, args.warmup_s, args.window_s)
            (run_sync if mode == "sync" else run_async)(run, cfg.run.rollout_size)
            run.drain()
            result = run.summary(mode) | {"runners_start_s": round(started_s, 1)}
            results.append(result)
            print(json.dumps(result), flush=True)
    finally:
        pool.shutdown()
        ray.kill(learner)
        ray.kill(store)
    return results


def table(results: list[dict]) -> str:
    head = (
        "| runners | mode | traj/min | trainable/min | learner idle | runner busy | env_error | policy lag | "
        "async / sync |\n|---|---|---|---|---|---|---|---|---|"
    )
    rows = [head]
    for r in results:
        sync = next((s for s in results if s["runners"] == r["runners"] and s["mode"] == "sync"), None)
        base = sync["trajectories_per_min"] if sync and r["mode"] == "async" else 0
        ratio = r["trajectories_per_min"] / base if base else None
        lag = "-" if r["mean_policy_lag"] is None else f"{r['mean_policy_lag']:.2f}"
        rows.append(
            f"| {r['runners']} | {r['mode']} | {r['trajectories_per_min']:.1f} | {r['trainable_per_min']:.1f} | "
            f"{r['learner_idle_fraction']:.0%} | {r['runner_busy_fraction']:.0%} | {r['env_errors']} | {lag} | "
            f"{'-' if ratio is None else f'{ratio:.2f}x'} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runners", type=int, nargs="+", default=[64])
    parser.add_argument("--modes", nargs="+", choices=["sync", "async"], default=["sync", "async"])
    parser.add_argument("--time-scale", type=float, default=0.1, help="wall seconds per phone second")
    parser.add_argument("--update-s", type=float, default=3.0, help="wall seconds one learner update takes")
    parser.add_argument("--warmup-s", type=float, default=30.0)
    parser.add_argument("--window-s", type=float, default=120.0)
    parser.add_argument("--runner-cpus", type=float, default=0.005, help="Ray CPUs each runner asks for")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    from rlsys.driver.ray_init import SUBREAPER

    os.environ.setdefault(SUBREAPER, "true")
    most = max(args.runners)
    ray.init(
        num_cpus=max(2, math.ceil(most * args.runner_cpus) + 1),
        resources={"sim": most},
        include_dashboard=False,
        log_to_driver=False,
    )
    results = []
    try:
        for n in args.runners:
            results += bench(n, args)
    finally:
        ray.shutdown()
    print()
    print(table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__},
                "parameters": {
                    "time_scale": args.time_scale,
                    "update_s": args.update_s,
                    "warmup_s": args.warmup_s,
                    "window_s": args.window_s,
                    "runner_cpus": args.runner_cpus,
                    "phone_seconds": PHONE,
                    "hang_prob": HANG_PROB,
                    "success_prob": SUCCESS_PROB,
                    "max_steps": MAX_STEPS,
                    "rollout_size": "runners",
                },
                "results": results,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
