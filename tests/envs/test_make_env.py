"""The env front door (rlsys.envs.make_env) builds every env.kind the config accepts, each played for a step: the
simulated env, MiniWoB++ and a web page in real headless Chromium, and Android on a fake emulator that a real
EmulatorPool starts and leases through a real adb server; a kind it does not know is named in its error."""

import dataclasses
import typing

import pytest

from rlsys.config import AndroidConfig, EnvConfig, build
from rlsys.core.types import Task
from rlsys.envs import make_env
from rlsys.envs.android.actions import AndroidAction, render_action
from rlsys.envs.android.emulator import EmulatorPool
from rlsys.envs.tasks import miniwob_task
from tests.conftest import make_config
from tests.envs.android.test_emulator_pool import events, shutdown_and_check

KINDS = typing.get_args(typing.get_type_hints(EnvConfig)["kind"])


def play_sim(tmp_path, request):
    cfg = build(EnvConfig, {"kind": "sim", "sim": {"reset_median_s": 0.0, "step_median_s": 0.0}}, "env")
    env = make_env(cfg, "test/env1")
    try:
        obs = env.reset(Task("sim/0", "Click something", "sim"))
        assert env.env_id == "test/env1" and obs.extras["elements"]
        assert env.step("click [0]").info["action"] == {"kind": "click", "element": 0}
    finally:
        env.close()


def play_miniwob(tmp_path, request):
    env = make_env(make_config(tmp_path).env, "test/env1")
    try:
        obs = env.reset(miniwob_task("click-test-2", 5, "train"))
        one = next(i for i, e in enumerate(obs.extras["elements"]) if e["text"] == "ONE")
        result = env.step(f"click [{one}]")
        assert (env.env_id, result.reward, result.info["outcome"]) == ("test/env1", 1.0, "success")
    finally:
        env.close()


def play_web(tmp_path, request):
    """The fuzzy judge given to the front door is the one that scores a WebArena fuzzy_match answer."""
    site = request.getfixturevalue("site")
    browsers = make_config(tmp_path).env
    cfg = build(
        EnvConfig,
        {"kind": "web", "action_space": "pae", "chromium": browsers.chromium, "chromedriver": browsers.chromedriver},
        "env",
    )
    asked = []

    def fuzzy_judge(answer, references):
        asked.append((answer, references))
        return True

    env = make_env(cfg, "test/env1", fuzzy_judge)
    checks = {"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": ["twenty"]}}
    try:
        obs = env.reset(Task("web/0", "How many?", "web", start=f"{site}/actions.html", checks=checks))
        assert obs.location == f"{site}/actions.html"
        result = env.step("Thought: counted.\nAction: ANSWER; [20]")
        assert (result.reward, result.info["outcome"]) == (1.0, "success")
        assert asked == [("20", ["twenty"])]
    finally:
        env.close()


def play_android(tmp_path, request):
    """Leased from a pool the caller owns (here an EmulatorPool in this process): reset loads the emulator's
    snapshot, an action reaches the device, and closing the env hands the emulator back."""
    fake_sdk = request.getfixturevalue("fake_sdk")
    pool = EmulatorPool(AndroidConfig(**{**fake_sdk, "first_console_port": 5670, "settle_interval_s": 0.01}))
    cfg = EnvConfig(kind="android", action_space="autoui", settle_timeout_s=2.0, android=pool.cfg)
    try:
        env = make_env(cfg, "test/env1", emulators=pool)
        assert env.lease.serial == "emulator-5670" and pool.emulators[0].leased
        obs = env.reset(Task("aitw/0", "Open the settings", "aitw-general", start="home"))
        assert obs.screenshot.shape == (1140, 540, 3)
        assert [e["name"] for e in events(fake_sdk) if e["event"] == "snapshot_load"] == ["rlsys_home"]
        result = env.step(render_action(AndroidAction("type", text="hello"), "autoui", env.screen_size))
        assert "parse_error" not in result.info and "action_error" not in result.info
        assert (result.observation.screenshot != obs.screenshot).any()  # the typed text is on the screen
        env.close()
        assert not pool.emulators[0].leased
    finally:
        shutdown_and_check(pool, fake_sdk)


def play_synthweb(tmp_path, request):
    from rlsys.config import SynthWebTasksConfig
    from rlsys.envs.synthweb import build_site, make_task

    env = make_env(build(EnvConfig, {"kind": "synthweb"}, "env"), "test/env1")
    task = make_task(1, SynthWebTasksConfig(min_depth=1, max_depth=1, impossible=0.0))
    obs = env.reset(task)
    named = [e["text"] for e in obs.extras["elements"]].index(build_site(task.meta).path[0])
    result = env.step(f"click [{named}]")
    assert (env.env_id, result.reward, result.info["outcome"]) == ("test/env1", 1.0, "success")


PLAYS = {"sim": play_sim, "miniwob": play_miniwob, "web": play_web, "android": play_android, "synthweb": play_synthweb}


def test_every_kind_the_config_accepts_has_a_play_here():
    assert sorted(PLAYS) == sorted(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_the_front_door_builds_each_kind(kind, tmp_path, request):
    PLAYS[kind](tmp_path, request)


def test_an_android_env_that_fails_to_build_hands_its_emulator_back(fake_sdk):
    pool = EmulatorPool(AndroidConfig(**{**fake_sdk, "first_console_port": 5674}))
    cfg = EnvConfig(kind="android", action_space="element", android=pool.cfg)  # not an Android action space
    try:
        with pytest.raises(ValueError, match="autoui or cogagent"):
            make_env(cfg, "test/env1", emulators=pool)
        assert len(pool.emulators) == 1 and not pool.emulators[0].leased
    finally:
        shutdown_and_check(pool, fake_sdk)


def test_android_without_a_pool_to_lease_from_is_refused():
    with pytest.raises(ValueError, match="env.kind 'android'.*emulators="):
        make_env(EnvConfig(kind="android", action_space="autoui"), "test/env1")


def test_an_unknown_kind_is_named_with_the_kinds_there_are():
    cfg = dataclasses.replace(EnvConfig(), kind="desktop")
    with pytest.raises(ValueError, match="env.kind 'desktop'") as raised:
        make_env(cfg, "test/env1")
    assert all(kind in str(raised.value) for kind in KINDS)
