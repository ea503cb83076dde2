"""The synthetic web suite (env.kind synthweb): observations shaped as a real MiniWoB++ page's in Chromium, a scripted
optimal policy that solves every solvable task and never an impossible one, detours that cost steps, slips at the
configured rate, the same episodes from the same seed, and the exact solve probabilities against played episodes."""

import dataclasses
import random
import re
import threading

import pytest

from rlsys.config import ConfigError, EnvConfig, SynthWebTasksConfig, build, load_config
from rlsys.core.types import Task, task_group
from rlsys.envs import make_env
from rlsys.envs.synthweb import BACK, build_site, make_task, solve_probability, suite_tasks
from rlsys.envs.tasks import TaskSource, eval_tasks, miniwob_task
from rlsys.envs.web.miniwob import MiniWoBEnv
from tests.conftest import make_config

MIX = SynthWebTasksConfig(num_tasks=60, min_depth=1, max_depth=6, impossible=0.2)


def env_config(**synthweb) -> EnvConfig:
    return build(EnvConfig, {"kind": "synthweb", "max_steps": 30, "synthweb": synthweb}, "env")


def right_link(obs, task: Task, page: int) -> int:
    """The element the instruction names for this page (what the scripted policy clicks), found by its text."""
    name = build_site(task.meta).path[page]
    return next(i for i, e in enumerate(obs.extras["elements"]) if e["text"] == name)


def play_optimally(env, task: Task) -> list:
    obs, results = env.reset(task), []
    page = 0
    while True:
        texts = [e["text"] for e in obs.extras["elements"]]
        name = build_site(task.meta).path[page]
        action = f"click [{texts.index(name)}]" if name in texts else f"click [{texts.index(texts[-1])}]"
        result = env.step(action)
        results.append(result)
        if result.done:
            return results
        page = result.info["synthweb"]["page"]
        obs = result.observation


def test_observations_have_the_fields_of_a_real_miniwob_page(tmp_path):
    web = MiniWoBEnv(make_config(tmp_path).env, "shape")
    try:
        real = web.reset(miniwob_task("click-link", 3, "train"))
    finally:
        web.close()
    env = make_env(env_config(), "shape")
    task = make_task(7, MIX)
    obs = env.reset(task)
    assert sorted(obs.extras) == sorted(real.extras)
    assert {tuple(sorted(e)) for e in obs.extras["elements"]} == {tuple(sorted(real.extras["elements"][0]))}
    assert obs.extras["grammar"].keys() == real.extras["grammar"].keys()
    line = re.compile(r'^\[(\d+)\]: <\w+> ".*";$')
    for ui_text in (obs.ui_text, real.ui_text):
        assert [int(line.match(row).group(1)) for row in ui_text.splitlines()] == list(range(len(ui_text.splitlines())))
    assert obs.task == task.instruction and obs.screenshot.shape == (210, 160, 3)
    # the instruction names the link by its text: the policy has to match words against the element list
    assert build_site(task.meta).path[0] in obs.task


def test_the_roles_listing_and_the_pae_space_work_unchanged():
    env = make_env(dataclasses.replace(env_config(), action_space="pae", element_list="roles"), "pae")
    task = next(t for t in suite_tasks(MIX, "train") if t.meta["depth"] == 2 and not t.meta["impossible"])
    obs = env.reset(task)
    assert obs.ui_text.splitlines()[0].startswith('[0] link "')
    result = env.step(f"Thought: the named link.\nAction: Click [{right_link(obs, task, 0)}]")
    assert result.info["synthweb"]["page"] == 1 and not result.done
    result = env.step("Thought: back.\nAction: GoBack")
    assert result.info["synthweb"]["page"] == 0
    assert env.step("Thought: x\nAction: Goto [https://example.com]").info["action_error"]


def test_a_scripted_optimal_policy_solves_every_solvable_task_and_no_impossible_one():
    env = make_env(env_config(), "optimal")
    tasks = suite_tasks(MIX, "train")
    assert {t.meta["impossible"] for t in tasks} == {True, False}
    for task in tasks:
        results = play_optimally(env, task)
        if task.meta["impossible"]:
            assert results[-1].info["outcome"] != "success" and results[-1].reward == 0.0
        else:
            assert results[-1].info["outcome"] == "success" and results[-1].reward == 1.0
            assert len(results) == task.meta["depth"]


