"""python -m rlsys.eval --config FILE --checkpoint DIR [key=value ...]

Plays the evaluation tasks greedily with the policy saved in a checkpoint and prints the
success rate per task. Results go to DIR/eval.json, the episodes to DIR/eval/.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from rlsys import __version__
from rlsys.config import ConfigError, check_extras, check_paths, load_config
from rlsys.envs.android.emulator import check_local_setup
from rlsys.envs.evaluators import check_setup
from rlsys.envs.tasks import check_tasks

# What a saved policy folder holds: an HF model, a LoRA adapter, or a hosted model's description.
POLICY_MARKERS = ("config.json", "adapter", "api_policy.json")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="rlsys-eval", description=__doc__)
    p.add_argument("--version", action="version", version=f"rlsys {__version__}")
    p.add_argument("--config", required=True)
    p.add_argument(
        "--checkpoint",
        help="a checkpoint folder (holding policy/) or a policy folder; default: policy.path (none for kind=api)",
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
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    if args.checkpoint:
        ckpt = Path(args.checkpoint)
        policy_dir = ckpt / "policy" if (ckpt / "policy").is_dir() else ckpt
        if not any((policy_dir / marker).exists() for marker in POLICY_MARKERS):
            print(f"no policy found in {ckpt} (expected {ckpt}/policy/config.json)", file=sys.stderr)
            return 2
        cfg.policy = replace(cfg.policy, path=str(policy_dir))
    elif cfg.policy.path:
        ckpt = Path(cfg.policy.path)
    elif cfg.policy.kind == "api":
        ckpt = cfg.output_dir
        ckpt.mkdir(parents=True, exist_ok=True)
    else:
        print("rlsys.eval needs --checkpoint (or policy.path, or policy.kind=api)", file=sys.stderr)
        return 2

    import ray

    from rlsys.actors.pool import RunnerPool
    from rlsys.actors.weight_store import WeightStore
    from rlsys.data.shards import ShardWriter
    from rlsys.envs.tasks import eval_groups, eval_tasks
    from rlsys.metrics import summarize_eval
    from rlsys.policies import build_policy
    from rlsys.policies.weights import pack_state_dict
    from rlsys.ray_init import init_ray

    started_ray, _ = init_ray(cfg)
    store = ray.remote(WeightStore).options(num_cpus=0).remote()
    ray.get(store.publish.remote(0, pack_state_dict(build_policy(cfg.policy).state_dict())), timeout=600)
    pool = RunnerPool(cfg, store, seed=cfg.run.seed)
    tasks = eval_tasks(cfg.tasks, cfg.run.eval_episodes)
    names = eval_groups(tasks)
    try:
        results = pool.play(tasks)
    finally:
        pool.shutdown()
        if started_ray:
            ray.shutdown()
    summary = summarize_eval(results, names)
    (ckpt / "eval.json").write_text(json.dumps(summary, indent=1))
    ShardWriter(ckpt / "eval", split="eval").write(results)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
