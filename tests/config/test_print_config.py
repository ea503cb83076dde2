"""`rlsys-train --print-config CONFIG [overrides]`: the whole resolved config, printed, and nothing else done."""

import os
import subprocess
import sys

import yaml

from rlsys.config import REDACTED, load_config, to_dict

# runs the CLI, then fails when anything imported Ray (nothing may start it)
RUN_CLI = (
    "import sys; from rlsys.cli.train import main; rc = main(sys.argv[1:]); assert 'ray' not in sys.modules; "
    "sys.exit(rc)"
)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def print_config(cwd, *args, env=None):
    env = {**os.environ, "PYTHONPATH": REPO, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", RUN_CLI, "--print-config", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_print_config_shows_every_key_with_defaults_and_writes_nothing(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump({"extends": "base.yaml", "env": {"android": {"emulator_args": ["${env:RLSYS_ARG}"]}}})
    )
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({"run": {"name": "qs"}, "learner": {"lr": 0.5}}))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = print_config(
        cwd,
        str(config),
        "run.iterations=7",
        "metrics.wandb_api_key=sk-literal",
        env={"RLSYS_ARG": "resolved-value"},
    )
    assert proc.returncode == 0, proc.stderr
    printed = yaml.safe_load(proc.stdout)
    expected = to_dict(load_config(None, data={"run": {"name": "qs", "iterations": 7}, "learner": {"lr": 0.5}}))
    expected["metrics"]["wandb_api_key"] = REDACTED
    expected["env"]["android"]["emulator_args"] = ["${env:RLSYS_ARG}"]
    assert printed == expected  # every key, defaults filled in, in schema order
    assert list(printed) == list(expected)
    assert "sk-literal" not in proc.stdout and "resolved-value" not in proc.stdout
    assert list(cwd.iterdir()) == [] and not (tmp_path / "runs").exists()


def test_print_config_names_a_bad_key(tmp_path):
    proc = print_config(tmp_path, "quickstart", "learner.lr_rate=1")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "unknown config key 'learner.lr_rate'; did you mean 'learner.lr'?" in proc.stderr
    proc = print_config(tmp_path, "quickstart", "--config", "quickstart")
    assert proc.returncode == 2 and "leave out --config" in proc.stderr
    assert list(tmp_path.iterdir()) == []
