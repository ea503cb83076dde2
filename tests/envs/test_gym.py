"""rlsys's envs through Gymnasium's API: gym.make, reset with a seed or a named task, text actions, dict
observations inside the declared space, terminated against truncated, Gymnasium's own checker, an id per MiniWoB++
task, the valid actions in `info`; MiniWoB++ and a web page in real headless Chromium, Android through a real adb
server to the fake device."""

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rlsys.envs.gym  # noqa: F401  (registers the envs)
from rlsys.envs.android.actions import parse_action
from rlsys.envs.gym import RlsysEnv
from rlsys.envs.web.miniwob import available_tasks
from tests.conftest import make_config


def browsers(tmp_path):
    env = make_config(tmp_path).env
    return {"chromium": env.chromium, "chromedriver": env.chromedriver}


def element_index(info, text):
    """The element whose whole text is `text`: a substring would also find "ok" in an "Okay" button or "no" in a
    line of lorem ipsum above it."""
    return next(i for i, e in enumerate(info["elements"]) if e["text"].strip() == text)


def test_a_miniwob_task_is_played_through_gymnasium(tmp_path):
    env = gym.make("rlsys/MiniWoB-v0", env=browsers(tmp_path), tasks=["click-button"])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the passive env checker warns on anything outside the declared spaces
            obs, info = env.reset(seed=3)
            assert env.observation_space.contains(obs)
            assert obs["screenshot"].shape == (420, 320, 3) and obs["screenshot"].dtype == np.uint8
            assert obs["instruction"].startswith("Click on the") and info["task"] == "click-button"
            target = obs["instruction"].split('"')[1]
            obs, reward, terminated, truncated, info = env.step(f"click [{element_index(info, target)}]")
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert info["outcome"] == "success"
        assert env.render().shape == (420, 320, 3)
    finally:
        env.close()


def test_gymnasiums_checker_passes(tmp_path):
    """Its spaces, a seeded reset then unseeded ones repeating, the same step for the same seed and action, data
    not reused, render, close twice: warnings are failures too."""
    env = gym.make("rlsys/MiniWoB-v0", env=browsers(tmp_path), tasks=["click-button"])  # a page drawn by its seed
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env.unwrapped)
    finally:
        env.close()


def test_unseeded_resets_after_a_seeded_one_repeat(tmp_path):
    """Each unseeded reset draws the page's seed from the env's generator: two fresh envs agree."""
    played = []
    for _ in range(2):
        env = gym.make("rlsys/MiniWoB-v0", env=browsers(tmp_path), tasks=["click-button", "click-link"])
        try:
            played.append([env.reset(seed=5)[0]["instruction"]] + [env.reset()[0]["instruction"] for _ in range(3)])
        finally:
            env.close()
    assert played[0] == played[1]


def test_an_id_per_task_and_the_valid_actions_in_info(tmp_path):
    assert {f"rlsys/MiniWoB-{task}-v0" for task in available_tasks()} <= set(gym.registry)
    env = gym.make("rlsys/MiniWoB-click-button-v0", env=browsers(tmp_path))
    try:
        assert len(repr(env.action_space)) < 200 and len(repr(env.observation_space)) < 1000  # printable
        obs, info = env.reset()
        assert info["task"] == "click-button"
        valid = info["valid_actions"]
        elements = info["elements"]
        typed = [f"type [{i}] text" for i, e in enumerate(elements) if e.get("editable")]
        assert valid == [f"click [{i}]" for i in range(len(elements))] + typed
        assert all(env.action_space.contains(text) for text in valid)
        target = valid[element_index(info, obs["instruction"].split('"')[1])]
        _, reward, terminated, _, info = env.step(target)
        assert (reward, terminated, info["parse_error"]) == (1.0, True, None)
    finally:
        env.close()


def test_running_out_of_steps_truncates_and_a_seed_fixes_the_problem(tmp_path):
    env = gym.make("rlsys/MiniWoB-v0", env={**browsers(tmp_path), "max_steps": 1})
    try:
        first = env.reset(seed=7, options={"task": "click-button"})[0]["instruction"]
        assert env.reset(seed=7, options={"task": "click-button"})[0]["instruction"] == first
        _, reward, terminated, truncated, info = env.step("not an action")
        assert (reward, terminated, truncated) == (0.0, False, True) and info["outcome"] == "timeout"
        assert info["parse_error"]
    finally:
        env.close()


def test_a_web_page_by_url_with_its_instruction(tmp_path, site):
    env = gym.make("rlsys/Web-v0", env=browsers(tmp_path))
    try:
        obs, info = env.reset(options={"task": f"{site}/actions.html", "instruction": "Say hello"})
        assert obs["instruction"] == "Say hello" and obs["location"] == f"{site}/actions.html"
        assert obs["screenshot"].shape == (768, 1024, 3) and env.observation_space.contains(obs)
        obs, reward, terminated, truncated, info = env.step(
            f"Thought: the button.\nAction: Click [{element_index(info, 'Say hello')}]"
        )
        assert not (terminated or truncated or info["action_error"])
        obs, reward, terminated, truncated, info = env.step("Thought: done.\nAction: ANSWER; [hello]")
        assert terminated and not truncated and info["answer"] == "hello"
    finally:
        env.close()


def test_an_android_device_by_serial(fake_phone, adb_server):
    device, _, serial = fake_phone
    android = {"adb_server_port": adb_server, "settle_interval_s": 0.01, "screenshot_scale": 0.5}
    env = gym.make("rlsys/Android-v0", env={"android": android, "settle_timeout_s": 2.0}, serial=serial)
    try:
        obs, info = env.reset(options={"task": "Open the settings"})
        assert obs["instruction"] == "Open the settings"
        kinds = {parse_action(text, "autoui", env.unwrapped._env.screen_size).kind for text in info["valid_actions"]}
        assert kinds == {"tap", "swipe", "type", "home", "back", "enter", "complete", "impossible"}
        assert obs["screenshot"].shape == env.observation_space["screenshot"].shape == (1140, 540, 3)
        device.events.clear()
        env.step(
            'Action Plan: [DUAL_POINT]; Action Decision: "action_type": "DUAL_POINT", '
            '"touch_point": "[0.25, 0.5]", "lift_point": "[0.25, 0.5]", "typed_text": ""'
        )
        assert device.events == [("tap", 540, 570)]
    finally:
        env.close()


def test_what_cannot_work_is_said_before_anything_starts():
    with pytest.raises(ValueError, match="serial="):
        RlsysEnv({"kind": "android", "action_space": "autoui"})
    env = RlsysEnv({"kind": "sim"})
    try:
        with pytest.raises(ValueError, match="options=\\{'task'"):
            env.reset()
        with pytest.raises(ValueError, match="a task is"):
            env.reset(options={"task": 3})
    finally:
        env.close()
