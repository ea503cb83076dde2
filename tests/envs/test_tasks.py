import json

import pytest
import yaml

from rlsys.config import ConfigError
from rlsys.envs.tasks import TaskSource, check_tasks, eval_groups, eval_tasks
from rlsys.envs.web.miniwob import available_tasks
from tests.conftest import make_config


def write_tasks(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


ROWS = [
    {"web_name": "shop", "id": f"shop--{i}", "ques": f"Find item {i}", "web": "__SHOP__/index.html"} for i in range(3)
] + [{"web_name": "wiki", "id": "wiki--0", "ques": "Read the page", "web": "https://en.wikipedia.org/"}]


def web_tasks(tmp_path, **tasks):
    file = write_tasks(tmp_path / "tasks.jsonl", ROWS)
    values = {"suite": "webvoyager", "file": file, "url_map": {"__SHOP__": "http://127.0.0.1:7770"}, **tasks}
    return make_config(tmp_path, env__kind="web", **{f"tasks__{k}": v for k, v in values.items()}).tasks


def test_all_miniwob_tasks_and_unknown_names(tmp_path):
    cfg = make_config(tmp_path, tasks__train=["all"]).tasks
    assert TaskSource(cfg).pool == available_tasks() and len(available_tasks()) > 100
    with pytest.raises(ConfigError, match="click-tset"):
        TaskSource(make_config(tmp_path, tasks__train=["click-test", "click-tset"]).tasks)


def test_web_suite_draws_copies_in_order_and_resumes(tmp_path):
    cfg = web_tasks(tmp_path, sampling="sequential")
    source = TaskSource(cfg)
    drawn = [source.next() for _ in range(5)]
    assert [t.id for t in drawn] == ["shop--0", "shop--1", "shop--2", "wiki--0", "shop--0"]
    assert drawn[0].start == "http://127.0.0.1:7770/index.html"
    drawn[0].meta["touched"] = True  # a runner may annotate its task; the pool stays clean
    assert source.pool[0].meta == {"web_name": "shop"}
    random_source = TaskSource(web_tasks(tmp_path))
    [random_source.next() for _ in range(3)]
    state = random_source.state_dict()
    expected = [random_source.next().id for _ in range(6)]
    resumed = TaskSource(web_tasks(tmp_path))
    resumed.load_state_dict(state)
    assert [resumed.next().id for _ in range(6)] == expected


def test_web_eval_tasks_come_from_the_eval_file_in_order(tmp_path):
    eval_file = write_tasks(tmp_path / "eval.jsonl", ROWS[2:])
    tasks = eval_tasks(web_tasks(tmp_path, eval_file=eval_file), 3)
    assert [t.id for t in tasks] == ["shop--2", "wiki--0", "shop--2"] and {t.split for t in tasks} == {"eval"}
    assert eval_groups(tasks) == ["shop", "wiki"]


def test_suite_env_mismatch_and_bad_files_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="env.kind = 'web'"):
        check_tasks(web_tasks(tmp_path), "miniwob")
    with pytest.raises(ConfigError, match="needs tasks.file"):
        check_tasks(make_config(tmp_path, env__kind="web", tasks__suite="webvoyager").tasks, "web")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[3]) + "\n{not json\n")
    with pytest.raises(ConfigError, match=r"bad.jsonl:2"):
        check_tasks(web_tasks(tmp_path, file=str(bad)), "web")
    with pytest.raises(ConfigError, match="env.action_space = 'element'"):
        make_config(tmp_path, env__action_space="pae")


def test_cli_reports_a_bad_task_file_before_ray_starts(tmp_path, capsys):
    from rlsys.cli.train import main

    # in-process: once a test session has started Ray, the driver reaps child processes itself and
    # a subprocess's exit status can no longer be read
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"web_name": "x", "id": "x--0", "ques": "", "web": "https://x.org"}) + "\n")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"env": {"kind": "web"}, "tasks": {"suite": "webvoyager", "file": str(bad)}}))
    assert main(["--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:1" in err and "ques" in err


# what TaskSource drew before rollout groups existed, seed 7: a group size of 1 must keep drawing exactly these
MINIWOB_SEED_7 = ["click-tab#993908", "click-test-2#414002", "click-test-2#75954", "click-test-2#383452"]
SYNTHWEB_SEED_7 = ["synthweb-20", "synthweb-9", "synthweb-25", "synthweb-41"]


def synthweb_tasks(tmp_path):
    mix = {"num_tasks": 50, "max_depth": 2}
    return make_config(tmp_path, env__kind="synthweb", tasks__suite="synthweb", tasks__synthweb=mix).tasks


def test_one_copy_per_draw_keeps_the_draws_of_before(tmp_path):
    miniwob, synthweb = TaskSource(make_config(tmp_path).tasks, seed=7), TaskSource(synthweb_tasks(tmp_path), 7)
    miniwob_drawn, synthweb_drawn = [miniwob.next() for _ in range(4)], [synthweb.next() for _ in range(4)]
    assert [t.id for t in miniwob_drawn] == MINIWOB_SEED_7 and [t.id for t in synthweb_drawn] == SYNTHWEB_SEED_7
    assert not any("rollout_group" in t.meta or "group_size" in t.meta for t in miniwob_drawn + synthweb_drawn)


def test_groups_issue_each_draw_several_times_from_the_same_start(tmp_path):
    source = TaskSource(make_config(tmp_path).tasks, seed=7, group_size=3)
    issued = [source.next() for _ in range(12)]
    # the same tasks and seeds as single draws, each three times in a row
    assert [t.id for t in issued] == [name for name in MINIWOB_SEED_7 for _ in range(3)]
    assert [t.meta["seed"] for t in issued] == [int(name.split("#")[1]) for name in MINIWOB_SEED_7 for _ in range(3)]
    assert [t.meta["rollout_group"] for t in issued] == [str(i) for i in range(4) for _ in range(3)]
    assert {t.meta["group_size"] for t in issued} == {3} and source.drawn == 4
    issued[0].meta["touched"] = True  # each copy is its own task
    assert "touched" not in issued[1].meta
    synthweb = TaskSource(synthweb_tasks(tmp_path), 7, group_size=2)
    assert [synthweb.next().id for _ in range(4)] == [SYNTHWEB_SEED_7[0]] * 2 + [SYNTHWEB_SEED_7[1]] * 2


def test_a_resumed_source_starts_a_new_group(tmp_path):
    cfg = make_config(tmp_path).tasks
    source = TaskSource(cfg, seed=7, group_size=3)
    [source.next() for _ in range(4)]  # group 0 whole, then one copy of group 1
    state = source.state_dict()
    resumed = TaskSource(cfg, seed=0, group_size=3)
    resumed.load_state_dict(state)
    issued = [resumed.next() for _ in range(3)]
    # the rest of group 1 was cut with the checkpoint; group 2 comes whole, with a new id
    assert [t.id for t in issued] == [MINIWOB_SEED_7[2]] * 3
    assert [t.meta["rollout_group"] for t in issued] == ["2"] * 3
