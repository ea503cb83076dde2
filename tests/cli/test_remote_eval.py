"""`rlsys-eval` of a remote run's checkpoint and with remote results, and what `rlsys-train` says about a remote
run, against a real S3-protocol server on 127.0.0.1: the checkpoint is downloaded to a temporary folder and
verified against its manifest, the results are published to the run (eval.json last), every bad input is
refused before any episode, and no temporary copy is left behind."""

import json
import os
import shlex
import signal
import tempfile
import time

import pytest
import torch
import yaml

from rlsys.cli.eval import main as eval_main
from rlsys.cli.train import main as train_main
from rlsys.config import to_dict
from rlsys.data import checkpoint
from rlsys.data.shards import read_trajectories, write_shard
from rlsys.data.storage import RemoteFolder, RunMirror
from rlsys.policies import build_policy
from tests.cli.test_eval_cli import EPISODES, run_eval, sim_config
from tests.support.s3_server import SECRET_KEY
from tests.support.train_command import start_train


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
    """The folder this process's temporary folders are made in, to see what rlsys leaves there."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def left_in(folder):
    return [p.name for p in folder.iterdir() if p.name.startswith("rlsys-")]


def published_run(cfg, tmp_path, uri):
    """A run published to `uri` by the trainer's own mirror: checkpoints 1 and 2 with a real policy, whose replay
    buffer references a shard of the run (an evaluation has no use for it)."""
    run = tmp_path / "published"
    shard = run / "trajectories" / "shard-000000.parquet"
    shard.parent.mkdir(parents=True)
    write_shard(shard, [])

    def fill(folder):
        build_policy(cfg.policy).save_pretrained(folder / "policy")
        torch.save({"algorithm": {}}, folder / "learner.pt")
        write_shard(folder / "replay.parquet", [])
        checkpoint.write_json(folder / "state.json", {"iteration": 2, "replay": {}})
        return {"trajectories/shard-000000.parquet": shard.stat().st_size}

    mirror = RunMirror(run, RemoteFolder(uri))
    for i in (1, 2):
        mirror.publish_checkpoint(checkpoint.write(run, i, fill, keep=3), keep=3)
    return RemoteFolder(uri)


def test_a_remote_checkpoint_is_evaluated_and_the_results_published_to_the_run(ray_session, s3, tmp_path, temp_dir,
                                                                              capsys):  # fmt: skip
    cfg, path = sim_config(tmp_path)
    remote = published_run(cfg, tmp_path, "s3://bucket/evaluated")
    before = {rel: remote.read_bytes(rel) for rel in remote.files()}
    assert eval_main(["--config", str(path), "--checkpoint", "s3://bucket/evaluated/checkpoints/000002"]) == 0
    assert "results: s3://bucket/evaluated/evals/000002/eval.json" in capsys.readouterr().out
    results = tmp_path / "results"
    for rel in remote.files("evals/000002"):
        remote.download(f"evals/000002/{rel}", results / rel)
    assert json.loads((results / "eval.json").read_text())["eval/episodes"] == EPISODES
    assert len(read_trajectories(results / "episodes")) == EPISODES
    assert {rel: remote.read_bytes(rel) for rel in before} == before  # the run is only read
    assert left_in(temp_dir) == []  # the checkpoint's copy and the results' staging are gone


def test_a_bad_remote_checkpoint_or_results_folder_is_refused_before_ray_starts(s3, tmp_path):
    cfg, path = sim_config(tmp_path)
    remote = published_run(cfg, tmp_path, "s3://bucket/refused")
    run = "s3://bucket/refused"

    def refused(*args):
        proc = run_eval("--config", str(path), *args)  # fails when anything imported Ray
        assert proc.returncode == 2, proc.stderr
        assert SECRET_KEY not in proc.stderr
        return proc.stderr

    assert f"{run}/checkpoints/000007: not a published checkpoint" in refused(
        "--checkpoint", f"{run}/checkpoints/000007"
    )
    remote.delete("checkpoints/000001/manifest.json")  # its upload stopped before the manifest
    assert f"{run}/checkpoints/000001: not a published checkpoint" in refused(
        "--checkpoint", f"{run}/checkpoints/000001"
    )
    assert "a remote checkpoint is a run's checkpoint folder" in refused("--checkpoint", run)
    for given in (
        f"{run}/checkpoints/000002?secret_key={SECRET_KEY}",
        f"s3://AKIAX:{SECRET_KEY}@bucket/refused/checkpoints/000002",
    ):
        assert "in the URI; credentials come from the environment" in refused("--checkpoint", given)

    remote.write_bytes("evals/000002/eval.json", b"{}")  # evaluated before
    assert f"results folder {run}/evals/000002 is not empty" in refused("--checkpoint", f"{run}/checkpoints/000002")
    assert remote.read_bytes("evals/000002/eval.json") == b"{}"

    weights = "checkpoints/000002/policy/model.safetensors"
    remote.write_bytes(weights, remote.read_bytes(weights)[:-8])  # damaged in the store after it was published
    err = refused("--checkpoint", f"{run}/checkpoints/000002/policy", "--out", str(tmp_path / "out"))
    assert f"checkpoint error: {run}/{weights}: damaged" in err


def test_train_refuses_a_weightless_policy_of_a_remote_run_with_a_command_that_works(ray_session, s3, tmp_path,
                                                                                   capsys):  # fmt: skip
    _, path = sim_config(tmp_path, policy__kind="random")
    assert train_main(["--config", str(path), "run.output_dir=s3://bucket/weightless"]) == 2
    command = shlex.split(capsys.readouterr().err.split("evaluate it with: ", 1)[1].strip())
    assert command[0] == "rlsys-eval"
    assert command[command.index("--out") + 1] == "s3://bucket/weightless"
    assert eval_main(command[1:]) == 0  # the command it names works as printed
    remote = RemoteFolder("s3://bucket/weightless")
    assert json.loads(remote.read_bytes("eval.json"))["eval/episodes"] == EPISODES
    assert any(rel.startswith("episodes/") for rel in remote.files())


def remote_run_config(tmp_path, uri, scratch):
    from tests.driver.test_fault_tolerance import sim_config as run_config

    data = to_dict(run_config(tmp_path, step_s=0.05, max_steps=3, run__iterations=2))
    data["run"] |= {"output_dir": uri, "scratch_dir": str(scratch)}
    path = tmp_path / "remote.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_resume_from_a_uri_leaves_no_temporary_copy_of_the_config(s3, tmp_path, temp_dir, capsys):
    path = remote_run_config(tmp_path, "s3://bucket/resumed", tmp_path / "scratch")
    RemoteFolder("s3://bucket/resumed").upload(path, "config.yaml")
    assert train_main(["--resume", "s3://bucket/resumed", "policy.d_model=64"]) == 2  # a model key: refused
    assert "cannot resume with a different model" in capsys.readouterr().err
    assert left_in(temp_dir) == []
    assert train_main(["--resume", "s3://bucket/missing"]) == 2
    assert left_in(temp_dir) == []
    # nor does the refusal of a weightless policy name that temporary copy in the command it prints
    assert train_main(["--resume", "s3://bucket/resumed", "policy.kind=random"]) == 2
    assert "cannot resume with a different model" in capsys.readouterr().err


def test_a_remote_runs_local_folder_holding_a_run_is_refused_without_a_local_resume_hint(s3, tmp_path, capsys):
    scratch = tmp_path / "scratch"
    (scratch / "checkpoints" / "000001").mkdir(parents=True)
    path = remote_run_config(tmp_path, "s3://bucket/fresh", scratch)
    assert train_main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"run.scratch_dir {scratch}, the local folder of s3://bucket/fresh" in err
    assert f"--resume {scratch}" not in err  # that would continue it as a local run, published nowhere


def test_a_remote_run_stopped_before_the_trainer_exists_names_the_uri_to_resume(s3, tmp_path):
    uri = "s3://bucket/interrupted"
    path = remote_run_config(tmp_path, uri, tmp_path / "scratch")
    log = tmp_path / "train.log"
    proc = start_train("--config", str(path), log=log)
    deadline = time.monotonic() + 120
    while "run folder:" not in log.read_text():  # printed just before the Trainer is built
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=120) == 130, log.read_text()
    text = log.read_text()
    assert f"run folder: {uri} (this machine's copy: {tmp_path / 'scratch'})" in text
    assert f"Continue with: rlsys-train --resume {uri}\n" in text, text
