"""Preparing a Digi-Q dataset (docs/algorithms/digiq.md), one command per stage; each reads a shard folder and
writes a new one, shard by shard, published only when complete.

    rlsys-digiq change-set --data DATA --out CHANGE      # yes/no "does it change the screen"
    rlsys-train --config configs/digiq_change_sft.yaml   # fine-tune the VLM on CHANGE (SFT, LoRA)
    rlsys-digiq candidates --config configs/digiq_general.yaml --data DATA --out CANDS
    rlsys-digiq represent  --config configs/digiq_general.yaml --data CANDS --out READY
    rlsys-train --config configs/digiq_general.yaml offline.data=[READY]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from rlsys import __version__
from rlsys.config import ConfigError, load_config
from rlsys.core.types import Trajectory
from rlsys.data.digirl_files import DataError, check_output_dir, publish
from rlsys.data.shards import ShardWriter, StorageError, read_shard


def input_shards(data: Path) -> list[Path]:
    if data.is_file():
        return [data]
    shards = sorted(data.glob("shard-*.parquet")) if data.is_dir() else []
    if not shards:
        raise DataError(f"--data {data}: no trajectory shards (shard-*.parquet) there")
    return shards


def transform_shards(
    data: Path, out: Path, transform: Callable[[list[Trajectory]], list[Trajectory]], summary: Counter
) -> dict:
    """Apply `transform` to each input shard and write the results to `out`, which appears only when
    every shard is done (a crash leaves `out` as it was). `summary` is written as `out/digiq.json`."""
    shards = input_shards(data)
    check_output_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.writing-", dir=out.parent))
    started = time.perf_counter()
    try:
        writer = ShardWriter(staging)
        for shard in tqdm(shards, desc="shards", unit="shard", disable=None):
            writer.write(transform(read_shard(shard)))
        summary["seconds"] = round(time.perf_counter() - started, 2)
        summary["shards"] = writer.next_index
        (staging / "digiq.json").write_text(json.dumps(dict(summary), indent=1) + "\n")
        publish(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dict(summary)


def change_set(args: argparse.Namespace) -> dict:
    from rlsys.learners.digiq.screen_change import change_examples

    summary: Counter = Counter({"threshold": args.threshold})

    def transform(trajectories: list[Trajectory]) -> list[Trajectory]:
        examples, stats = change_examples(trajectories, args.threshold)
        summary.update(stats)
        return examples

    return transform_shards(args.data, args.out, transform, summary)


def candidates(args: argparse.Namespace) -> dict:
    import torch

    from rlsys.envs import action_validator
    from rlsys.learners.digiq.candidates import sample_candidates
    from rlsys.policies import build_policy
    from rlsys.policies.devices import pick_device

    cfg = load_config(args.config, args.overrides)
    c = cfg.learner.digiq.candidates
    policy_cfg = replace(cfg.policy, temperature=c.temperature)
    policy = build_policy(policy_cfg, seed=cfg.run.seed, device=pick_device(cfg.learner.device))
    torch.manual_seed(cfg.run.seed)  # a loaded policy samples from torch's generator: the same draws every time
    valid = action_validator(cfg.env)
    summary: Counter = Counter({"k": c.k, "temperature": c.temperature})

    def transform(trajectories: list[Trajectory]) -> list[Trajectory]:
        steps = [s for t in trajectories for s in t.steps]
        lists, stats = sample_candidates(
            policy,
            [s.observation for s in steps],
            [s.action_text for s in steps],
            c.k,
            valid,
            c.max_redraws,
            c.batch_size,
        )
        for step, found in zip(steps, lists):
            step.info["digiq"] = step.info.get("digiq", {}) | {"candidates": found}
        summary.update(stats | {"steps": len(steps)})
        return trajectories

    return transform_shards(args.data, args.out, transform, summary)


def represent(args: argparse.Namespace) -> dict:
    from rlsys.learners.digiq.representations import annotate, representation_provider
    from rlsys.policies.devices import pick_device

    cfg = load_config(args.config, args.overrides)
    r = cfg.learner.digiq.representation
    if not r.model or not Path(r.model).is_dir():
        raise DataError(f"learner.digiq.representation.model: {r.model!r} is not a model folder")
    provider = representation_provider(
        r.model,
        r.method,
        pick_device(cfg.learner.device),
        r.batch_size,
        max_new_tokens=r.max_new_tokens,
        dtype=cfg.policy.dtype,
    )
    summary: Counter = Counter()

    def transform(trajectories: list[Trajectory]) -> list[Trajectory]:
        summary.update(annotate(trajectories, provider, progress=False))
        return trajectories

    out = transform_shards(args.data, args.out, transform, summary)
    out |= provider.record | {"pairs_per_s": round(out["pairs"] / max(out["seconds"], 1e-9), 2)}
    (args.out / "digiq.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"representations by {provider.id} ({r.method}); set learner.digiq.representation.model to it or the folder")
    return out


COMMANDS = {"change-set": change_set, "candidates": candidates, "represent": represent}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlsys-digiq", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"rlsys {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    change = commands.add_parser("change-set", help="the yes/no screen-change SFT set from trajectories")
    change.add_argument("--threshold", type=float, default=30.0, help="MSE of the 1/4-size screenshots above: yes")
    cands = commands.add_parser("candidates", help="K candidate actions per step from the config's policy")
    rep = commands.add_parser("represent", help="z(s, a) for every candidate from the configured VLM")
    for command in (change, cands, rep):
        command.add_argument("--data", type=Path, required=True, help="a shard folder or a single shard")
        command.add_argument("--out", type=Path, required=True, help="a new or empty folder for the result")
    for command in (cands, rep):
        command.add_argument("--config", required=True, help="the Digi-Q experiment config")
        command.add_argument("overrides", nargs="*", help="dotted.key=value overrides")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        summary = COMMANDS[args.command](args)
    except (DataError, ConfigError, StorageError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
