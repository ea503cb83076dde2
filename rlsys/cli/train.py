"""rlsys-train --config FILE [key=value ...] [--resume RUN_DIR] [--restart] | --print-config FILE [...]"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rlsys import __version__
from rlsys.config import Config, ConfigError
from rlsys.config.loader import literal_secrets, printed_config
from rlsys.data import checkpoint
from rlsys.driver.run_folder import (
    open_run_folder,
    prepare,
    resume_target,
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rlsys-train", description=__doc__)
    p.add_argument("--version", action="version", version=f"rlsys {__version__}")
    p.add_argument("--config", help="experiment YAML (default with --resume: RUN_DIR/config.yaml)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint")
    p.add_argument(
        "--restart",
        action="store_true",
        help="start over in a run folder that holds an earlier run: its files are moved aside first, to "
        "NAME.old-DATE-TIME beside it (with --resume RUN_DIR: RUN_DIR starts over with its own config.yaml)",
    )
    p.add_argument(
        "--print-config",
        metavar="FILE",
        help="print the config FILE with the overrides, every default filled in and secrets redacted, and exit",
    )
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. learner.lr=1e-4 run.iterations=20")
    args = p.parse_args(argv)
    if args.print_config and (args.config or args.resume):
        p.error("--print-config takes the config itself: leave out --config and --resume")
    if not args.config and not args.resume and not args.print_config:
        p.error("--config is required (or --resume RUN_DIR)")
    if args.print_config and args.restart:
        p.error("--print-config writes nothing: leave out --restart")
    return args


def print_config(path: str, overrides: list[str]) -> int:
    """Validate and print; no Ray, nothing written."""
    try:
        text = printed_config(path, overrides)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.print_config:
        return print_config(args.print_config, args.overrides)
    try:
        run = prepare(args.config, args.overrides, args.resume, args.restart)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    except checkpoint.CheckpointError as e:
        print(f"cannot resume: {e}", file=sys.stderr)
        return 1
    for key in literal_secrets(args.overrides):
        print(
            f"warning: {key} is a literal on the command line; it is redacted from everything stored, "
            "but use ${env:NAME} to keep it out of process listings",
            file=sys.stderr,
        )
    cfg = open_run_folder(run)
    return train(cfg, Path(os.path.abspath(run.run_dir)), resume=run.resume)


def train(cfg: Config, run_dir, resume: Path | bool) -> int:
    """Start Ray, run the trainer and shut everything down however the run ends. `resume`: the checkpoint to
    continue from, True to let the trainer choose it (a remote run), False for a new run. Exit code 0: done;
    1: a part the run needs failed, the disk is full, or no checkpoint is intact; 128 + the signal: stopped by
    Ctrl-C or SIGTERM, what finished kept (a second signal exits at once)."""
    import ray

    from rlsys.core.failures import RunFailed, headline
    from rlsys.driver.checkpointing import resume_hint
    from rlsys.driver.interrupt import Interrupted, first_signal_stops
    from rlsys.driver.metrics import eval_table
    from rlsys.driver.ray_init import init_ray
    from rlsys.driver.trainer import Trainer

    started_ray, trainer = False, None
    with first_signal_stops() as stopping:
        try:
            started_ray, dashboard = init_ray(cfg)
            stopping.install()
            shown = resume_target(cfg, run_dir)
            print(
                f"run folder: {shown}" + (f" (this machine's copy: {run_dir})" if shown != run_dir else ""), flush=True
            )
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
        except checkpoint.CheckpointError as e:
            print(f"cannot resume: {e}", file=sys.stderr, flush=True)
            return 1
        except checkpoint.DiskFull as e:
            print(f"run failed: {e}. {trainer.resume_hint()}", file=sys.stderr, flush=True)
            return 1
        except OSError as e:  # a shard or metrics line the disk had no room for
            if not checkpoint.out_of_space(e):
                raise
            hint = trainer.resume_hint() if trainer else resume_hint(run_dir, resume_target(cfg, run_dir))
            print(
                f"run failed: no space left in {run_dir} ({checkpoint.free_space(run_dir)} free): {headline(e)}. "
                + hint,
                file=sys.stderr,
                flush=True,
            )
            return 1
        except Interrupted as e:
            hint = trainer.resume_hint() if trainer else resume_hint(run_dir, resume_target(cfg, run_dir))
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
