"""Values no run can use are config errors naming the key, before anything starts."""

import json

import pytest

from rlsys.config import ConfigError, load_config
from rlsys.config.errors import MAX_MESSAGE


@pytest.mark.parametrize(
    "override",
    [
        "runners.num=0",
        "replay.capacity=-1",
        "replay.max_bytes=0",
        "run.rollout_size=0",
        "env.max_steps=0",
        "run.keep_checkpoints=0",
        "run.episode_timeout_s=0",
        "run.iterations=-1",
        "run.max_env_steps=0",
        "env.step_timeout_s=-1",
        "env.history=-1",
        "learner.updates_per_iteration=-1",
        "learner.lr=0",
        "policy.d_model=0",
        "policy.max_new_tokens=0",
        "ray.dashboard_port=70000",
    ],
)
def test_nonsensical_numbers_are_config_errors_naming_the_key(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [override])


@pytest.mark.parametrize(
    "override",
    ["learner.lr=1e400", "learner.lr=.inf", "learner.lr=.nan", "env.step_timeout_s=-.inf", f"learner.lr={10**400}"],
)
def test_every_float_is_finite(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=f"config key '{key}' must be a finite number"):
        load_config(None, [override])


@pytest.mark.parametrize(
    "override, why",
    [
        ("run.rollout_size=1000000000000", "held in the driver's memory"),
        ("run.eval_episodes=1000000000000", "held in the driver's memory"),
        ("runners.num=100000", "its own browser"),
        ("env.viewport=[100000,100000]", "4 bytes in each runner"),
        ("env.viewport=[1024,100000]", "4 bytes in each runner"),
        ("env.sim.num_elements=1000000000", "every observation"),
    ],
)
def test_sizes_that_would_exhaust_the_machine_say_why(override, why):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + ".* at most") as e:
        load_config(None, [override])
    assert why in str(e.value)


def test_the_cli_refuses_an_infinite_learning_rate_before_ray_starts(capsys):
    from rlsys.cli.train import main

    assert main(["--config", "quickstart", "learner.lr=1e400"]) == 2
    assert capsys.readouterr().err == "config error: config key 'learner.lr' must be a finite number, got '1e400'\n"


def test_large_but_real_sizes_still_load():
    cfg = load_config(
        None,
        [
            "env.viewport=[7680,4320]",
            "runners.num=10000",
            "run.rollout_size=100000",
            "run.eval_episodes=100000",
            "learner.lr=1e-300",
            "run.episode_timeout_s=1e300",
        ],
    )
    assert cfg.env.viewport == [7680, 4320] and cfg.runners.num == 10000


def test_sensible_edge_values_still_load():
    cfg = load_config(None, ["run.eval_every=0", "run.checkpoint_every=0", "run.iterations=0", "runners.num_cpus=0"])
    assert cfg.run.iterations == 0


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", ".", "", "  ", "a\\b"])
def test_run_names_are_plain_names(name):
    with pytest.raises(ConfigError, match="run.name"):
        load_config(None, [f"run.name={name}"])


def test_plain_run_names_load():
    assert load_config(None, ["run.name=my-run_2.v1"]).run.name == "my-run_2.v1"


def test_a_task_longer_than_the_limit_names_the_file_and_task(tmp_path):
    from rlsys.envs.tasks import check_tasks
    from tests.conftest import make_config

    rows = [
        {"web_name": "Site", "id": "Site--0", "ques": "find the price", "web": "https://example.org"},
        {"web_name": "Site", "id": "Site--1", "ques": "y" * 50_000, "web": "https://example.org"},
    ]
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = make_config(tmp_path, env__kind="web", tasks__suite="webvoyager", tasks__file=str(path)).tasks
    with pytest.raises(ConfigError) as e:
        check_tasks(tasks, "web")
    assert "tasks.jsonl" in str(e.value) and "Site--1" in str(e.value) and "instruction" in str(e.value)
    assert len(str(e.value)) <= MAX_MESSAGE


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["run.group_size=0"], r"run\.group_size must be at least 1, got 0"),
        (["run.rollout_size=6", "run.group_size=4"], r"run\.rollout_size \(6\) .* multiple of run\.group_size \(4\)"),
        (["learner.algorithm=grpo"], r"run\.group_size to at least 2 \(got 1\)"),
        (["learner.sample_trajectories=2", "run.group_size=4", "run.rollout_size=8"], r"sample_trajectories \(2\)"),
        (["replay.capacity=3", "run.group_size=4", "run.rollout_size=8"], r"replay\.capacity \(3\) .* run\.group_size"),
        (["run.broken_groups=mend"], r"run\.broken_groups"),
    ],
)
def test_group_settings_that_cannot_work_are_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_groups_that_fit_load():
    sync = load_config(None, ["run.rollout_size=8", "run.group_size=4", "learner.algorithm=grpo"])
    assert (sync.run.group_size, sync.run.broken_groups) == (4, "drop")
    # async mode updates after rollout_size new trajectories, whole groups or not: any size goes
    assert load_config(None, ["run.mode=async", "run.rollout_size=6", "run.group_size=4"]).run.group_size == 4
    assert load_config(None, []).run.group_size == 1
