"""The replay buffer actor at 100k stored trajectories: ingest rate and sample latency.

The buffer is `rlsys.actors.replay.ReplayBufferActor`, created as the trainer creates it (num_cpus=0),
with capacity `--stored` and a byte bound it never reaches. Trajectories are 3-step web episodes
(plus the final observation) as runners send them: element list, grammar extras, timings, and
small distinct PNG screenshots (96x96: boxes, text stripes and a photo-like patch, ~2.4 KB
each; ~11.8 KB per trajectory by `nbytes()`, so 100k take ~1.2 GB). Every screenshot is its own
bytes object, so nothing is shared between trajectories in memory or on the wire.

Timed:
- fill: 0 -> `--stored` trajectories, added `--fill-batch` at a time.
- ingest at `--stored` (the buffer full, so every add evicts): `--ingest` trajectories added with
  one `buffer.add.remote(list)` per batch of `--batch-sizes` (the trainer sends one list per
  finished batch, fire and forget); the clock stops when the actor has stored the last one.
  Trajectory construction is outside the clock.
- sample: `ray.get(buffer.sample.remote(128, min_version))` from the driver, `--samples` times,
  including the transfer back; with min_version None and with a min_version every stored
  trajectory meets (what the trainer passes when `run.max_policy_lag` is set).

Targets: ingest >= 1,000 trajectories/s; sample(128) <= 20 ms at 100k.

    python benchmarks/replay_buffer.py --stored 100000
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import pickle
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import ray
from PIL import Image, ImageDraw

from rlsys.core.types import Observation, Step, Task, Trajectory

RESULTS = Path(__file__).parent / "results" / "replay_buffer.json"
UI_TEXT = "\n".join(f'[{i}] button "Option {i}"' for i in range(8))
GRAMMAR = {"grammar": {"choices": [f"click [{i}]" for i in range(8)], "text_prefixes": ["type [5] "], "max_text": 32}}


def screenshots(count: int, size: int = 96) -> list[bytes]:
    """Distinct small PNG screenshots: a page with a few boxes and text-like stripes."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        image = Image.new("RGB", (size, size), (250, 250, 250))
        draw = ImageDraw.Draw(image)
        for _ in range(4):
            x, y = (int(v) for v in rng.integers(0, size - 24, 2))
            draw.rectangle([x, y, x + 20, y + 10], fill=tuple(int(c) for c in rng.integers(0, 255, 3)))
        for row in range(6, size, 12):
            width = int(rng.integers(20, size - 8))
            draw.line([4, row, width, row], fill=(40, 40, 40), width=2)
        x, y = (int(v) for v in rng.integers(0, size - 24, 2))
        image.paste(Image.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)), (x, y))  # a photo
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


class Maker:
    """Builds trajectories whose screenshots are fresh bytes objects drawn from a pool of PNGs."""

    def __init__(self, pool: int = 512, steps: int = 3):
        self.pngs = screenshots(pool)
        self.steps = steps
        self.count = 0

    def _png(self) -> bytes:
        self.count += 1
        return bytes(memoryview(self.pngs[self.count % len(self.pngs)]))  # its own copy

    def _observation(self, task: Task, step: int) -> Observation:
        return Observation(self._png(), UI_TEXT, f"http://127.0.0.1/page{step}.html", task.instruction, dict(GRAMMAR))

    def trajectory(self, version: int = 0) -> Trajectory:
        seed = self.count
        task = Task(f"click-option-{seed}", "Click the button Option 3.", "miniwob", start="click-option", meta={})
        steps = [
            Step(
                observation=self._observation(task, i),
                action_text=f"click [{i}]",
                action={"kind": "click", "element": i, "text": ""},
                reward=float(i == self.steps - 1),
                done=i == self.steps - 1,
                policy_version=version,
                logprob=-0.25 * (i + 1),
                timings={"act_s": 0.012, "step_s": 0.18},
            )
            for i in range(self.steps)
        ]
        final = self._observation(task, self.steps)
        return Trajectory(task, steps, "success", env_id="env-0", runner_id="runner-0", final_observation=final)

    def batch(self, n: int, version: int = 0) -> list[Trajectory]:
        return [self.trajectory(version) for _ in range(n)]


