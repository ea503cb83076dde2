"""rlsys's envs through Gymnasium's API: gym.make, reset with a seed or a named task, text actions, dict
observations inside the declared space, terminated against truncated; MiniWoB++ and a web page in real headless
Chromium, Android through a real adb server to the fake device."""

import warnings

import gymnasium as gym
import numpy as np
import pytest

import rlsys.gym  # noqa: F401  (registers the envs)
from rlsys.gym import RlsysEnv
from tests.conftest import make_config


def browsers(tmp_path):
    env = make_config(tmp_path).env
    return {"chromium": env.chromium, "chromedriver": env.chromedriver}


def element_index(info, text):
    return next(i for i, e in enumerate(info["elements"]) if text in e["text"])


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
