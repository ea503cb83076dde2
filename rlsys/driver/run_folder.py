"""A run folder made ready before Ray starts: the config checked, the resume point chosen and verified, an earlier
run moved aside only when asked, config.yaml written."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rlsys.config import Config, ConfigError, build, check_extras, check_paths, save_config, unresolved_dict
from rlsys.config.checks import with_absolute_paths
from rlsys.config.loader import stored_dict
from rlsys.config.run_dir import (
    check_new_run_dir,
    check_no_dangling_link,
    check_resumable,
    is_remote_uri,
    move_aside,
    resume_changes,
    saved_config,
)
from rlsys.data import checkpoint
from rlsys.driver.ray_init import check_cluster
from rlsys.envs.android.emulator import check_local_setup
from rlsys.envs.evaluators import check_setup
from rlsys.envs.settings import check_env_settings
from rlsys.envs.tasks import check_tasks
from rlsys.policies import TORCH_FREE_KINDS
from rlsys.policies.hub import fetch_models


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


def resume_point(run_dir: Path) -> Path:
    """The checkpoint a local resume continues from, chosen and verified here, before Ray starts: the newest
    intact one, each newer damaged one named in a warning. A ConfigError when the run has no complete checkpoint
    (it would have to start over, beside the files of the session that stopped); a CheckpointError naming every
    damaged file when none is intact."""
    try:
        found, passed_over = checkpoint.resume_point(run_dir)
    except checkpoint.NoCheckpoint:
        raise ConfigError(
            f"--resume {run_dir}: no complete checkpoint there (the run stopped before its first one, see "
            f"run.checkpoint_every), so nothing to continue from; start it over with --restart, which moves its "
            f"files aside (to {run_dir.name}.old-DATE-TIME beside it): rlsys-train --resume {run_dir} "
            "--restart"
        ) from None
    for line in passed_over:
        print(f"warning: {line}", file=sys.stderr, flush=True)
    return found


def resume_target(cfg: Config, run_dir: Path):
    """What `--resume` takes to continue this run: the URI the run is published to, else its folder."""
    return cfg.run.output_dir if is_remote_uri(cfg.run.output_dir) else run_dir


@dataclass
class PreparedRun:
    """A run that passed every check before Ray: its config, its local folder and what to resume from."""

    cfg: Config
    raw: dict  # the merged config before `${env:…}` resolution: what config.yaml stores
    run_dir: Path
    resume: Path | bool  # the checkpoint to continue from, True for a remote run's (chosen once pulled), or False
    changed: list[str] = field(default_factory=list)  # keys a resume changes for this session
    earlier_run: bool = False  # a run to move aside first (--restart)


def prepare(
    config: str | os.PathLike | dict | None, overrides: list[str] = (), resume: str | None = None, restart=False
) -> PreparedRun:
    """Every check a run passes before Ray starts and before anything is written: a ConfigError or a
    CheckpointError names what is wrong. `config`: a YAML file, a packaged config's name, or the mapping such a
    file holds; None with `resume` reads the run's own config.yaml."""
    saved_dir = None
    try:
        saved_dir = resumed_config_folder(resume) if resume else None
        if config is None and saved_dir is None:
            raise ConfigError("a config is required (or a run folder to resume)")
        source = os.path.join(saved_dir, "config.yaml") if config is None else config
        raw = (
            unresolved_dict(None, overrides, data=source)
            if isinstance(source, dict)
            else unresolved_dict(source, overrides)
        )
        cfg = build(Config, raw)
        check_before_ray(cfg)
        if resume:
            cfg.run.output_dir = resume
        check_no_dangling_link(cfg.output_dir)  # a new run's folder, or a remote run's local one
        run = PreparedRun(cfg, raw, cfg.output_dir, resume=False)
        resuming = bool(resume) and not restart
        if resuming:  # the run's config.yaml stays as it is; keys the checkpoints depend on may not change
            run.changed = resume_changes(saved_config(saved_dir), stored_dict(raw, cfg))
        elif is_remote_uri(cfg.run.output_dir):
            if restart:
                raise ConfigError(f"--restart moves a local run folder aside: for {cfg.run.output_dir}, choose "
                                  "another run.output_dir instead")  # fmt: skip
            check_new_remote_run(cfg.run.output_dir)
            check_new_scratch_dir(cfg)
        else:
            run.earlier_run = check_new_run_dir(cfg.output_dir, restart=restart)
        if cfg.policy.kind in TORCH_FREE_KINDS:  # after the resume checks: a resume may not change policy.kind
            out = str(resume_target(cfg, cfg.output_dir))
            shown_config = source if isinstance(source, (str, os.PathLike)) else "CONFIG"
            evaluate = ["rlsys-eval", "--config", str(shown_config), "--out", out]
            raise ConfigError(
                f"policy.kind {cfg.policy.kind!r} has no weights to train; evaluate it with: "
                + shlex.join(evaluate + list(overrides))
            )
        if resuming:  # chosen and verified once, here, and loaded as it is; a remote run's once it is pulled
            run.resume = True if is_remote_uri(resume) else resume_point(cfg.output_dir)
        return run
    finally:
        if saved_dir is not None and is_remote_uri(resume):  # a temporary copy of the run's config.yaml
            shutil.rmtree(saved_dir, ignore_errors=True)


def open_run_folder(run: PreparedRun) -> Config:
    """Make the run's folder ready (an earlier run moved aside, config.yaml written for a new run) and return the
    config Ray's workers get: config.yaml keeps the paths as written (the run folder can move), the workers, whose
    working directory is not this one, get them absolute."""
    run_dir = run.run_dir
    if run.resume:
        if run.changed:
            print(f"resuming with {', '.join(run.changed)} as given (this session only; config.yaml unchanged)",
                  flush=True)  # fmt: skip
    else:
        if run.earlier_run:
            print(f"--restart: the earlier run in {run_dir} was moved to {move_aside(run_dir)}", flush=True)
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(run.raw, run.cfg, run_dir / "config.yaml")
    return with_absolute_paths(run.cfg)


def check_before_ray(cfg: Config, offline_data: bool = True) -> None:
    """Everything a run or an evaluation needs that can be checked before Ray starts: extras, tasks, env settings,
    judges, local emulators, every Hub id in the Hugging Face cache, the paths, and a cluster named by address
    (that it answers and lets this process in). Raises ConfigError naming the key."""
    check_extras(cfg)
    check_tasks(cfg.tasks, cfg.env.kind)
    check_env_settings(cfg.env)
    check_setup(cfg.evaluator)
    check_local_setup(cfg)
    fetch_models(cfg)
    check_paths(cfg, offline_data=offline_data)
    check_cluster(cfg)
