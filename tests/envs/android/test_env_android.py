"""AndroidEnv through a real adb server to a fake device: every action of both formats, typed text,
screenshots, the settle wait, and a device that disconnects mid-episode."""

import dataclasses

import numpy as np
import pytest

from rlsys.config import AndroidConfig, EnvConfig
from rlsys.core.env import EnvBrokenError
from rlsys.core.types import Task
from rlsys.envs.android.actions import AndroidAction, render_action
from rlsys.envs.android.device import AndroidDevice
from rlsys.envs.android.emulator import Lease
from rlsys.envs.android.env import AndroidEnv
from tests.fake_android.device import CHROME, LAUNCHER

AWKWARD = [
    "hello world",
    "50% off, 100%s sure",
    "it's \"quoted\" & 'single'",
    "a;b|c`d`$HOME\\n(x)<y>*?~#!{z}[w]^",
    "  leading and trailing  ",
    "café naïve 東京 😀",
    "line one\nline two",
]


def make_env(adb_port, serial, space="autoui", **android):
    cfg = EnvConfig(
        kind="android",
        action_space=space,
        max_steps=10,
        settle_timeout_s=2.0,
        android=AndroidConfig(adb_server_port=adb_port, settle_interval_s=0.01, **android),
    )
    return AndroidEnv(cfg, "test/env1", Lease(serial))


def task(start="home"):
    return Task("aitw-general/t:1", "Open the settings", "aitw-general", start=start)


@pytest.fixture
def phone_env(fake_phone, adb_server):
    device, daemon, serial = fake_phone
    envs = []

    def build(space="autoui", **android):
        env = make_env(adb_server, serial, space, **android)
        envs.append(env)
        env.reset(task())
        device.events.clear()
        return env

    yield device, build
    for env in envs:
        env.close()


@pytest.mark.parametrize("space", ["autoui", "cogagent"])
def test_every_action_type_reaches_the_device(phone_env, space):
    device, build = phone_env
    env = build(space)
    w, h = 1080, 2280
    actions = [
        (AndroidAction("tap", point=(0.5, 0.25)), ("tap", 540, 570)),
        (AndroidAction("swipe", point=(0.5, 0.5), end=(0.5, 0.2)), ("swipe", 540, 1140, 540, 456, 300)),
        (AndroidAction("type", text="hi there"), ("text", "hi there")),
        (AndroidAction("home"), ("key", 3)),
        (AndroidAction("back"), ("key", 4)),
        (AndroidAction("enter"), ("key", 66)),
    ]
    for action, event in actions:
        device.events.clear()
        result = env.step(render_action(action, space, (w, h)))
        assert not result.done and "parse_error" not in result.info and "action_error" not in result.info
        assert device.events == [event], action
        assert result.info["action"] == action.to_dict()
    device.events.clear()
    result = env.step(render_action(AndroidAction("complete"), space))
    assert result.done and result.info["outcome"] == "unknown" and device.events == []
    assert result.observation.location == LAUNCHER  # the app in front is recorded when the episode ends


@pytest.mark.parametrize("text", AWKWARD)
def test_typed_text_arrives_exactly(phone_env, text):
    device, build = phone_env
    env = build("autoui")
    result = env.step(render_action(AndroidAction("type", text=text), "autoui"))
    assert "action_error" not in result.info
    assert device.state.text == text


def test_unicode_without_an_input_method_is_an_action_error_that_types_nothing(phone_env):
    device, build = phone_env
    env = build("autoui", unicode_input="none")
    result = env.step(render_action(AndroidAction("type", text="naïve"), "autoui"))
    assert "ADBKeyBoard" in result.info["action_error"] and device.state.text == ""
    assert result.observation.extras["feedback"] == result.info["action_error"]


