"""Config and task files that are not what they look like: bytes that are not UTF-8, keys written twice. Each is
one line of config error naming the file and where in it, from `rlsys-train` before Ray starts."""

import json

import pytest

from rlsys.cli.train import main as train
from rlsys.config import ConfigError, load_config
from tests.support.train_command import run_train

LATIN1 = "run:\n  name: caf\xe9\n".encode("latin-1")  # byte 16 (0xe9) on line 2 is not UTF-8


def test_a_config_file_that_is_not_utf8_names_the_file_line_and_byte(tmp_path, capsys):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(LATIN1)
    assert train(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"config error: {path}:2: not UTF-8 text: byte 16 is 0xe9") and err.count("\n") == 1
    assert train(["--print-config", str(path)]) == 2
    assert "byte 16" in capsys.readouterr().err


def test_a_parent_config_that_is_not_utf8_is_named(tmp_path):
    (tmp_path / "parent.yaml").write_bytes(b"# \xff\xfe\nrun:\n  iterations: 3\n")
    child = tmp_path / "child.yaml"
    child.write_text("extends: parent.yaml\n")
    with pytest.raises(ConfigError, match=r"parent\.yaml:1: not UTF-8 text: byte 2 is 0xff"):
        load_config(child)


def test_a_task_file_that_is_not_utf8_names_the_file_line_and_byte(tmp_path, capsys):
    good = json.dumps({"web_name": "Site", "id": "0", "ques": "find the price", "web": "https://example.org"})
    bad = '{"web_name": "Site", "id": "1", "ques": "caf\xe9", "web": "https://example.org"}'
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(f"{good}\n{bad}\n".encode("latin-1"))
    config = tmp_path / "web.yaml"
    config.write_text(json.dumps({"env": {"kind": "web"}, "tasks": {"suite": "webvoyager", "file": str(path)}}))
    assert train(["--config", str(config), f"run.output_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    offset = len(good) + 1 + bad.index("\xe9")
    assert err.startswith(f"config error: {path}:2: not UTF-8 text: byte {offset} is 0xe9"), err
    assert err.count("\n") == 1


def test_a_key_given_twice_names_the_key_and_both_lines(tmp_path, capsys):
    path = tmp_path / "twice.yaml"
    path.write_text("learner:\n  lr: 0.001\n  batch_size: 8\n  lr: 0.1\n")
    assert train(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"config error: {path}: key 'lr' is given twice in one mapping (lines 2 and 4); keep one of them\n"
    assert train(["--print-config", str(path)]) == 2
    assert "'lr' is given twice" in capsys.readouterr().err


def test_a_section_given_twice_and_a_key_twice_in_a_list_or_override_are_refused(tmp_path):
    path = tmp_path / "sections.yaml"
    path.write_text("run:\n  iterations: 3\nlearner:\n  lr: 0.1\nrun:\n  rollout_size: 4\n")
    with pytest.raises(ConfigError, match=r"key 'run' is given twice in one mapping \(lines 1 and 5\)"):
        load_config(path)
    with pytest.raises(ConfigError, match="'url' is given twice"):
        load_config(None, ["tasks.url_map={url: a, url: b}"])


def test_a_merge_key_may_still_override_what_it_merges(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text("env:\n  android:\n    emulator_env:\n      <<: {A: '1', B: '2'}\n      B: '3'\n")
    assert load_config(path).env.android.emulator_env == {"A": "1", "B": "3"}


def test_the_cli_exits_2_without_starting_ray(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(LATIN1)
    proc = run_train("--config", str(path), timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("config error:") and "Traceback" not in proc.stderr
    assert "Ray" not in proc.stdout + proc.stderr
