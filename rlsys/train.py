"""python -m rlsys.train --config FILE [key=value ...] [--resume RUN_DIR] | --print-config FILE [key=value ...]"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from rlsys import __version__
from rlsys.config import Config, ConfigError, build, check_extras, check_paths, save_config, unresolved_dict
from rlsys.config.checks import with_absolute_paths
from rlsys.config.loader import literal_secrets, printed_config, stored_dict
from rlsys.config.run_dir import check_new_run_dir, check_resumable, is_remote_uri, resume_changes, saved_config
from rlsys.envs.android.emulator import check_local_setup
from rlsys.envs.evaluators import check_setup
from rlsys.envs.settings import check_env_settings
from rlsys.envs.tasks import check_tasks


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rlsys-train", description=__doc__)
    p.add_argument("--version", action="version", version=f"rlsys {__version__}")
    p.add_argument("--config", help="experiment YAML (default with --resume: RUN_DIR/config.yaml)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint")
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


def resumed_config_folder(resume: str) -> Path:
    """The folder whose config.yaml `--resume RESUME` reads: the run folder, or a temporary copy of a remote
    run's config.yaml (the run's files are pulled into its local folder once the config is known)."""
    if not is_remote_uri(resume):
        check_resumable(Path(resume))
        return Path(resume)
    from rlsys.data.storage import RemoteFolder

    folder = Path(tempfile.mkdtemp(prefix="rlsys-resume-"))  # removed by main once the config is read
    try:
        RemoteFolder(resume).download("config.yaml", folder / "config.yaml")
    except (OSError, ValueError) as e:
        shutil.rmtree(folder, ignore_errors=True)
        raise ConfigError(f"--resume {resume}: no readable config.yaml there, so not an rlsys run ({e})") from None
    return folder


def check_new_remote_run(uri: str) -> None:
    """A new run never starts in a remote folder that holds a published checkpoint (another run's)."""
    from rlsys.data.storage import RemoteFolder, published_checkpoints

    try:
        found = published_checkpoints(RemoteFolder(uri))
    except (OSError, ValueError) as e:
        raise ConfigError(f"run.output_dir {uri}: not usable ({e})") from None
    if found:
        raise ConfigError(f"{uri} already holds a run; pass --resume {uri} or choose another run.output_dir")


def check_new_scratch_dir(cfg: Config) -> None:
    """The local folder of a new remote run holds no other run (its hints name the folder, not the URI)."""
    try:
        check_new_run_dir(cfg.output_dir)
    except ConfigError:
        raise ConfigError(
            f"run.scratch_dir {cfg.output_dir}, the local folder of {cfg.run.output_dir} on this machine, holds "
            "another run or other files; set run.scratch_dir to a new or empty folder"
        ) from None


def resume_target(cfg: Config, run_dir: Path):
    """What `--resume` takes to continue this run: the URI the run is published to, else its folder."""
    return cfg.run.output_dir if is_remote_uri(cfg.run.output_dir) else run_dir


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.print_config:
        return print_config(args.print_config, args.overrides)
    saved_dir = None
    try:  # every config problem is reported before Ray starts, and before anything is written
        saved_dir = resumed_config_folder(args.resume) if args.resume else None
        config_path = args.config or os.path.join(saved_dir, "config.yaml")
        raw = unresolved_dict(config_path, args.overrides)
        cfg = build(Config, raw)
        check_extras(cfg)
        check_tasks(cfg.tasks, cfg.env.kind)
        check_env_settings(cfg.env)
        check_setup(cfg.evaluator)
        check_local_setup(cfg)
        check_paths(cfg)
        if args.resume:  # the run's config.yaml stays as it is; keys the checkpoints depend on may not change
            cfg.run.output_dir = args.resume
            changed = resume_changes(saved_config(saved_dir), stored_dict(raw, cfg))
        elif is_remote_uri(cfg.run.output_dir):
            check_new_remote_run(cfg.run.output_dir)
            check_new_scratch_dir(cfg)
        else:
            check_new_run_dir(cfg.output_dir)
        if cfg.policy.kind in ("api", "random"):  # after the resume checks: a resume may not change policy.kind
            out = str(resume_target(cfg, cfg.output_dir))
            evaluate = ["python", "-m", "rlsys.eval", "--config", config_path, "--out", out]
            raise ConfigError(
                f"policy.kind {cfg.policy.kind!r} has no weights to train; evaluate it with: "
                + shlex.join(evaluate + args.overrides)
            )
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    finally:
        if saved_dir is not None and is_remote_uri(args.resume):  # a temporary copy of the run's config.yaml
            shutil.rmtree(saved_dir, ignore_errors=True)
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
    # config.yaml keeps the paths as written (the run folder can move); Ray's workers, whose working directory is
    # not this one, get them absolute
    return train(with_absolute_paths(cfg), Path(os.path.abspath(run_dir)), resume=bool(args.resume))


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
        except CheckpointError as e:
            print(f"cannot resume: {e}", file=sys.stderr, flush=True)
            return 1
        except Interrupted as e:
            hint = (
                trainer.resume_hint()
                if trainer
                else f"Continue with: python -m rlsys.train --resume {resume_target(cfg, run_dir)}"
            )
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
