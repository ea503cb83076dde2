"""The learner's memory and update time with a long history: what one update reads back whole is bounded.

A replay buffer with the DigiRL recipe's `replay.capacity` (200) spills to a folder as the trainer's does;
`--stored` trajectories (the 3-step web episodes of benchmarks/replay_buffer.py, all successes, so the
reward quantile keeps every one) are added `--batch` at a time (the recipe's 16 per iteration: one spill
shard each). Then filtered BC with the reward quantile over the history updates with the learner settings of
`filteredbc_online.yaml`, which are DigiRL's recipe (sample_trajectories, 4 x 32 samples a step, 20 steps,
max_history_fetch), in this process and on the tiny policy (the recipe's AutoUI-Base is not here). It reads
history the way DigiRL's actor does: every summary row, then at most `learner.sample_trajectories` kept
trajectories whole. Reported per update: wall time, the trajectories read back, and the process's peak RSS
(sampled every 5 ms) above what it held before the update. `--unbounded` also runs one update as the recipe
was before the bound (`sample_trajectories` 100000, reading back the whole history).

    python benchmarks/learner_history_memory.py --stored 100000 --unbounded
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).parent))
from replay_buffer import Maker  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "learner_history_memory.json"


class PeakRSS:
    """The process's highest RSS while the block runs, sampled every 5 ms."""

    def __enter__(self):
        self.process = psutil.Process()
        self.before = self.process.memory_info().rss
        self.peak = self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


def timed_update(cfg, buffer, seed: int) -> dict:
    from rlsys.config import PolicyConfig
    from rlsys.learners.filtered_bc import FilteredBC
    from rlsys.policies import build_policy

    fetched = []

    class Counting:
        def summaries(self):
            return buffer.summaries()

        def fetch(self, ids):
            fetched.append(len(ids))
            return buffer.fetch(ids)

    algo = FilteredBC(cfg.learner, build_policy(PolicyConfig(d_model=32, d_ff=64, num_heads=2), seed=seed), seed)
    sample = buffer.sample(cfg.learner.sample_trajectories)
    with PeakRSS() as rss:
        started = time.perf_counter()
        metrics = algo.update(sample, history=Counting())
        seconds = time.perf_counter() - started
    return {
        "update_s": seconds,
        "read_back": sum(fetched),
        "actor_updates": metrics.get("actor/updates", 0),
        "rss_before_mib": rss.before / 2**20,
        "peak_rss_mib": rss.peak / 2**20,
        "peak_above_before_mib": (rss.peak - rss.before) / 2**20,
    }


def main(argv=None) -> int:
    from rlsys.config.loader import load_config
    from rlsys.data.replay import ReplayBuffer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=16, help="trajectories per add (one spill shard each)")
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--unbounded", action="store_true", help="also one update reading back the whole history")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)

    cfg = load_config("filteredbc_online")
    maker = Maker()
    buffer = ReplayBuffer(cfg.replay.capacity, 1 << 40, 0, tempfile.mkdtemp(prefix="learner-history-"))
    started = time.perf_counter()
    while len(buffer.history) < args.stored:
        buffer.add(maker.batch(min(args.batch, args.stored - len(buffer.history))))
    fill_s = time.perf_counter() - started
    print(f"{len(buffer.history):,} trajectories of history in {fill_s:.0f} s", flush=True)

    bounded = []
    for seed in range(args.updates):
        bounded.append(timed_update(cfg, buffer, seed))
        print("bounded:", bounded[-1], flush=True)
    result = {
        "command": "python benchmarks/learner_history_memory.py " + " ".join(argv or sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "history": len(buffer.history),
        "in_memory": len(buffer),
        "spill_shards": len(list(buffer.history.folder.glob("spill-*.parquet"))),
        "learner": {
            "sample_trajectories": cfg.learner.sample_trajectories,
            "max_history_fetch": cfg.learner.max_history_fetch,
            "batch": f"{cfg.learner.batch_size} x {cfg.learner.grad_accumulation}",
            "updates_per_iteration": cfg.learner.updates_per_iteration,
            "policy": "tiny (d_model 32)",
        },
        "bounded": bounded,
    }
    if args.unbounded:
        whole = ["learner.sample_trajectories=100000", "learner.max_history_fetch=100000"]
        result["unbounded"] = timed_update(load_config("filteredbc_online", whole), buffer, 0)
        print("unbounded:", result["unbounded"], flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
