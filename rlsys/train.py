"""python -m rlsys.train --config FILE [key=value ...] [--resume RUN_DIR]"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rlsys import __version__
from rlsys.config import Config, ConfigError, build, check_extras, check_paths, save_config, unresolved_dict
from rlsys.config.loader import literal_secrets, stored_dict
from rlsys.config.run_dir import check_new_run_dir, check_resumable, resume_changes, saved_config
from rlsys.envs.android.emulator import check_local_setup
from rlsys.envs.evaluators import check_setup
from rlsys.envs.tasks import check_tasks


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rlsys-train", description=__doc__)
    p.add_argument("--version", action="version", version=f"rlsys {__version__}")
    p.add_argument("--config", help="experiment YAML (default with --resume: RUN_DIR/config.yaml)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. learner.lr=1e-4 run.iterations=20")
    args = p.parse_args(argv)
    if not args.config and not args.resume:
        p.error("--config is required (or --resume RUN_DIR)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    config_path = args.config or os.path.join(args.resume, "config.yaml")
    try:  # every config problem is reported before Ray starts, and before anything is written
        if args.resume:
            check_resumable(Path(args.resume))
        raw = unresolved_dict(config_path, args.overrides)
        cfg = build(Config, raw)
        check_extras(cfg)
        check_tasks(cfg.tasks, cfg.env.kind)
        check_setup(cfg.evaluator)
        check_local_setup(cfg)
        check_paths(cfg)
        if cfg.policy.kind in ("api", "random"):
            raise ConfigError(
                f"policy.kind {cfg.policy.kind!r} has no weights to train; evaluate it with python -m rlsys.eval"
            )
        if args.resume:  # the run's config.yaml stays as it is; keys the checkpoints depend on may not change
            cfg.run.output_dir = args.resume
            changed = resume_changes(saved_config(cfg.output_dir), stored_dict(raw, cfg))
        else:
            check_new_run_dir(cfg.output_dir)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    for key in literal_secrets(args.overrides):
        print(
            f"warning: {key} is a literal on the command line; it is redacted from everything stored, "
            "but use ${env:NAME} to keep it out of process listings",
            file=sys.stderr,
        )
    run_dir = cfg.output_dir
    if args.resume:
        if changed:
            print(f"resuming with {', '.join(changed)} as given (this session only; config.yaml unchanged)", flush=True)
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(raw, cfg, run_dir / "config.yaml")

    return train(cfg, run_dir, resume=bool(args.resume))


def train(cfg: Config, run_dir, resume: bool) -> int:
    """Start Ray, run the trainer and shut everything down however the run ends. Exit code 0: done; 1: a part
    the run needs failed, or no checkpoint is intact; 128 + the signal: stopped by Ctrl-C or SIGTERM, what
    finished kept (a second signal exits at once)."""
    import ray

    from rlsys.core.failures import RunFailed
    from rlsys.data.checkpoint import CheckpointError
    from rlsys.interrupt import Interrupted, first_signal_stops
    from rlsys.metrics import eval_table
    from rlsys.ray_init import init_ray
    from rlsys.trainer import Trainer

    started_ray, trainer = False, None
    with first_signal_stops() as stopping:
        try:
            started_ray, dashboard = init_ray(cfg)
            stopping.install()
            print(f"run folder: {run_dir}", flush=True)
            if dashboard:
                print(f"Ray dashboard: http://{dashboard}", flush=True)
            trainer = Trainer(cfg, run_dir, resume=resume)
            table = eval_table(trainer.run())
            if table:
                print("\n" + table, flush=True)
            return 0
        except RunFailed as e:
            print(f"run failed: {e}", file=sys.stderr, flush=True)
            return 1
        except CheckpointError as e:
            print(f"cannot resume: {e}", file=sys.stderr, flush=True)
            return 1
        except Interrupted as e:
            hint = trainer.resume_hint() if trainer else f"Continue with: python -m rlsys.train --resume {run_dir}"
            print(f"stopped by {e.name}. {hint}", file=sys.stderr, flush=True)
            return e.exit_code
        finally:
            stopping.under_way = True  # a signal during the shutdown exits at once
            if trainer is not None:
                trainer.shutdown()
            if started_ray:
                ray.shutdown()
                stopping.install()  # Ray's shutdown resets SIGTERM to its default


if __name__ == "__main__":
    sys.exit(main())
