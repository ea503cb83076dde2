"""The replay buffer's history at 100k trajectories: memory, and what DigiRL's learner waits for.

The buffer actor is created as the trainer creates it (num_cpus=0, spilling to a run folder), with
`--memory` trajectories held whole in memory; `--stored` trajectories are added (the 3-step web
episodes of benchmarks/replay_buffer.py, ~11.8 KB each by `nbytes()`), so all but `--memory` of them
live in spill shards. Measured at every `--report-every`: the actor's memory (USS and RSS), and the
spill folder's size. At `--stored`:
- `summaries()`: every row of the history, as the instruction critic and the curriculum read it;
- `fetch(k)`: `--fetch` random trajectories read back whole (what the curriculum draws per update),
  mostly from spill shards;
- `sample(128)`: the in-memory sample, as before.

    python benchmarks/replay_history.py --stored 100000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil
import ray

sys.path.insert(0, str(Path(__file__).parent))
from replay_buffer import Maker, percentile  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "replay_history.json"


def timed(call, repeats: int) -> dict:
    call()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return {"median_ms": statistics.median(times) * 1e3, "p95_ms": percentile(times, 0.95) * 1e3, "repeats": repeats}


def main(argv=None) -> int:
    from rlsys.actors.replay import _ActorReplayBuffer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=100_000)
    parser.add_argument("--memory", type=int, default=2_000, help="replay.capacity: trajectories held whole")
    parser.add_argument("--batch", type=int, default=64, help="trajectories per add (one spill shard each)")
    parser.add_argument("--report-every", type=int, default=20_000)
    parser.add_argument("--fetch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)

    class Probe(_ActorReplayBuffer):
        def pid(self) -> int:
            return os.getpid()

    maker = Maker()
    folder = Path(tempfile.mkdtemp(prefix="replay-history-"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        buffer = ray.remote(Probe).options(num_cpus=0).remote(args.memory, 1 << 40, 0, str(folder))
        actor = psutil.Process(ray.get(buffer.pid.remote()))
        growth, added, fill_s, report_at = [], 0, 0.0, args.report_every
        while added < args.stored:
            chunk = maker.batch(min(args.batch, args.stored - added))
            started = time.perf_counter()
            ray.get(buffer.add.remote(chunk))
            fill_s += time.perf_counter() - started
            added += len(chunk)
            if added >= report_at or added == args.stored:
                report_at += args.report_every
                info = actor.memory_full_info()
                disk = sum(p.stat().st_size for p in folder.glob("spill-*.parquet"))
                growth.append({"stored": added, "uss_mib": info.uss / 2**20, "rss_mib": info.rss / 2**20})
                growth[-1]["spill_mib"] = disk / 2**20
                print(f"{added:>7,} stored: actor USS {growth[-1]['uss_mib']:,.0f} MiB, spill {disk / 2**20:,.0f} MiB")
        stats = ray.get(buffer.stats.remote())
        assert stats["history"] == args.stored and stats["size"] == args.memory, stats

        ids = ray.get(buffer.summaries.remote()).ids
        rng = random.Random(0)
        summaries = timed(lambda: ray.get(buffer.summaries.remote()), args.repeats)
        fetch = timed(lambda: ray.get(buffer.fetch.remote(rng.sample(ids, args.fetch))), args.repeats)
        sample = timed(lambda: ray.get(buffer.sample.remote(128, None)), args.repeats)
    finally:
        ray.shutdown()

    per_row = (growth[-1]["uss_mib"] - growth[0]["uss_mib"]) * 2**20 / (growth[-1]["stored"] - growth[0]["stored"])
    result = {
        "command": "python benchmarks/replay_history.py " + " ".join(argv or sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "stored": args.stored,
        "in_memory": args.memory,
        "fill_traj_per_s": args.stored / fill_s,
        "memory": growth,
        "uss_bytes_per_history_row": per_row,
        "summaries": summaries,
        f"fetch_{args.fetch}": fetch,
        "sample_128": sample,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "memory"}, indent=1))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
