"""`rlsys-eval`: where results go (next to a run's checkpoint, or --out; never into the model folder), the
results folder checked before any episode, and weightless policies evaluated without a checkpoint."""

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

from rlsys.cli.eval import main as eval_main
from rlsys.cli.train import main as train_main
from rlsys.config import save_config, to_dict
from rlsys.data.shards import read_trajectories
from rlsys.policies import build_policy
from tests.conftest import make_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EPISODES = 4


def sim_config(tmp_path, **overrides):
    """A config file for the simulated env (no browser): fast steps, about half the episodes succeed."""
    sim = {"reset_median_s": 0.01, "step_median_s": 0.01, "step_sigma": 0.0, "reset_sigma": 0.0, "success_prob": 0.5}
    cfg = make_config(
        tmp_path,
        env__kind="sim",
        env__sim=sim,
        runners__resource="browser",
        runners__num=1,
        run__eval_episodes=EPISODES,
        **overrides,
    )
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(to_dict(cfg)))
    return cfg, path


def snapshot(folder):
    """Every file under `folder` with its size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def assert_results(out):
    summary = json.loads((out / "eval.json").read_text())
    assert summary["eval/episodes"] == EPISODES
    assert len(read_trajectories(out / "episodes")) == EPISODES  # the episodes behind the numbers
    return summary


def test_random_policy_is_evaluated_without_a_checkpoint(ray_session, tmp_path, capsys):
    cfg, path = sim_config(tmp_path, policy__kind="random")
    out = tmp_path / "random-eval"
    assert eval_main(["--config", str(path), "--out", str(out)]) == 0
    assert_results(out)
    assert f"results: {out / 'eval.json'}" in capsys.readouterr().out
    assert not cfg.output_dir.exists()  # the config's run folder is not written


def test_train_refuses_a_weightless_policy_with_a_command_that_evaluates_it(ray_session, tmp_path, capsys):
    cfg, path = sim_config(tmp_path)
    assert train_main(["--config", str(path), "policy.kind=random"]) == 2
    err = capsys.readouterr().err
    assert "has no weights to train; evaluate it with: " in err
    command = shlex.split(err.split("evaluate it with: ", 1)[1].strip())
    assert command[0] == "rlsys-eval"
    assert eval_main(command[1:]) == 0  # the command it names works as printed
    assert_results(cfg.output_dir)


def test_a_run_checkpoint_is_only_read_and_results_go_to_the_run(ray_session, tmp_path):
    cfg, path = sim_config(tmp_path)
    run = cfg.output_dir
    ckpt = run / "checkpoints" / "000003"
    build_policy(cfg.policy).save_pretrained(ckpt / "policy")
    save_config(to_dict(cfg), cfg, run / "config.yaml")
    before = snapshot(ckpt)
    assert eval_main(["--config", str(path), "--checkpoint", str(ckpt)]) == 0
    assert snapshot(ckpt) == before
    summary = assert_results(run / "evals" / "000003")
    assert not (run / "eval").exists()  # the trainer's own evaluation episodes live there
    # the same results folder again (here through the policy/ folder): refused, and what is there is kept
    assert eval_main(["--config", str(path), "--checkpoint", str(ckpt / "policy")]) == 2
    assert json.loads((run / "evals" / "000003" / "eval.json").read_text()) == summary


LORA = {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0}
# Every policy kind a test can train on CPU, as a config's `policy` section (tiny sizes: make_config's) and what
# the env must speak for it; causal_lm once more with LoRA, saved as an adapter beside its base (as vlm saves it).
TRAINABLE_KINDS = {
    "element_pointer": {},
    "learned_pointer": {},
    "tiny_t5": {},
    "autoui": {"policy__image_feature_dim": 16, "policy__image_size": 32, "env__action_space": "coords"},
    "causal_lm": {"policy__d_model": 64, "policy__num_layers": 1},  # its heads are 64 wide
    "causal_lm-lora": {"policy__d_model": 64, "policy__num_layers": 1, "policy__lora": LORA},
    "vlm": {"policy__num_layers": 1},
}


@pytest.mark.parametrize("kind", TRAINABLE_KINDS)
def test_a_checkpoint_of_every_policy_kind_is_evaluated(ray_session, tmp_path, kind):
    """What the trainer writes into RUN/checkpoints/N/policy (the policy's save_pretrained), evaluated as the README
    says; a checkpoint of another kind is refused before Ray starts, naming what it holds."""
    cfg, path = sim_config(tmp_path, policy__kind=kind.split("-")[0], policy__max_new_tokens=8, **TRAINABLE_KINDS[kind])
    ckpt = cfg.output_dir / "checkpoints" / "000012"
    build_policy(cfg.policy).save_pretrained(ckpt / "policy")
    assert eval_main(["--config", str(path), "--checkpoint", str(ckpt)]) == 0
    assert_results(cfg.output_dir / "evals" / "000012")


def test_a_checkpoint_of_another_kind_is_refused_naming_what_it_holds(tmp_path, capsys):
    cfg, path = sim_config(tmp_path, policy__kind="element_pointer")
    ckpt = cfg.output_dir / "checkpoints" / "000004"
    build_policy(cfg.policy).save_pretrained(ckpt / "policy")
    assert eval_main(["--config", str(path), "--checkpoint", str(ckpt), "policy.kind=tiny_t5"]) == 2
    assert not (cfg.output_dir / "evals").exists()
    assert capsys.readouterr().err.strip().splitlines() == [
        f"config error: --checkpoint: no tiny_t5 policy in {ckpt}/policy (policy.kind tiny_t5 saves config.json; "
        "found element_pointer.json, element_pointer.pt): is policy.kind the one the checkpoint was trained with?"
    ]


def test_a_model_folder_needs_out_and_is_never_written(ray_session, tmp_path, capsys):
    cfg, path = sim_config(tmp_path)
    model = tmp_path / "model"
    build_policy(cfg.policy).save_pretrained(model)
    before = snapshot(model)
    assert eval_main(["--config", str(path), "--checkpoint", str(model)]) == 2
    assert "--out DIR is needed" in capsys.readouterr().err
    assert eval_main(["--config", str(path), f"policy.path={model}"]) == 2  # policy.path: the same
    out = tmp_path / "out"
    assert eval_main(["--config", str(path), "--checkpoint", str(model), "--out", str(out)]) == 0
    assert_results(out)
    assert snapshot(model) == before


# runs the CLI, then fails when anything imported Ray: no episode may be played
RUN_EVAL = (
    "import sys; from rlsys.cli.eval import main; rc = main(sys.argv[1:]); assert 'ray' not in sys.modules; "
    "sys.exit(rc)"
)


def run_eval(*args, prefix=()):
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.run([*prefix, sys.executable, "-c", RUN_EVAL, *args], env=env, capture_output=True, text=True)


def test_an_unusable_results_folder_is_refused_before_ray_starts(tmp_path):
    _, path = sim_config(tmp_path, policy__kind="random")
    a_file = tmp_path / "a-file"
    a_file.write_text("kept")
    proc = run_eval("--config", str(path), "--out", str(a_file / "results"))
    assert proc.returncode == 2 and f"results folder {a_file / 'results'} is not writable" in proc.stderr
    proc = run_eval("--config", str(path), "--out", str(tmp_path))  # not empty
    assert proc.returncode == 2 and "is not empty" in proc.stderr
    assert a_file.read_text() == "kept"


def test_a_read_only_results_folder_is_refused_before_ray_starts(tmp_path):
    """A read-only bind mount (tests run as root, for whom permission bits do not stop a write)."""
    unshare = shutil.which("unshare")
    if not unshare or subprocess.run([unshare, "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("no user and mount namespaces here (unshare -rm) for a read-only bind mount")
    _, path = sim_config(tmp_path, policy__kind="random")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    mount = f'mount --bind {read_only} {read_only} && mount -o remount,ro,bind {read_only} && exec "$@"'
    proc = run_eval("--config", str(path), "--out", str(read_only), prefix=(unshare, "-rm", "sh", "-c", mount, "sh"))
    assert proc.returncode == 2, proc.stderr
    assert f"results folder {read_only} is not writable: Read-only file system" in proc.stderr
