"""Env settings that every runner would fail on (each one replaced and failing again) are config errors from
`rlsys-train` and `rlsys-eval` before Ray starts, found by the code the env itself runs when it is built."""

import pytest

from rlsys.cli.eval import main as evaluate
from rlsys.cli.train import main as train
from rlsys.config import ConfigError, load_config
from rlsys.core.env import EnvSetupError
from rlsys.envs.settings import check_env_settings
from rlsys.envs.web.webenv import WebEnv

BAD = [
    (
        ["env.allowed_origins=[http://a:99999]"],
        "config error: env.allowed_origins: 'http://a:99999' is not an origin (scheme://host[:port] with scheme "
        "http or https)\n",
    ),
    (
        ["env.allowed_origins=[https://example.org/path]"],
        "config error: env.allowed_origins: 'https://example.org/path' is not an origin",
    ),
    (["env.search_engine=www.google.com"], "config error: env.search_engine: 'www.google.com' is not"),
    (["env.viewport=[120,120]"], "config error: env.viewport [120, 120] must hold MiniWoB++'s 160x210 task area\n"),
]
IDS = ["port beyond 65535", "a path", "no scheme", "viewport"]


@pytest.mark.parametrize("overrides, error", BAD, ids=IDS)
def test_train_refuses_what_every_runner_would_fail_on(overrides, error, tmp_path, capsys):
    assert train(["--config", "quickstart", f"run.output_dir={tmp_path / 'run'}", *overrides]) == 2
    assert capsys.readouterr().err.startswith(error)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("overrides, error", BAD, ids=IDS)
def test_eval_refuses_what_every_runner_would_fail_on(overrides, error, tmp_path, capsys):
    out = tmp_path / "results"
    assert evaluate(["--config", "quickstart", "--out", str(out), "policy.kind=random", *overrides]) == 2
    assert capsys.readouterr().err.startswith(error)
    assert not out.exists()


def test_the_env_refuses_the_same_settings_with_the_same_words():
    cfg = load_config("quickstart", ["env.allowed_origins=[http://a:99999]"])
    with pytest.raises(ConfigError) as checked:
        check_env_settings(cfg.env)
    with pytest.raises(EnvSetupError) as built:
        WebEnv(cfg.env)  # refused before any browser starts
    assert str(checked.value) == str(built.value)


def test_settings_the_env_takes_pass():
    origins = "[http://127.0.0.1:7770, 'http://[::1]:8080', https://example.org, 'data:']"
    check_env_settings(load_config("quickstart", [f"env.allowed_origins={origins}"]).env)
    check_env_settings(load_config("quickstart", ["env.search_engine="]).env)
    check_env_settings(load_config("quickstart", ["env.viewport=[160,210]"]).env)
    check_env_settings(load_config("quickstart", ["env.kind=sim", "env.viewport=[10,10]"]).env)
