"""Weight publishing: from the learner's publish call until every runner holds the new version.

One node, the real `WeightStore` actor and `pull_if_newer`. State dicts of `--tensors` float32
tensors summing to each size (MB = 10**6 bytes). Each runner is an actor (torch pinned to one
thread, as in a runner) that, told a version is out, pulls it and loads it as a real runner
does: `load_state_dict` into a module holding parameters of the same shapes, which copies the
bytes. When the runners' parameters would not fit in memory (runners x size above
`--copy-budget-gb`, default 4: 64 x 1 GB cannot fit on a 24 GiB machine, and 64 runner processes
with torch already take ~11 GiB), the runner only pulls and touches one element of every tensor
instead; the row says which ("load" or "touch"), and for "touch" rows `baseline_load_s` is the
baseline with the load, i.e. what one runner's copy adds.

Timed, per repeat (median reported):
- packed: `store.publish.remote(v, pack_state_dict(state))`, then every runner syncs; the
  clock runs from the publish call until the last runner has loaded version v.
- torch: the same with the plain torch state dict as the publish argument (what
  `learners/runtime/learner.py` sends today): Ray pickles torch tensors in-band, which is much slower.
- baseline: the same bytes through the same transport once: `ray.put` of the packed state dict
  by the driver and `ray.get` plus the same load/touch by one other actor.

Target: 64 runners within 3x the baseline.

    python benchmarks/weight_publish.py --sizes-mb 10 100 1000 --runners 16 64 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import ray
import torch

from rlsys.actors.weight_store import WeightStore
from rlsys.policies.weights import pack_state_dict

MB = 10**6
RESULTS = Path(__file__).parent / "results" / "weight_publish.json"


class BenchRunner:
    """What a runner does with weights, and nothing else: no policy, no browser."""

    def __init__(self, store):
        torch.set_num_threads(1)  # as EnvRunner does
        self.store = store
        self.version = -1
        self.model: torch.nn.Module | None = None

    def prepare(self, shapes: dict | None, load: bool) -> int:
        """Hold parameters of these shapes (allocated and touched) when the runner loads weights."""
        self.model = None
        self.version = -1
        if shapes and load:
            self.model = torch.nn.ParameterDict(
                {k: torch.nn.Parameter(torch.ones(shape), requires_grad=False) for k, shape in shapes.items()}
            )
        return os.getpid()

    def sync(self, expected: int) -> float:
        from rlsys.actors.weight_store import pull_if_newer

        started = time.perf_counter()
        found = pull_if_newer(self.store, self.version)
        assert found is not None and found[0] == expected, (found and found[0], expected)
        version, state = found
        self._consume(state)
        self.version = version
        return time.perf_counter() - started

    def consume(self, wrapped: list) -> float:
        """The baseline: get an object the driver put, and do the same work with it."""
        started = time.perf_counter()
        self._consume(ray.get(wrapped[0]))
        return time.perf_counter() - started

    def _consume(self, state: dict) -> None:
        if self.model is not None:
            self.model.load_state_dict(state)
        else:
            total = sum(float(v.view(-1)[0]) for v in state.values())
            assert total == total  # touched


def make_state(size_mb: int, tensors: int) -> dict:
    numel = size_mb * MB // 4 // tensors
    g = torch.Generator().manual_seed(size_mb)
    return {f"w{i}": torch.rand(numel, generator=g) for i in range(tensors)}


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def publish_and_sync(store, runners, version: int, state: dict, packed: bool) -> tuple[float, float]:
    """(seconds of the publish call, seconds until every runner has loaded `version`)."""
    started = time.perf_counter()
    ray.get(store.publish.remote(version, pack_state_dict(state) if packed else state))
    published = time.perf_counter()
    ray.get([r.sync.remote(version) for r in runners])
    return published - started, time.perf_counter() - started


def baseline(actor, state: dict) -> float:
    started = time.perf_counter()
    ref = ray.put(pack_state_dict(state))
    ray.get(actor.consume.remote([ref]))
    elapsed = time.perf_counter() - started
    del ref
    return elapsed


def measure(args) -> list[dict]:
    Runner = ray.remote(num_cpus=0.01)(BenchRunner)
    store = ray.remote(WeightStore).options(num_cpus=0).remote()
    started = time.perf_counter()
    runners = [Runner.remote(store) for _ in range(max(args.runners))]
    other = Runner.remote(store)
    ray.get([r.prepare.remote(None, False) for r in [*runners, other]])
    print(f"{len(runners) + 1} runner actors up in {time.perf_counter() - started:.1f}s", flush=True)

    rows, version = [], 0
    for size_mb in args.sizes_mb:
        state = make_state(size_mb, args.tensors)
        shapes = {k: tuple(v.shape) for k, v in state.items()}
        for n in args.runners:
            group = runners[:n]
            load = n * size_mb * MB <= args.copy_budget_gb * 1e9
            ray.get([r.prepare.remote(shapes, load) for r in [*group, other]])
            version += 1  # warm-up: first pull of this shape, not timed
            publish_and_sync(store, group, version, state, packed=True)
            samples = {"packed_publish_s": [], "packed_s": [], "torch_publish_s": [], "torch_s": [], "baseline_s": []}
            for _ in range(args.repeats):
                samples["baseline_s"].append(baseline(other, state))
                version += 1
                publish_s, total_s = publish_and_sync(store, group, version, state, packed=True)
                samples["packed_publish_s"].append(publish_s)
                samples["packed_s"].append(total_s)
                version += 1
                publish_s, total_s = publish_and_sync(store, group, version, state, packed=False)
                samples["torch_publish_s"].append(publish_s)
                samples["torch_s"].append(total_s)
            if not load:  # what one runner's load_state_dict copy would add: the baseline actor loads
                ray.get(other.prepare.remote(shapes, True))
                samples["baseline_load_s"] = [baseline(other, state) for _ in range(args.repeats)]
            base = median(samples["baseline_s"])
            row = {
                "size_mb": size_mb,
                "bytes": sum(v.numel() * v.element_size() for v in state.values()),
                "tensors": len(state),
                "runners": n,
                "runner_work": "load" if load else "touch",
                "baseline_load_s": None,
                **{k: median(v) for k, v in samples.items()},
                "samples": samples,
            }
            row["packed_ratio"] = row["packed_s"] / base
            row["torch_ratio"] = row["torch_s"] / base
            row["meets_3x"] = row["packed_ratio"] <= 3.0
            rows.append(row)
            print_row(row, header=len(rows) == 1)
            ray.get([r.prepare.remote(None, False) for r in [*group, other]])  # free the parameters
        del state
    return rows


COLUMNS = (
    ("size_mb", "MB", "{:>6}"),
    ("runners", "runners", "{:>7}"),
    ("runner_work", "work", "{:>5}"),
    ("baseline_s", "put+get s", "{:>9.3f}"),
    ("packed_publish_s", "publish s", "{:>9.3f}"),
    ("packed_s", "all runners s", "{:>13.3f}"),
    ("packed_ratio", "ratio", "{:>6.2f}"),
    ("torch_publish_s", "torch publish s", "{:>15.3f}"),
    ("torch_s", "torch all s", "{:>11.3f}"),
    ("torch_ratio", "torch ratio", "{:>11.2f}"),
)


def print_row(row: dict, header: bool) -> None:
    if header:
        print(" | ".join(title for _, title, _ in COLUMNS), flush=True)
    print(
        " | ".join(fmt.format(row[key]).rjust(len(title)) for key, title, fmt in COLUMNS)
        + ("" if row["meets_3x"] else "  <- over 3x"),
        flush=True,
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--runners", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tensors", type=int, default=8, help="float32 tensors per state dict")
    parser.add_argument("--copy-budget-gb", type=float, default=4.0, help="runners x size above this: touch, not load")
    parser.add_argument("--object-store-gb", type=float, default=6.0)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)

    load_before = os.getloadavg()
    ray.init(
        num_cpus=2,
        object_store_memory=int(args.object_store_gb * 2**30),
        include_dashboard=False,
        log_to_driver=False,
    )
    try:
        rows = measure(args)
    finally:
        ray.shutdown()
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__},
        "ray": ray.__version__,
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