def test_text_that_is_not_an_action_is_a_recorded_no_op(phone_env):
    device, build = phone_env
    env = build("autoui")
    result = env.step('Action Decision: "action_type": "SCROLL_SIDEWAYS", "touch_point": "[0.5, 0.5]"')
    assert not result.done and "unknown action type" in result.info["parse_error"]
    assert device.events == [] and "action" not in result.info
    assert result.observation.extras["history"] == [
        {"step": 1, "action": 'Action Decision: "action_type": "SCROLL_SIDEWAYS", "touch_point": "[0.5, 0.5]"'}
    ]
    # typed text holding `", "` parses
    result = env.step(
        'Action Decision: "action_type": "TYPE", "touch_point": "[-1.0, -1.0]", '
        '"lift_point": "[-1.0, -1.0]", "typed_text": "red", "blue"'
    )
    assert device.state.text == 'red", "blue'


def test_screenshots_decode_downscale_and_show_the_screen(phone_env):
    device, build = phone_env
    env = build("autoui", screenshot_scale=0.5)
    obs = env.step(render_action(AndroidAction("tap", point=(0.25, 0.5)), "autoui")).observation
    image = obs.screenshot
    assert image.shape == (1140, 540, 3)
    assert tuple(image[570, 135]) == (255, 0, 0)  # the tap marker at (270, 1140) full size
    assert tuple(image[1000, 400]) == (30, 60, 120)  # the launcher's background
    assert obs.extras["screen_size"] == [1080, 2280]

    full = build("autoui", screenshot_scale=1.0)
    assert full.step(render_action(AndroidAction("home"), "autoui")).observation.screenshot.shape == (2280, 1080, 3)


def test_newer_screencap_header_decodes(phone_env):
    device, build = phone_env
    env = build("autoui")
    device.sdk = 29  # 16-byte header with the colour space
    frame = env.device.frame()
    assert frame.shape == (2280, 1080, 3) and tuple(frame[5, 5]) == (30, 60, 120)


def test_step_waits_until_the_screen_is_still(phone_env):
    device, build = phone_env
    env = build("autoui")
    device.settle_frames = 3  # three screenshots show the transition after an input
    device.commands.clear()
    obs = env.step(render_action(AndroidAction("tap", point=(0.5, 0.5)), "autoui")).observation
    screencaps = [c for c in device.commands if c.startswith("screencap")]
    assert len(screencaps) == 5  # three moving frames, then two equal ones
    green = np.all(obs.screenshot == (0, 255, 0), axis=-1)
    assert not green.any()  # the observation is the settled screen, without the transition band


def test_settle_wait_is_bounded(phone_env):
    device, build = phone_env
    env = build("autoui")
    env.cfg = dataclasses.replace(env.cfg, settle_timeout_s=0.3)
    device.settle_frames = 10_000  # never still
    result = env.step(render_action(AndroidAction("home"), "autoui"))
    assert result.info["timing"]["env_s"] < 2.0


def test_reset_starts_each_suite_where_it_should(fake_phone, adb_server):
    device, _, serial = fake_phone
    env = make_env(adb_server, serial, browser_url="https://shop.example/")
    try:
        obs = env.reset(task("browser"))
        assert device.state.app == CHROME and device.state.url == "https://shop.example/"
        assert obs.location == CHROME and obs.task == "Open the settings"
        obs = env.reset(task("home"))
        assert device.state.app == LAUNCHER and ("key", 3) in device.events
        assert obs.extras["history"] == []
    finally:
        env.close()


def test_a_device_that_disconnects_mid_episode_breaks_the_env(fake_phone, adb_server):
    device, daemon, serial = fake_phone
    released = []
    cfg = EnvConfig(kind="android", action_space="autoui", android=AndroidConfig(adb_server_port=adb_server))
    env = AndroidEnv(cfg, "test/env1", Lease(serial), release=released.append)
    env.reset(task())
    env.step(render_action(AndroidAction("home"), "autoui"))
    daemon.disconnect()
    with pytest.raises(EnvBrokenError, match=serial):
        env.step(render_action(AndroidAction("tap", point=(0.5, 0.5)), "autoui"))
    env.close()
    env.close()
    assert released == [True]  # handed back once, marked broken


def test_a_device_that_is_not_there_is_an_env_error(adb_server):
    with pytest.raises(EnvBrokenError, match="127.0.0.1:1"):
        AndroidDevice("127.0.0.1:1", adb_server, timeout_s=3)
