"""Stored configs (config.yaml, wandb) keep `${env:...}` references as references, at any depth."""

import json

import yaml

from rlsys.config import REDACTED, load_config, redacted_dict, save_config, to_dict, unresolved_dict


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
    """wandb gets the run folder's config.yaml (references kept), not the resolved config the trainer holds."""
    from rlsys.metrics import MetricsLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("RLSYS_TEST_SECRET", "sk-for-wandb")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"env": {"android": {"emulator_args": ["${env:RLSYS_TEST_SECRET}"]}}}))
    cfg = load_config(path, ["metrics.wandb=true", "metrics.progress=false"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(unresolved_dict(path), cfg, run_dir / "config.yaml")
    logger = MetricsLogger(cfg, run_dir, redacted_dict(to_dict(cfg)), total=1)
    try:  # the config the wandb run holds and uploads (its offline record file is written asynchronously)
        sent = json.dumps(dict(logger._wandb.config))
    finally:
        logger.close()
    assert "sk-for-wandb" not in sent and "${env:RLSYS_TEST_SECRET}" in sent
