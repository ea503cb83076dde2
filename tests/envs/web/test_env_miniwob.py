import os
import signal
import time

import pytest

from rlsys.core.env import EnvBrokenError, EnvSetupError
from rlsys.envs.tasks import miniwob_task
from rlsys.envs.web.miniwob import MiniWoBEnv, available_tasks
from tests.conftest import make_config


@pytest.fixture
def env(tmp_path):
    e = MiniWoBEnv(make_config(tmp_path).env, "test-env")
    yield e
    e.close()


def index_of(obs, text):
    return next(i for i, e in enumerate(obs.extras["elements"]) if e["text"] == text)


def test_correct_click_is_rewarded_by_the_page(env):
    obs = env.reset(miniwob_task("click-test-2", 5, "train"))
    assert obs.task == "Click button ONE." and obs.screenshot_png[:4] == b"\x89PNG"
    assert obs.screenshot.ndim == 3
    result = env.step(f"click [{index_of(obs, 'ONE')}]")
    assert result.done and result.reward == 1.0 and result.info["outcome"] == "success"
    verdict = result.info["verdict"]  # the page's reward as a Verdict, like every other evaluator's
    assert (verdict["success"], verdict["source"]) == (True, "miniwob") and "page reward 1" in verdict["reason"]


def test_wrong_click_fails_and_bad_text_is_a_recorded_noop(env):
    obs = env.reset(miniwob_task("click-test-2", 6, "train"))
    result = env.step("do something clever")
    assert not result.done and result.info["parse_error"] and result.reward == 0
    result = env.step(f"click [{index_of(obs, 'TWO')}]")
    assert result.done and result.reward == 0.0 and result.info["outcome"] == "failure"
    assert result.info["verdict"]["success"] is False


def test_typing_and_horizon(env):
    obs = env.reset(miniwob_task("enter-text", 1, "train"))
    word = obs.task.split('"')[1]
    field = next(i for i, e in enumerate(obs.extras["elements"]) if e["editable"])
    assert f"type [{field}] " in obs.extras["grammar"]["text_prefixes"]
    result = env.step(f"type [{field}] {word}")
    assert not result.done and result.info["action_error"] is None
    result = env.step(f"click [{index_of(result.observation, 'Submit')}]")
    assert result.done and result.reward == 1.0

    obs = env.reset(miniwob_task("enter-text", 2, "train"))
    for _ in range(env.cfg.max_steps):
        result = env.step("noop")
    assert result.done and result.info["outcome"] == "timeout"


def test_dead_browser_raises_env_broken(env):
    env.reset(miniwob_task("click-test-2", 1, "train"))
    for pid in env.pids()["chromium"] + env.pids()["chromedriver"]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    with pytest.raises(EnvBrokenError):
        env.step("click [0]")


def test_setup_errors_name_the_problem(tmp_path):
    cfg = make_config(tmp_path, env__chromium="/nonexistent/chromium").env
    with pytest.raises(EnvSetupError, match="env.chromium = '/nonexistent/chromium'"):
        MiniWoBEnv(cfg)
    assert "click-test-2" in available_tasks()


def test_task_pages_beyond_the_tab_cache_replace_the_oldest(tmp_path):
    env = MiniWoBEnv(make_config(tmp_path, env__max_tabs=2).env, "tabs")
    try:
        for name in ("click-test-2", "click-tab", "focus-text-2", "click-test-2", "click-button-sequence"):
            obs = env.reset(miniwob_task(name, 3, "train"))
            assert obs.location.endswith(f"/{name}.html") and obs.task
            assert len(env.driver.window_handles) <= 2
    finally:
        env.close()


def test_an_observation_waits_for_the_pages_animation_to_end(env):
    """Opening an accordion section is a jQuery animation, whose ticks move the sections below. On a busy machine
    the ticks came further apart than the quiet window (env.settle_quiet_ms), the page looked settled halfway, and a
    click at a listed section landed on a link that had moved under it. Ticks 200 ms apart stand in for the busy
    machine: the observation is the page once the animation is over."""
    obs = env.reset(miniwob_task("click-collapsible-2", 3, "train"))
    env.driver.execute_script("jQuery.fx.interval = 200;")
    result = env.step(f"click [{index_of(obs, 'Section #1')}]")
    time.sleep(1)
    later = env.step("look again")  # not an action: the page is observed as it is
    assert later.info["parse_error"]
    boxes = {e["text"]: e["box"] for e in result.observation.extras["elements"]}
    assert boxes == {e["text"]: e["box"] for e in later.observation.extras["elements"]}
