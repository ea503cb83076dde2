"""python -m rlsys.eval --config FILE [--checkpoint DIR] [--out DIR] [key=value ...]

Plays the evaluation tasks greedily and prints the success rate per task. The policy is the one saved in
--checkpoint, else policy.path; a weightless policy (policy.kind random or api) needs neither. Results go to
--out DIR: eval.json and the episodes (episodes/). Without --out, a run's checkpoint RUN/checkpoints/N writes
to RUN/evals/N/; anything else needs --out. The checkpoint or model folder is only read. The results folder
must be new or empty, and is checked writable before any episode is played.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from rlsys import __version__
from rlsys.config import ConfigError, check_extras, check_paths, load_config
from rlsys.data.checkpoint import checkpoint_root
from rlsys.envs.android.emulator import check_local_setup
from rlsys.envs.evaluators import check_setup
from rlsys.envs.tasks import check_tasks
from rlsys.policies import TORCH_FREE_KINDS as WEIGHTLESS_KINDS

# What a saved policy folder holds: an HF model, a LoRA adapter, or a hosted model's description.
POLICY_MARKERS = ("config.json", "adapter", "api_policy.json")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="rlsys-eval", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--version", action="version", version=f"rlsys {__version__}")
    p.add_argument("--config", required=True)
    p.add_argument(
        "--checkpoint",
        help="a checkpoint folder (holding policy/) or a policy folder; default: policy.path "
        "(none for policy.kind random or api)",
    )
    p.add_argument(
        "--out", metavar="DIR", help="a new or empty folder for the results; default for RUN/checkpoints/N: RUN/evals/N"
    )
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        check_extras(cfg)
        check_tasks(cfg.tasks, cfg.env.kind)
        check_setup(cfg.evaluator)
        check_local_setup(cfg)
        check_paths(cfg, offline_data=False)
        if args.checkpoint:
            cfg.policy = replace(cfg.policy, path=str(policy_folder(Path(args.checkpoint))))
        elif not cfg.policy.path and cfg.policy.kind not in WEIGHTLESS_KINDS:
            raise ConfigError(
                f"policy.kind {cfg.policy.kind!r} needs weights: pass --checkpoint DIR or set policy.path "
                f"(policy.kind {' or '.join(sorted(WEIGHTLESS_KINDS))} needs none)"
            )
        out = results_folder(args.out, args.checkpoint)
        prepare(out)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2

    summary, names = evaluate(cfg, out)
    width = max(len(n) for n in names)
    for name in names:
        rate = summary[f"eval/success_rate/{name}"]
        print(f"{name.ljust(width)}  {'n/a' if rate is None else f'{100 * rate:.1f}%'}")
    overall = summary["eval/success_rate"]
    print(
        f"{'overall'.ljust(width)}  {'n/a' if overall is None else f'{100 * overall:.1f}%'}"
        f"  ({summary['eval/episodes']} episodes, {summary['eval/env_errors']} env errors, "
        f"{summary['eval/unknown']} without a verdict)"
    )
    print(f"results: {out / 'eval.json'}")
    return 0


def policy_folder(checkpoint: Path) -> Path:
    folder = checkpoint / "policy" if (checkpoint / "policy").is_dir() else checkpoint
    if not any((folder / marker).exists() for marker in POLICY_MARKERS):
        raise ConfigError(f"--checkpoint: no policy found in {checkpoint} (expected {checkpoint}/policy/config.json)")
    return folder


def results_folder(out: str | None, checkpoint: str | None) -> Path:
    """--out, else RUN/evals/N for a checkpoint RUN/checkpoints/N (or its policy/ folder)."""
    if out:
        return Path(out)
    if checkpoint:
        ckpt = Path(checkpoint).resolve()
        for candidate in (ckpt, ckpt.parent) if ckpt.name == "policy" else (ckpt,):
            run = candidate.parent.parent
            if candidate.parent == checkpoint_root(run) and candidate.name.isdigit():  # as the trainer names them
                return run / "evals" / candidate.name
    raise ConfigError(
        "--out DIR is needed: only a run's checkpoint (RUN/checkpoints/N) has a default results folder "
        "(RUN/evals/N); nothing is written into a model folder"
    )


def prepare(folder: Path) -> None:
    """Create the results folder, or accept an empty one, and prove it writable (results are not lost at the end)."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ConfigError(f"results folder {folder} is not empty; choose a new or empty folder with --out DIR")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise ConfigError(f"results folder {folder} is not writable: {e.strerror or e}") from None


def evaluate(cfg, out: Path) -> tuple[dict, list[str]]:
    """Play the evaluation tasks on Ray; write eval.json and the episodes to `out`."""
    import ray

    from rlsys.actors.pool import RunnerPool
    from rlsys.actors.weight_store import WeightStore
    from rlsys.data.shards import ShardWriter
    from rlsys.envs.tasks import eval_groups, eval_tasks
    from rlsys.metrics import summarize_eval
    from rlsys.ray_init import init_ray

    started_ray, _ = init_ray(cfg)
    store = ray.remote(WeightStore).options(num_cpus=0).remote()
    ray.get(store.publish.remote(0, weights(cfg)), timeout=600)
    pool = RunnerPool(cfg, store, seed=cfg.run.seed)
    tasks = eval_tasks(cfg.tasks, cfg.run.eval_episodes)
    names = eval_groups(tasks)
    try:
        results = pool.play(tasks)
    finally:
        pool.shutdown()
        ray.kill(store)
        if started_ray:
            ray.shutdown()
    summary = summarize_eval(results, names)
    ShardWriter(out / "episodes", split="eval").write(results)
    (out / "eval.json").write_text(json.dumps(summary, indent=1))
    return summary, names


def weights(cfg) -> dict:
    """What runners load: the policy's state dict; nothing for a weightless policy."""
    if cfg.policy.kind in WEIGHTLESS_KINDS:
        return {}
    from rlsys.policies import build_policy
    from rlsys.policies.weights import pack_state_dict

    return pack_state_dict(build_policy(cfg.policy).state_dict())


if __name__ == "__main__":
    sys.exit(main())
