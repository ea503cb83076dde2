"""Stored configs (config.yaml, wandb) keep `${env:...}` references as references, at any depth, and redact
exactly the fields the schema declares secret."""

import json
import os

import pytest
import yaml

from rlsys.config import (
    REDACTED,
    ConfigError,
    load_config,
    redacted_dict,
    save_config,
    secret_paths,
    to_dict,
    unresolved_dict,
)
from rlsys.config.loader import deep_merge, literal_secrets, stored_dict
from rlsys.config.run_dir import resume_changes, saved_config


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


def test_redaction_reaches_into_lists_and_mappings_of_a_secret_field():
    raw = {
        "metrics": {"wandb_api_key": ["p1", "${env:T}", {"inner": "p2"}], "wandb_project": "p"},
        "unknown": {"api_key": "not in the schema, so not a declared secret"},
    }
    out = redacted_dict(raw)
    assert out["metrics"] == {"wandb_api_key": [REDACTED, "${env:T}", {"inner": REDACTED}], "wandb_project": "p"}
    assert out["unknown"] == raw["unknown"]


def _set(data: dict, dotted: str, value) -> dict:
    *sections, name = dotted.split(".")
    node = data
    for section in sections:
        node = node.setdefault(section, {})
    node[name] = value
    return data


def _get(data: dict, dotted: str):
    for part in dotted.split("."):
        data = data[part]
    return data


def test_every_declared_secret_field_is_redacted_and_references_kept(tmp_path, monkeypatch):
    assert "metrics.wandb_api_key" in secret_paths()
    monkeypatch.setenv("RLSYS_TEST_SECRET", "sk-from-env")
    for key in sorted(secret_paths()):
        literal = _set({}, key, "sk-literal-value")
        save_config(literal, load_config(None, data=literal), tmp_path / "lit.yaml")
        text = (tmp_path / "lit.yaml").read_text()
        assert "sk-literal-value" not in text and _get(yaml.safe_load(text), key) == REDACTED, key

        ref = _set({}, key, "${env:RLSYS_TEST_SECRET}")
        save_config(ref, load_config(None, data=ref), tmp_path / "ref.yaml")
        text = (tmp_path / "ref.yaml").read_text()
        assert "sk-from-env" not in text and _get(yaml.safe_load(text), key) == "${env:RLSYS_TEST_SECRET}", key


# fields and free-form keys whose names look like secrets but are not declared secret
SECRET_LOOKING = {
    "env": {
        "android": {
            "console_token_file": "/home/me/.emulator_console_auth_token",
            "emulator_env": {"KEY_STORE": "/keys/debug.keystore", "ADB_TOKEN_PATH": "/tmp/adb_token"},
        }
    },
    "tasks": {"url_map": {"__key_site__": "http://127.0.0.1:7770", "__token__": "http://127.0.0.1:7780"}},
    "policy": {"api": {"auth_env": "MY_API_KEY"}},
}


def test_secret_looking_names_round_trip_and_a_resume_reads_them_back(tmp_path):
    cfg = load_config(None, data=SECRET_LOOKING)
    run = tmp_path / "run"
    run.mkdir()
    save_config(SECRET_LOOKING, cfg, run / "config.yaml")
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert REDACTED not in (run / "config.yaml").read_text()
    for section, values in SECRET_LOOKING.items():
        assert deep_merge(saved[section], values) == saved[section], section  # every value stored as written
    # what `--resume RUN` does with the run's config.yaml: the values come back, and nothing reads as changed
    raw = unresolved_dict(run / "config.yaml")
    resumed = load_config(run / "config.yaml")
    assert resumed.env.android.console_token_file == "/home/me/.emulator_console_auth_token"
    assert resumed.env.android.emulator_env == SECRET_LOOKING["env"]["android"]["emulator_env"]
    assert resumed.tasks.url_map == SECRET_LOOKING["tasks"]["url_map"]
    assert resume_changes(saved_config(run), stored_dict(raw, resumed)) == []


def test_a_redacted_secret_read_back_is_refused_naming_the_key(tmp_path):
    data = {"metrics": {"wandb_api_key": "pasted-by-mistake"}}
    run = tmp_path / "run"
    run.mkdir()
    save_config(data, load_config(None, data=data), run / "config.yaml")
    with pytest.raises(ConfigError, match=r"metrics\.wandb_api_key: holds '\*\*\*redacted\*\*\*'"):
        load_config(run / "config.yaml")
    resumed = load_config(run / "config.yaml", ["metrics.wandb_api_key=${env:HOME}"])
    assert resumed.metrics.wandb_api_key == os.environ["HOME"]


def test_literal_secret_warnings_follow_the_schema():
    overrides = [
        "metrics.wandb_api_key=sk-literal",
        "metrics.wandb_api_key=${env:WANDB_API_KEY}",
        "metrics={wandb_api_key: sk-in-a-section}",
        "env.android.console_token_file=/home/me/token",
        "tasks.url_map={__key_site__: http://127.0.0.1:7770}",
        "policy.api.auth_env=MY_API_KEY",
    ]
    assert literal_secrets(overrides) == ["metrics.wandb_api_key", "metrics"]


def test_metrics_logger_gives_wandb_the_stored_config(tmp_path, monkeypatch):
    """wandb gets the run folder's config.yaml (references kept), not the resolved config the trainer holds."""
    from rlsys.driver.metrics import MetricsLogger

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