def test_a_wrong_link_costs_steps_but_the_episode_goes_on():
    env = make_env(env_config(), "detour")
    task = next(t for t in suite_tasks(MIX, "train") if t.meta["depth"] == 2 and not t.meta["impossible"])
    obs = env.reset(task)
    wrong = next(i for i, e in enumerate(obs.extras["elements"]) if e["text"] != build_site(task.meta).path[0])
    detour = env.step(f"click [{wrong}]")
    assert not detour.done and detour.info["synthweb"] == {"page": 0, "detours": 1}
    assert detour.observation.extras["elements"][0]["text"] == BACK
    back = env.step("click [0]")
    assert back.info["synthweb"] == {"page": 0, "detours": 0}
    assert back.observation.ui_text == obs.ui_text
    first = env.step(f"click [{right_link(back.observation, task, 0)}]")
    last = env.step(f"click [{right_link(first.observation, task, 1)}]")
    assert last.info["outcome"] == "success" and env.steps == 4  # two wasted on the detour, two to solve
    stay = make_env(env_config(wrong_link="stay"), "stay")
    stay.reset(task)
    assert stay.step(f"click [{wrong}]").observation.ui_text == obs.ui_text
    end = make_env(env_config(wrong_link="end"), "end")
    end.reset(task)
    assert end.step(f"click [{wrong}]").info["outcome"] == "failure"


def test_clicks_slip_at_the_configured_rate():
    env = make_env(env_config(slip_prob=0.3, seed=4), "slip")
    task = make_task(3, dataclasses.replace(MIX, impossible=0.0, min_depth=30, max_depth=30))
    slips, done = 0, True
    for _ in range(2000):
        if done:
            env.reset(task)
        result = env.step("click [0]")
        slips, done = slips + bool(result.info.get("slipped")), result.done
    assert 0.27 < slips / 2000 < 0.33  # binomial sd 0.01


def play(env, task: Task, actions_seed: int) -> list:
    """One episode of clicks drawn from `actions_seed`: what each step did (page and its screenshot, reward,
    whether it slipped)."""
    rng, out = random.Random(actions_seed), []
    obs, done = env.reset(task), False
    while not done:
        result = env.step(f"click [{rng.randrange(len(obs.extras['elements']))}]")
        obs, done = result.observation, result.done
        out.append((obs.location, obs.screenshot_png, result.reward, result.info.get("slipped")))
    return out


def test_the_same_seed_plays_the_same_episodes():
    def episode(seed: int) -> list:
        env = make_env(env_config(slip_prob=0.2, reward_noise=0.5, seed=seed), "replay")
        return [step for i, task in enumerate(suite_tasks(MIX, "train")[:20]) for step in play(env, task, i)]

    assert episode(0) == episode(0) and episode(0) != episode(1)
    assert [t.instruction for t in suite_tasks(MIX, "train")] == [t.instruction for t in suite_tasks(MIX, "train")]


def test_an_evaluation_episode_draws_the_same_whichever_env_plays_it():
    """Slips and reward noise of an evaluation episode come from its task and its pass over the evaluation tasks,
    not from the env's training stream: a checkpoint evaluates the same whichever runner plays which episode."""
    cfg = load_config(
        None,
        data={
            "env": {"kind": "synthweb", "max_steps": 12, "synthweb": {"slip_prob": 0.3, "reward_noise": 0.5}},
            "tasks": {"suite": "synthweb", "synthweb": {"num_tasks": 6, "min_depth": 3, "max_depth": 4}},
        },
    )
    evaluation = eval_tasks(cfg.tasks, 8)  # six tasks, then a second pass over two of them
    assert [t.meta.get("eval_pass", 0) for t in evaluation] == [0] * 6 + [1] * 2
    fresh, busy = make_env(cfg.env, "runner-0/env0"), make_env(cfg.env, "runner-1/env3")
    for task in suite_tasks(cfg.tasks.synthweb, "train"):
        play(busy, task, 0)  # the other env has trained before it evaluates
    first = [play(fresh, task, i) for i, task in enumerate(evaluation)]
    assert first == [play(busy, task, i) for i, task in enumerate(evaluation)]
    assert any(slipped for episode in first for *_, slipped in episode)
    assert first[6] != play(fresh, evaluation[0], 6)  # a second pass over a task draws again

    # training episodes keep one stream an env, which evaluations leave alone
    trained, evaluated = make_env(cfg.env, "runner-2/env0"), make_env(cfg.env, "runner-2/env0")
    play(evaluated, evaluation[0], 0)
    task = suite_tasks(cfg.tasks.synthweb, "train")[0]
    assert [play(trained, task, 1) for _ in range(3)] == [play(evaluated, task, 1) for _ in range(3)]
    assert play(make_env(cfg.env, "runner-3/env0"), task, 1) != play(make_env(cfg.env, "runner-4/env0"), task, 1)


