"""Bytes per stored step in a run's trajectory shards, and how much of it is screenshots.

python benchmarks/storage_bytes.py runs/quickstart/trajectories
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path)
    args = p.parse_args()
    shards = sorted(args.folder.glob("shard-*.parquet"))
    if not shards:
        raise SystemExit(f"no shard-*.parquet in {args.folder}")
    on_disk = sum(s.stat().st_size for s in shards)
    steps = png = 0
    for shard in shards:
        table = pq.read_table(shard, columns=["step_index", "screenshot_png"])
        real = pc.greater_equal(table["step_index"], 0)
        steps += pc.sum(real).as_py() or 0
        png += pc.sum(pc.binary_length(table["screenshot_png"])).as_py() or 0
    print(f"{len(shards)} shards, {steps} steps, {on_disk / 1e6:.2f} MB on disk")
    print(f"{on_disk / steps:.0f} bytes per step on disk, of which PNG screenshots {png / steps:.0f}")


if __name__ == "__main__":
    main()
