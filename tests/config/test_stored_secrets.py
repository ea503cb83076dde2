"""Stored configs (config.yaml, wandb) keep `${env:...}` references as references, at any depth."""

import json

import yaml

from rlsys.config import REDACTED, load_config, redacted_dict, save_config, unresolved_dict


def test_env_references_in_lists_stay_references_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSYS_TEST_SECRET", "sk-in-a-list")
    data = {
        "env": {"android": {"emulator_args": ["-gpu", "host", "-token", "${env:RLSYS_TEST_SECRET}"]}},
        "tasks": {"url_map": {"__SITE__": "https://u:${env:RLSYS_TEST_SECRET}@example.org"}},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg = load_config(path)
    assert cfg.env.android.emulator_args[-1] == "sk-in-a-list"
    save_config(unresolved_dict(path), cfg, tmp_path / "out.yaml")
    text = (tmp_path / "out.yaml").read_text()
    assert "sk-in-a-list" not in text
    saved = yaml.safe_load(text)
    assert saved["env"]["android"]["emulator_args"] == ["-gpu", "host", "-token", "${env:RLSYS_TEST_SECRET}"]
    assert saved["tasks"]["url_map"]["__SITE__"] == "https://u:${env:RLSYS_TEST_SECRET}@example.org"


def test_redaction_reaches_into_lists_and_keeps_paths():
    raw = {
        "a": [{"api_key": "literal"}, {"name": "x"}],
        "password": ["p1", "p2"],
        "token": ["${env:T}"],
        "env": {"android": {"console_token_file": "~/.emulator_console_auth_token"}},
    }
    out = redacted_dict(raw)
    assert out["a"] == [{"api_key": REDACTED}, {"name": "x"}]
    assert out["password"] == [REDACTED, REDACTED] and out["token"] == ["${env:T}"]
    assert out["env"]["android"]["console_token_file"] == "~/.emulator_console_auth_token"


def test_metrics_logger_gives_wandb_the_stored_config(tmp_path, monkeypatch):
    """wandb gets the run folder's config.yaml (references kept), not the resolved config."""
    import wandb

    from rlsys.metrics import MetricsLogger

    monkeypatch.setenv("RLSYS_TEST_SECRET", "sk-for-wandb")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"env": {"android": {"emulator_args": ["${env:RLSYS_TEST_SECRET}"]}}}))
    cfg = load_config(path, ["metrics.wandb=true", "metrics.wandb_mode=disabled", "metrics.progress=false"])
    save_config(unresolved_dict(path), cfg, tmp_path / "config.yaml")
    seen = {}
    real_init = wandb.init

    def init(**kwargs):
        seen.update(kwargs["config"])
        return real_init(**kwargs)

    monkeypatch.setattr(wandb, "init", init)
    resolved = redacted_dict(json.loads(json.dumps(__import__("dataclasses").asdict(cfg))))
    logger = MetricsLogger(cfg, tmp_path, resolved, total=1)
    logger.close()
    assert seen["env"]["android"]["emulator_args"] == ["${env:RLSYS_TEST_SECRET}"]
    assert "sk-for-wandb" not in json.dumps(seen)