@pytest.mark.parametrize("wrong_link", ["detour", "stay", "end"])
def test_the_solve_probability_is_what_episodes_show(wrong_link):
    cfg = dataclasses.replace(env_config(wrong_link=wrong_link, slip_prob=0.1), max_steps=8)
    env = make_env(cfg, "mc")
    task = next(t for t in suite_tasks(MIX, "train") if t.meta["depth"] == 2 and not t.meta["impossible"])
    rng, solved, episodes = random.Random(2), 0, 3000
    for _ in range(episodes):
        obs, done = env.reset(task), False
        while not done:
            result = env.step(f"click [{rng.randrange(len(obs.extras['elements']))}]")
            obs, done = result.observation, result.done
        solved += result.info["outcome"] == "success"
    p = solve_probability(task, cfg, "random")
    assert abs(solved / episodes - p) < 4 * (p * (1 - p) / episodes) ** 0.5 + 1e-3
    assert p < solve_probability(task, cfg, "optimal") < 1  # slips keep even the optimal policy from certainty


def test_the_task_source_draws_the_suite_and_reports_by_depth():
    cfg = load_config(
        None,
        data={
            "env": {"kind": "synthweb", "max_steps": 6},
            "tasks": {"suite": "synthweb", "synthweb": {"num_tasks": 30}},
        },
    )
    drawn = [TaskSource(cfg.tasks, seed=1).next() for _ in range(3)]
    assert all(t.suite == "synthweb" and t.meta["seed"] < 30 for t in drawn)
    assert [t.id for t in eval_tasks(cfg.tasks, 31)][:30] == [t.id for t in suite_tasks(cfg.tasks.synthweb, "train")]
    heldout = dataclasses.replace(cfg.tasks.synthweb, eval_tasks="heldout")
    assert not {t.id for t in suite_tasks(heldout, "eval")} & {t.id for t in suite_tasks(heldout, "train")}
    assert {task_group(t) for t in suite_tasks(cfg.tasks.synthweb, "train")} <= {
        "impossible",
        *(f"depth-{d}" for d in range(1, 5)),
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["tasks.synthweb.max_depth=12"], "tasks.synthweb.max_depth .12. is more than env.max_steps"),
        (["env.synthweb.slip_prob=1.5"], "env.synthweb.slip_prob is a probability"),
        (["tasks.synthweb.min_depth=3", "tasks.synthweb.max_depth=2"], "min_depth .3. must be at most"),
        (["tasks.synthweb.max_distractors=99"], "tasks.synthweb.max_distractors must be at most 30"),
        (["env.synthweb.slip=0.1"], "unknown config key 'env.synthweb.slip'; did you mean 'env.synthweb.slip_prob'"),
        (["tasks.suite=miniwob"], "played by env.kind = 'miniwob'"),
    ],
)
def test_bad_settings_are_config_errors_naming_the_key(overrides, message):
    from rlsys.envs.tasks import check_tasks

    with pytest.raises(ConfigError, match=message):
        cfg = load_config(None, ["env.kind=synthweb", "env.max_steps=6", "tasks.suite=synthweb", *overrides])
        check_tasks(cfg.tasks, cfg.env.kind)


def test_the_largest_mix_the_config_allows_is_built_in_bounded_time():
    """At the bounds (a path of 1,000 pages, 30 distractors a page, every distractor to share a word with the right
    link) the ~70 names that share a word with a link run out: the site is still built, its distractors distinct
    and off the path."""
    mix = SynthWebTasksConfig(
        min_depth=1000, max_depth=1000, min_distractors=30, max_distractors=30, confusable=1.0, impossible=0.0
    )
    built = []
    worker = threading.Thread(target=lambda: built.append(build_site(make_task(3, mix).meta)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert built, "building the site did not finish within 30 s"
    site = built[0]
    assert len(site.path) == 1000 and all(len(set(links)) == len(links) == 31 for links in site.links)
    assert all(not (set(links) - {site.path[i]}) & set(site.path) for i, links in enumerate(site.links))
