"""rlsys-eval --config FILE [--checkpoint DIR|URI] [--out DIR|URI] [key=value ...]

Plays the evaluation tasks greedily and prints the success rate per task. The policy is the one saved in
--checkpoint, else policy.path; a weightless policy (policy.kind random or api) needs neither. Results go to
--out DIR: eval.json and the episodes (episodes/). Without --out, a run's checkpoint RUN/checkpoints/N writes
to RUN/evals/N/; anything else needs --out. The checkpoint or model folder is only read. The results folder
must be new or empty, and is checked writable before any episode is played.

A remote run's checkpoint (s3://bucket/run/checkpoints/N, gs://...) is downloaded to a temporary folder and
verified against its manifest first; results for a remote folder (RUN/evals/N, or an --out URI) are written
locally, then published there with eval.json last, as the trainer publishes a checkpoint.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from rlsys import __version__
from rlsys.config import ConfigError, load_config
from rlsys.config.checks import with_absolute_paths
from rlsys.config.run_dir import is_remote_uri
from rlsys.data.checkpoint import CheckpointError, checkpoint_root
from rlsys.driver.run_folder import check_before_ray
from rlsys.policies import TORCH_FREE_KINDS as WEIGHTLESS_KINDS
from rlsys.policies import policy_class


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="rlsys-eval", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--version", action="version", version=f"rlsys {__version__}")
    p.add_argument("--config", required=True)
    p.add_argument(
        "--checkpoint",
        help="a checkpoint folder (holding policy/), a remote run's checkpoint (s3://... or gs://.../checkpoints/N) "
        "or a policy folder; default: policy.path (none for policy.kind random or api)",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="a new or empty folder (or s3:// or gs:// folder) for the results; default for RUN/checkpoints/N: "
        "RUN/evals/N",
    )
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="rlsys-eval-"))  # a remote checkpoint's copy, remote results' staging
    try:
        return run(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run(args, scratch: Path) -> int:
    try:
        cfg = load_config(args.config, args.overrides)
        check_before_ray(cfg, offline_data=False)
        if args.checkpoint:
            checkpoint = fetched(args.checkpoint, scratch) if is_remote_uri(args.checkpoint) else Path(args.checkpoint)
            cfg.policy = replace(cfg.policy, path=str(policy_folder(checkpoint, args.checkpoint, cfg.policy.kind)))
        elif not cfg.policy.path and cfg.policy.kind not in WEIGHTLESS_KINDS:
            raise ConfigError(
                f"policy.kind {cfg.policy.kind!r} needs weights: pass --checkpoint DIR or set policy.path "
                f"(policy.kind {' or '.join(sorted(WEIGHTLESS_KINDS))} needs none)"
            )
        target = results_folder(args.out, args.checkpoint)
        if is_remote_uri(target):
            remote = prepare_remote(target)
            out = scratch / "results"
        else:
            remote, out = None, Path(target)
        prepare(out)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    except CheckpointError as e:
        print(f"checkpoint error: {e}", file=sys.stderr)
        return 2

    summary, names = evaluate(with_absolute_paths(cfg), out)  # Ray's workers start in other folders
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
    if remote is None:
        print(f"results: {out / 'eval.json'}")
        return 0
    return publish(out, remote)


def publish(out: Path, remote) -> int:
    """Upload the results, eval.json last (its presence says the folder is complete); if that fails, keep them."""
    from rlsys.data.storage import publish_folder

    try:
        publish_folder(out, remote, "", last="eval.json")
    except OSError as e:
        kept = Path(tempfile.mkdtemp(prefix="rlsys-eval-results-"))
        shutil.copytree(out, kept, dirs_exist_ok=True)
        print(f"the results could not be published to {remote.uri} ({e}); they are kept in {kept}", file=sys.stderr)
        return 1
    print(f"results: {remote.uri_of('eval.json')}")
    return 0


def policy_folder(checkpoint: Path, given: str, kind: str) -> Path:
    """The folder holding a saved `kind` policy: `checkpoint`/policy, or `checkpoint` itself. Each policy kind
    says what its `save_pretrained` writes (`SAVED_AS`); the error says what was found instead."""
    if not checkpoint.is_dir():
        raise ConfigError(f"--checkpoint: {given} is not a folder")
    folder = checkpoint / "policy" if (checkpoint / "policy").is_dir() else checkpoint
    saved_as = policy_class(kind).SAVED_AS
    if not any((folder / name).exists() for name in saved_as):
        found = sorted(p.name for p in folder.iterdir())[:8]
        shown = given if folder == checkpoint else f"{given}/policy"
        raise ConfigError(
            f"--checkpoint: no {kind} policy in {shown} (policy.kind {kind} saves {' or '.join(saved_as)}; "
            f"found {', '.join(found) or 'nothing'}): is policy.kind the one the checkpoint was trained with?"
        )
    return folder


def remote_checkpoint(uri: str) -> tuple[str, str]:
    """(the run's URI, the checkpoint's name) of RUN/checkpoints/N or RUN/checkpoints/N/policy."""
    from rlsys.data.storage import shown_uri

    parts = urlsplit(uri)
    names = parts.path.rstrip("/").split("/")
    if names[-1] == "policy":
        names.pop()
    if len(names) < 2 or names[-2] != "checkpoints" or not names[-1].isdigit():
        raise ConfigError(
            f"--checkpoint {shown_uri(uri)}: a remote checkpoint is a run's checkpoint folder, RUN/checkpoints/N (e.g. "
            f"{parts.scheme}://bucket/run/checkpoints/000002)"
        )
    return urlunsplit(parts._replace(path="/".join(names[:-2]))), names[-1]


def fetched(uri: str, scratch: Path) -> Path:
    """A remote run's checkpoint, downloaded into `scratch` and verified against its manifest (the replay shards
    it references are not needed to evaluate, and not downloaded)."""
    from rlsys.data.storage import RemoteFolder, fetch_checkpoint, shown_uri

    run_uri, name = remote_checkpoint(uri)
    try:
        return fetch_checkpoint(RemoteFolder(run_uri), name, scratch / "checkpoints" / name, references=False)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--checkpoint {shown_uri(uri)}: not readable ({e})") from None


def results_folder(out: str | None, checkpoint: str | None) -> str | Path:
    """--out, else RUN/evals/N for a checkpoint RUN/checkpoints/N (or its policy/ folder); a URI for a remote one."""
    if out:
        return out if is_remote_uri(out) else Path(out)
    if checkpoint and is_remote_uri(checkpoint):
        run_uri, name = remote_checkpoint(checkpoint)
        parts = urlsplit(run_uri)
        return urlunsplit(parts._replace(path=f"{parts.path}/evals/{name}"))
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


def prepare_remote(uri: str):
    """The remote results folder, refused unless it is empty and writable (a probe file written and deleted)."""
    from rlsys.data.storage import RemoteFolder, shown_uri

    try:
        remote = RemoteFolder(uri)
        if remote.files():
            raise ConfigError(f"results folder {remote.uri} is not empty; choose a new or empty folder with --out")
        probe = ".rlsys-eval-write-check"
        remote.write_bytes(probe, b"")
        remote.delete(probe)
    except (OSError, ValueError) as e:
        raise ConfigError(f"results folder {shown_uri(uri)} is not writable: {e}") from None
    return remote


def evaluate(cfg, out: Path) -> tuple[dict, list[str]]:
    """Play the evaluation tasks on Ray; write eval.json and the episodes to `out`."""
    import ray

    from rlsys.actors.pool import RunnerPool
    from rlsys.actors.weight_store import WeightStore
    from rlsys.data.shards import ShardWriter
    from rlsys.driver.metrics import summarize_eval
    from rlsys.driver.ray_init import init_ray
    from rlsys.envs.tasks import eval_groups, eval_tasks

    started_ray, dashboard = init_ray(cfg)
    if dashboard:
        print(f"Ray dashboard: http://{dashboard}", flush=True)
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