def ingest(buffer, trajectories: list[Trajectory], batch: int) -> float:
    """Seconds to add these trajectories `batch` at a time, until the actor has them all."""
    started = time.perf_counter()
    last = None
    for i in range(0, len(trajectories), batch):
        last = buffer.add.remote(trajectories[i : i + batch])
    ray.get(last)
    return time.perf_counter() - started


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main(argv=None) -> int:
    from rlsys.actors.replay import ReplayBufferActor

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=100_000, help="trajectories stored (and capacity)")
    parser.add_argument("--fill-batch", type=int, default=64)
    parser.add_argument("--ingest", type=int, default=50_000, help="trajectories timed per batch size, at --stored")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--sample-size", type=int, default=128)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)

    maker = Maker()
    one = maker.trajectory()
    per_traj = {"nbytes": one.nbytes(), "pickled_bytes": len(pickle.dumps(one)), "png_bytes": len(maker.pngs[0])}
    per_traj["png_bytes_mean"] = float(np.mean([len(p) for p in maker.pngs]))
    print(f"one trajectory: {one.nbytes()} bytes by nbytes(), {per_traj['pickled_bytes']} pickled", flush=True)

    load_before = os.getloadavg()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        buffer = ReplayBufferActor.options(num_cpus=0).remote(args.stored, 1 << 40, 0)
        fill_s, filled = 0.0, 0
        while filled < args.stored:
            chunk = maker.batch(min(5000, args.stored - filled))
            fill_s += ingest(buffer, chunk, args.fill_batch)
            filled += len(chunk)
        stats = ray.get(buffer.stats.remote())
        assert stats["size"] == args.stored, stats
        print(f"fill 0 -> {args.stored}: {filled / fill_s:,.0f} traj/s ({stats['bytes'] / 2**20:,.0f} MiB)", flush=True)

        rows = []
        for batch in args.batch_sizes:
            trajectories = maker.batch(args.ingest)
            seconds = ingest(buffer, trajectories, batch)
            rows.append({"batch": batch, "trajectories": len(trajectories), "seconds": seconds})
            rows[-1]["traj_per_s"] = len(trajectories) / seconds
            print(f"ingest at {args.stored}, batches of {batch}: {rows[-1]['traj_per_s']:,.0f} traj/s", flush=True)
        # the driver holds nothing big while sampling, and what it holds is out of the collector's reach
        del trajectories, chunk
        gc.collect()
        gc.freeze()
        stats = ray.get(buffer.stats.remote())
        assert stats["size"] == args.stored and stats["evicted"] == sum(r["trajectories"] for r in rows), stats

        sampling = []
        for min_version in (None, 0):
            ray.get(buffer.sample.remote(args.sample_size, min_version))  # warm-up
            times = []
            for _ in range(args.samples):
                started = time.perf_counter()
                drawn = ray.get(buffer.sample.remote(args.sample_size, min_version))
                times.append(time.perf_counter() - started)
                assert len(drawn) == args.sample_size
            sampling.append(
                {
                    "min_version": min_version,
                    "n": args.sample_size,
                    "median_ms": statistics.median(times) * 1e3,
                    "p95_ms": percentile(times, 0.95) * 1e3,
                    "max_ms": max(times) * 1e3,
                    "samples_ms": [t * 1e3 for t in times],
                }
            )
        assert ray.get(buffer.stats.remote())["size"] == args.stored  # min_version 0 dropped nothing
    finally:
        ray.shutdown()

    print()
    print("| measure | value | target |")
    print("|---|---|---|")
    print(f"| fill 0 -> {args.stored:,} (batches of {args.fill_batch}) | {filled / fill_s:,.0f} traj/s | |")
    for r in rows:
        ok = "met" if r["traj_per_s"] >= 1000 else "MISSED"
        label = f"ingest at {args.stored:,}, batches of {r['batch']}"
        print(f"| {label} | {r['traj_per_s']:,.0f} traj/s | >= 1,000 ({ok}) |")
    for s in sampling:
        ok = ", ".join(f"{k} {'met' if s[k + '_ms'] <= 20 else 'MISSED'}" for k in ("median", "p95"))
        label = f"sample({s['n']}), min_version={s['min_version']}"
        value = f"median {s['median_ms']:.1f} ms, p95 {s['p95_ms']:.1f} ms, max {s['max_ms']:.0f} ms"
        print(f"| {label} | {value} | <= 20 ms ({ok}) |")

    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "ray": ray.__version__,
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "per_trajectory": per_traj,
        "stored_bytes": stats["bytes"],
        "fill": {"trajectories": filled, "seconds": fill_s, "traj_per_s": filled / fill_s},
        "ingest": rows,
        "sample": sampling,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
