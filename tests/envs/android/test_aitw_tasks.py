"""Android in the Wild task files (envs/android/tasks.py), their evaluation protocol, and the config rules of
env.kind android (no Ray, no adb)."""

from __future__ import annotations

import pytest

from rlsys.config import ConfigError, TasksConfig, load_config
from rlsys.envs.android.tasks import load_aitw_file
from rlsys.envs.tasks import TaskSource, check_tasks, eval_tasks, load_suite
from rlsys.envs.web.task_files import TaskFileError


def write_lines(path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def numbered(path, n: int, prefix: str) -> str:
    return write_lines(path, [f"{prefix} {i}" for i in range(n)])


QUOTED = 'Search for "best pizza, near me", then open the first result'


def test_aitw_file_lines_become_tasks(tmp_path):
    path = tmp_path / "general_train.txt"
    path.write_text(f"Open the settings\n\n   \n  What's the weather like in Paris?  \nOpen the settings\n{QUOTED}\n\n")
    tasks = load_aitw_file(path, "aitw-general", "train")
    assert [t.instruction for t in tasks] == [
        "Open the settings",
        "What's the weather like in Paris?",
        "Open the settings",
        QUOTED,
    ]
    assert [t.meta for t in tasks] == [{"line": 1}, {"line": 4}, {"line": 5}, {"line": 6}]
    assert [t.id for t in tasks] == [
        "aitw-general/general_train:1",
        "aitw-general/general_train:4",
        "aitw-general/general_train:5",
        "aitw-general/general_train:6",
    ]
    assert {(t.suite, t.split, t.start, t.checks) for t in tasks} == {("aitw-general", "train", "home", None)}

    shop = load_aitw_file(path, "aitw-webshop", "eval")
    assert {(t.suite, t.split, t.start) for t in shop} == {("aitw-webshop", "eval", "browser")}
    assert shop[0].id == "aitw-webshop/general_train:1"

    with pytest.raises(ValueError, match="unknown AitW suite 'aitw-install'"):
        load_aitw_file(path, "aitw-install", "train")


def test_bad_aitw_files_name_the_file_and_line(tmp_path):
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"Open the settings\nSearch for caf\xe9 near me\n")
    with pytest.raises(TaskFileError, match="not UTF-8") as e:
        load_aitw_file(latin1, "aitw-general", "train")
    assert str(e.value).startswith(f"{latin1}:2: ")

    jsonl = tmp_path / "tasks.jsonl"
    jsonl.write_text('Open the settings\n{"web_name": "shop", "id": "shop--0", "ques": "Find a thing"}\n')
    with pytest.raises(TaskFileError, match="looks like JSON") as e:
        load_aitw_file(jsonl, "aitw-general", "train")
    assert str(e.value).startswith(f"{jsonl}:2: ")

    for content in ("", "\n  \n\n"):
        empty = tmp_path / "empty.txt"
        empty.write_text(content)
        with pytest.raises(TaskFileError, match="no instructions") as e:
            load_aitw_file(empty, "aitw-general", "train")
        assert str(e.value).startswith(f"{empty}: ")


def test_evaluation_is_the_first_96_test_instructions_in_file_order(tmp_path):
    train = numbered(tmp_path / "train.txt", 10, "train task")
    test = numbered(tmp_path / "test.txt", 120, "test task")
    cfg = TasksConfig(suite="aitw-general", file=train, eval_file=test)

    tasks = eval_tasks(cfg, 96)
    assert [t.instruction for t in tasks] == [f"test task {i}" for i in range(96)]
    assert [t.meta["line"] for t in tasks] == list(range(1, 97))
    assert {(t.split, t.start) for t in tasks} == {("eval", "home")}
    assert eval_tasks(cfg, 96) == tasks  # the same problems at every evaluation

    short = TasksConfig(suite="aitw-webshop", file=train, eval_file=numbered(tmp_path / "short.txt", 40, "t"))
    repeated = eval_tasks(short, 96)
    assert [t.instruction for t in repeated] == [f"t {i % 40}" for i in range(96)]
    assert {t.start for t in repeated} == {"browser"}

    # without an eval_file, evaluation reads tasks.file
    assert [t.instruction for t in eval_tasks(TasksConfig(suite="aitw-general", file=train), 3)] == [
        "train task 0",
        "train task 1",
        "train task 2",
    ]


def test_training_tasks_come_from_tasks_file(tmp_path):
    train = numbered(tmp_path / "train.txt", 5, "train task")
    test = numbered(tmp_path / "test.txt", 3, "test task")
    cfg = TasksConfig(suite="aitw-general", file=train, eval_file=test, sampling="sequential")
    source = TaskSource(cfg)
    drawn = [source.next() for _ in range(7)]
    assert [t.instruction for t in drawn] == [f"train task {i % 5}" for i in range(7)]
    assert {(t.split, t.start) for t in drawn} == {("train", "home")}
    assert [t.instruction for t in load_suite(cfg, "train")] == [f"train task {i}" for i in range(5)]

    drawn[0].meta["line"] = 99  # a drawn task is a copy
    assert source.pool[0].meta == {"line": 1}

    randomly = TaskSource(TasksConfig(suite="aitw-general", file=train), seed=3)
    picks = [randomly.next().instruction for _ in range(40)]
    assert set(picks) == {f"train task {i}" for i in range(5)}


def test_check_tasks_for_aitw_suites(tmp_path):
    train = numbered(tmp_path / "train.txt", 5, "train task")
    cfg = TasksConfig(suite="aitw-general", file=train)
    check_tasks(cfg, "android")

    with pytest.raises(ConfigError, match="is played by env.kind = 'android', not 'web'"):
        check_tasks(cfg, "web")
    with pytest.raises(ConfigError, match="env.kind = 'android'"):
        check_tasks(TasksConfig(suite="aitw-webshop", file=train), "miniwob")

    with pytest.raises(ConfigError, match="AitW text file") as e:
        check_tasks(TasksConfig(suite="aitw-general"), "android")
    assert "tasks.file" in str(e.value)

    with pytest.raises(ConfigError, match="tasks.eval_file: .*missing.txt does not exist"):
        check_tasks(TasksConfig(suite="aitw-general", file=train, eval_file=str(tmp_path / "missing.txt")), "android")

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff\n")
    with pytest.raises(ConfigError, match=f"{bad}:2: not UTF-8"):
        check_tasks(TasksConfig(suite="aitw-general", file=train, eval_file=str(bad)), "android")


# ---------------------------------------------------------------------------------- config rules


def android_data(tmp_path, env=None, policy=None, **sections) -> dict:
    tasks = tmp_path / "aitw.txt"
    tasks.write_text("Open the settings\n")
    return {
        "env": {"kind": "android", "action_space": "autoui", **(env or {})},
        "tasks": {"suite": "aitw-general", "file": str(tasks)},
        "policy": {"kind": "autoui", **(policy or {})},
        **sections,
    }


def test_android_config_rules(tmp_path):
    cfg = load_config(None, data=android_data(tmp_path))
    assert (cfg.env.kind, cfg.env.action_space, cfg.runners.resource) == ("android", "autoui", "android")
    assert cfg.policy.prompt == "android_autoui"
    assert cfg.env.android.avd == "rlsys_pixel_28" and cfg.env.android.snapshot == "rlsys_home"

    with pytest.raises(ConfigError, match="env.kind = 'android' takes env.action_space autoui or cogagent") as e:
        load_config(None, data=android_data(tmp_path, env={"action_space": "element"}, policy={"kind": "vlm"}))
    assert "got 'element'" in str(e.value)
    with pytest.raises(ConfigError, match="env.kind = 'web' takes env.action_space element, pae or coords"):
        load_config(None, data=android_data(tmp_path, env={"kind": "web"}, policy={"kind": "vlm"}))

    with pytest.raises(ConfigError, match="policy.kind = 'autoui'.*got 'cogagent'"):
        load_config(None, data=android_data(tmp_path, env={"action_space": "cogagent"}))

    assert load_config(None, data={}).runners.resource == "browser"  # miniwob
    custom = load_config(None, data=android_data(tmp_path, runners={"resource": "phone_host"}))
    assert custom.runners.resource == "phone_host"

    api = load_config(None, data=android_data(tmp_path, policy={"kind": "api"}))
    assert api.policy.prompt == "android_autoui"
    vlm = load_config(None, data=android_data(tmp_path, env={"action_space": "cogagent"}, policy={"kind": "vlm"}))
    assert vlm.policy.prompt == "android_cogagent"
    own = load_config(None, data=android_data(tmp_path, policy={"kind": "vlm", "prompt": "my.txt"}))
    assert own.policy.prompt == "my.txt"

    with pytest.raises(ConfigError, match="unknown config key 'env.android.avd_name'; did you mean 'env.android.avd'"):
        load_config(None, data=android_data(tmp_path, env={"android": {"avd_name": "x"}}))
