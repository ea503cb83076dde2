"""The web env in real headless Chromium against pages served on 127.0.0.1 by the tests."""

import io
import os
import signal
import sys
import time

import psutil
import pytest
from PIL import Image

from rlsys.config import EnvConfig, build
from rlsys.core.env import EnvBrokenError
from rlsys.core.evaluator import judge_inputs
from rlsys.core.types import Step, Task, Trajectory
from rlsys.envs.autoui_format import AutoUIAction, render_autoui
from rlsys.envs.web.webenv import WebEnv
from tests.conftest import make_config


def web_config(tmp_path, **env):
    """An env config alone: the web env does not care which policy drives it."""
    base = make_config(tmp_path).env
    data = {
        "kind": "web",
        "viewport": [1024, 768],
        "max_steps": 30,
        "chromium": base.chromium,
        "chromedriver": base.chromedriver,
        **env,
    }
    return build(EnvConfig, data, "env")


@pytest.fixture(scope="module")
def env(tmp_path_factory, site):
    env = WebEnv(web_config(tmp_path_factory.mktemp("web"), action_space="pae", search_engine=site + "/page2.html"))
    yield env
    env.close()


def task(site, page="actions.html", checks=None):
    return Task(
        id=page,
        instruction="do it",
        suite="webarena" if checks else "webvoyager",
        start=f"{site}/{page}",
        checks=checks,
    )


def index_of(env, text):
    return next(i for i, e in enumerate(env._elements) if text in e["text"])


def page_text(env, element_id="out"):
    return env.driver.execute_script(f"return document.getElementById('{element_id}').textContent")


def pae(action):
    return f"Thought: the next step is clear.\nAction: {action}"


def test_marks_keep_visible_innermost_elements_in_document_order(env, site):
    obs = env.reset(task(site, "marks.html"))
    ids = env.driver.execute_script("return window.__rlsysElements.map(e => e.id)")
    # nested: the button, not its clickable card; hidden, occluded and off-screen ones are left out
    assert ids == ["first", "inner", "name", "last"]
    assert obs.ui_text.splitlines() == [
        '[0]: <a> "First link";',
        '[1]: <button> "Inner button";',
        '[2]: <input> "Your name";',
        '[3]: <button> "Last visible";',
    ]
    image = Image.open(io.BytesIO(obs.screenshot_png)).convert("RGB")
    assert image.size == (1024, 768)  # the exact viewport, not the window
    left, top, width, height = obs.extras["elements"][3]["box"]
    clean = Image.open(io.BytesIO(env.browser.screenshot_png())).convert("RGB")
    edge = (left + width // 2, top + height - 1)
    assert image.getpixel(edge) != clean.getpixel(edge), "the box is drawn into the observation only"
    assert env.driver.execute_script("return document.querySelectorAll('[data-rlsys], canvas').length") == 0


def test_pae_click_type_and_settle_on_network(env, site):
    env.reset(task(site))
    result = env.step(pae(f"Click [{index_of(env, 'Say hello')}]"))
    assert page_text(env) == "clicked" and not result.done
    env.step(pae(f"Type [{index_of(env, 'old text')}]; [new, words]"))
    assert page_text(env) == "searched new, words"  # cleared, typed, Enter
    result = env.step(pae(f"Click [{index_of(env, 'Load slowly')}]"))
    # the page fetches for 0.4 s after the click; the observation waits for it, not for a timer
    assert page_text(env) == "loaded slowly"
    assert result.observation.extras["settled"] and result.observation.extras["settle_ms"] >= 300


def test_settling_waits_out_the_quiet_window_from_the_action_not_from_the_observation(env, site, monkeypatch):
    # a window far longer than the handler's 40 ms, so that a busy machine's late timers cannot end it first
    monkeypatch.setattr(env.cfg, "settle_quiet_ms", 300)
    env.reset(task(site))
    time.sleep(0.5)
    # no action: the page has not changed for longer than the quiet window, so it is settled at once
    result = env.step(pae("Hover over it"))
    assert result.info["parse_error"] and result.observation.extras["settle_ms"] < env.cfg.settle_quiet_ms / 2
    # the click's handler changes the page 40 ms later: the quiet window counts from the click, so that is seen
    result = env.step(pae(f"Click [{index_of(env, 'Change later')}]"))
    assert "Changed 40 ms later" in [e["text"] for e in result.observation.extras["elements"]]


def test_going_back_loads_the_page_again_and_settles_promptly(env, site):
    env.reset(task(site))
    env.driver.execute_script("window.mark = 'still here'")
    env.step(pae(f"Click [{index_of(env, 'Next page')}]"))
    result = env.step(pae("GoBack"))
    assert result.observation.location == f"{site}/actions.html"
    # no back/forward cache: a page left behind is not kept running, to come back with what it held
    assert env.driver.execute_script("return window.mark") is None
    assert result.observation.extras["settled"] and result.observation.extras["settle_ms"] < 500


def test_pae_navigation_scroll_wait_and_answer(env, site):
    env.reset(task(site))
    env.step(pae("Scroll [WINDOW]; [down]"))
    assert env.driver.execute_script("return scrollY") == 512  # two thirds of 768
    env.step(pae("Scroll [WINDOW]; [up]"))
    assert env.driver.execute_script("return scrollY") == 0
    result = env.step(pae(f"Click [{index_of(env, 'Next page')}]"))
    assert result.observation.location == f"{site}/page2.html"
    result = env.step(pae("GoBack"))
    assert result.observation.location == f"{site}/actions.html"
    result = env.step(pae("Google"))
    assert result.observation.location == f"{site}/page2.html"
    result = env.step(pae(f"Goto [{site}/actions.html]"))
    assert result.observation.location == f"{site}/actions.html"
    t0 = time.monotonic()
    env.step(pae("Wait"))
    assert time.monotonic() - t0 >= env.cfg.wait_action_s
    history = env.step(pae("Wait")).observation.extras["history"]
    assert [h["action"].split("Action: ")[1] for h in history] == ["Google", f"Goto [{site}/actions.html]", "Wait"]
    result = env.step(pae("ANSWER; [it is done]"))
    assert result.done and result.info["outcome"] == "unknown" and result.info["answer"] == "it is done"
    assert result.reward == 0.0  # no programmatic check: a judge decides


def test_judge_sees_the_answer_and_the_last_screenshots(env, site):
    observations, steps = [env.reset(task(site))], []
    for text in (pae("Scroll [WINDOW]; [down]"), pae("Scroll [WINDOW]; [up]"), pae("ANSWER; [forty-two]")):
        result = env.step(text)
        steps.append(
            Step(
                observations[-1], text, result.info.get("action"), result.reward, result.done, 0, None, info=result.info
            )
        )
        observations.append(result.observation)
    answer, screenshots = judge_inputs(Trajectory(task(site), steps, "unknown"), screenshots=2)
    assert answer == "forty-two"
    assert screenshots == [observations[1].screenshot_png, observations[2].screenshot_png]
    assert judge_inputs(Trajectory(task(site), steps[:1], "timeout"))[0] is None


def assert_all_gone(pids: dict, timeout=10.0):
    alive = lambda: [
        p
        for group in pids.values()
        for p in group
        if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    ]
    deadline = time.monotonic() + timeout
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(), f"processes outlived the env: {alive()}"


def test_format_errors_are_observations_and_count_as_steps(tmp_path, site):
    env = WebEnv(web_config(tmp_path, action_space="pae", max_steps=3))
    try:
        env.reset(task(site))
        for text in ("I would click the button", pae("Click [99]"), pae("Fly [1]")):
            result = env.step(text)
            assert result.info["parse_error"] and result.observation.extras["feedback"] == result.info["parse_error"]
        assert result.done and result.info["outcome"] == "timeout" and page_text(env) == "nothing yet"
        pids = env.pids()
    finally:
        env.close()
    assert pids["chromedriver"] and pids["chromium"]
    assert_all_gone(pids)


def autoui(action_type, touch=(-1.0, -1.0), lift=None, text=""):
    touch_yx = lift_yx = None
    if action_type == "DUAL_POINT":
        touch_yx, lift_yx = touch, lift or touch
    return render_autoui(AutoUIAction(action_type, touch_yx, lift_yx, text, plan="[DUAL_POINT]"))


def test_coords_actions_on_viewport_coordinates(tmp_path, site):
    env = WebEnv(web_config(tmp_path, action_space="coords", set_of_marks=False))
    try:
        env.reset(task(site))
        left, top, width, height = env._elements[index_of(env, "Say hello")]["box"]
        centre_yx = ((top + height / 2) / 768, (left + width / 2) / 1024)  # AutoUI writes [y, x]
        env.step(autoui("DUAL_POINT", centre_yx))
        assert page_text(env) == "clicked"
        left, top, width, height = env._elements[index_of(env, "old text")]["box"]
        env.step(autoui("DUAL_POINT", ((top + height / 2) / 768, (left + width / 2) / 1024)))
        env.step(autoui("TYPE", text=", appended"))
        env.step(autoui("PRESS_ENTER"))
        assert page_text(env) == "searched old text, appended"
        env.step(autoui("DUAL_POINT", (0.8, 0.5), (0.2, 0.5)))  # finger moves up: the page scrolls down
        assert env.driver.execute_script("return scrollY") > 300
        env.driver.get(f"{site}/page2.html")
        result = env.step(autoui("PRESS_BACK"))
        assert result.observation.location == f"{site}/actions.html"
        env.driver.get(f"{site}/page2.html")
        result = env.step(autoui("PRESS_HOME"))
        assert result.observation.location == f"{site}/actions.html"
        result = env.step(autoui("STATUS_TASK_COMPLETE"))
        assert result.done and result.info["answer"] == ""
        env.reset(task(site))
        result = env.step('Action Decision: "action_type": "LONG_PRESS"')
        assert "LONG_PRESS" in result.info["parse_error"] and not result.done
    finally:
        env.close()


def webdriver_commands(env, call) -> list[str]:
    """The WebDriver commands (each an HTTP round trip to chromedriver) that `call` sends."""
    sent, execute = [], env.driver.execute

    def counted(command, params=None):
        sent.append(command)
        return execute(command, params)

    env.driver.execute = counted
    try:
        call()
    finally:
        del env.driver.execute
    return sent


@pytest.mark.parametrize("action", ["Scroll [WINDOW]; [down]", "Click [{hello}]"])
def test_a_step_on_a_loaded_page_goes_to_the_page_over_devtools_not_through_chromedriver(env, site, action):
    """chromedriver costs ~4 ms a round trip over a direct DevTools one: the action, the settling script, the
    screenshot and the check for a pending load all go to the page directly. Left to chromedriver: the page-load
    timeout around the step (no round trip to the page) and the list of tabs."""
    env.reset(task(site))
    sent = webdriver_commands(env, lambda: env.step(pae(action.format(hello=index_of(env, "Say hello")))))
    assert sorted(set(sent)) == ["setTimeouts", "w3cGetWindowHandles"], sent
    assert page_text(env) == ("clicked" if "Click" in action else "nothing yet")


def test_dialogs_are_accepted_and_reported(env, site):
    env.reset(task(site))
    result = env.step(pae(f"Click [{index_of(env, 'Alert')}]"))
    assert result.info["dialogs"] == ["Are you sure? yes."]
    assert "Are you sure? yes." in result.observation.extras["feedback"]
    assert page_text(env) == "after alert"


def test_blocked_domain_by_link_and_by_goto(env, site):
    env.reset(task(site))
    other = site.replace("127.0.0.1", "localhost")
    result = env.step(pae(f"Click [{index_of(env, 'Elsewhere')}]"))
    assert result.info["blocked"] == [f"{other}/page2.html"]
    assert result.observation.location == f"{site}/actions.html"
    result = env.step(pae(f"Goto [{other}/page2.html]"))
    assert result.info["blocked"] == [f"{other}/page2.html"] and "not allowed" in result.info["action_error"]
    assert result.observation.location == f"{site}/actions.html"


def test_new_tabs_followed_or_closed(env, tmp_path, site):
    env.reset(task(site))
    result = env.step(pae(f"Click [{index_of(env, 'Open tab')}]"))
    assert result.info["new_tabs"] == {"policy": "follow", "urls": [f"{site}/page2.html"]}
    assert result.observation.location == f"{site}/page2.html" and len(env.driver.window_handles) == 1
    closing = WebEnv(web_config(tmp_path, action_space="pae", new_tabs="close"))
    try:
        closing.reset(task(site))
        result = closing.step(pae(f"Click [{index_of(closing, 'Open tab')}]"))
        assert result.info["new_tabs"]["policy"] == "close"
        assert result.observation.location == f"{site}/actions.html" and len(closing.driver.window_handles) == 1
    finally:
        closing.close()


def test_downloads_are_capped_and_pdfs_reported(tmp_path, site):
    env = WebEnv(web_config(tmp_path, action_space="pae", download_max_mb=1.0))
    try:
        env.reset(task(site))
        result = env.step(pae(f"Click [{index_of(env, 'Download')}]"))
        assert result.info["downloads"] == [{"name": "file.bin", "bytes": 1000, "complete": True}]
        result = env.step(pae(f"Click [{index_of(env, 'Big download')}]"))
        (big,) = result.info["downloads"]
        assert big["name"] == "big.bin" and "cap" in big["removed"]
        assert sorted(p.name for p in env.browser.downloads.iterdir()) == ["file.bin"]
        result = env.step(pae(f"Click [{index_of(env, 'A PDF')}]"))
        assert result.info["pdf"] == ["doc.pdf"]
        env.reset(task(site))
        assert list(env.browser.downloads.iterdir()) == []  # each episode starts with an empty folder
    finally:
        env.close()


def test_cookies_and_storage_do_not_survive_an_episode(env, site):
    env.reset(task(site))
    env.driver.execute_script("document.cookie = 'session=abc'; localStorage.setItem('k', 'v');")
    env.reset(task(site))
    assert env.driver.execute_script("return [document.cookie, localStorage.getItem('k')]") == ["", None]


def test_a_page_writing_on_its_way_out_leaves_nothing_for_the_next_episode(env, site):
    for _ in range(5):
        env.reset(task(site, "writer.html"))
        assert "leak_interval" in env.driver.execute_script("return document.cookie")
        env.reset(task(site, "page2.html"))  # the same origin
        cookies, stored = env.driver.execute_script("return [document.cookie, Object.keys(localStorage)]")
        assert (cookies, stored) == ("", [])


def test_the_last_episodes_pages_are_not_in_the_next_ones_history(env, site):
    env.reset(task(site))
    env.driver.execute_script("window.mark = 'episode one'")
    env.reset(task(site, "page2.html"))
    for _ in range(3):
        result = env.step(pae("GoBack"))
        assert result.observation.location == f"{site}/page2.html"
    assert env.driver.execute_script("return window.mark") is None


CHECKS = {
    "eval_types": ["string_match", "url_match", "program_html"],
    "reference_answers": {"must_include": ["Page two"]},
    "reference_url": "/page2.html",
    "program_html": [
        {
            "url": "last",
            "locator": "document.getElementById('title').textContent",
            "required_contents": {"exact_match": "Page two"},
        }
    ],
}


@pytest.mark.parametrize(
    "answer, goto, success",
    [
        ("It says Page two", "page2.html", True),
        ("It says Page one", "page2.html", False),
        ("It says Page two", "actions.html", False),
    ],
)
def test_webarena_checks_decide_the_reward(env, site, answer, goto, success):
    env.reset(task(site, checks=CHECKS))
    env.step(pae(f"Goto [{site}/{goto}]"))
    result = env.step(pae(f"ANSWER; [{answer}]"))
    assert result.done and result.info["verdict"]["source"] == "webarena"
    assert result.info["outcome"] == ("success" if success else "failure")
    assert result.reward == (1.0 if success else 0.0)


def test_instance_reset_runs_between_episodes(tmp_path, env, site):
    marker = tmp_path / "reset-ran"
    cfg = web_config(
        tmp_path,
        instance_reset_every=2,
        instance_reset_command=[sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ok')"],
    )
    env.cfg, saved = cfg, env.cfg
    try:
        env.episodes_since_instance_reset = 0
        env.reset(task(site))
        assert not env.instance_reset_due()
        env.reset(task(site))
        assert env.instance_reset_due()
        report = env.reset_instance()
        assert report["ok"] and marker.read_text() == "ok" and not env.instance_reset_due()
        env.cfg = web_config(tmp_path, instance_reset_every=1, instance_reset_command=[sys.executable, "-c", "exit(3)"])
        assert env.reset_instance()["ok"] is False
    finally:
        env.cfg = saved


def test_killed_browser_raises_env_broken_and_nothing_is_left(tmp_path, site):
    env = WebEnv(web_config(tmp_path, action_space="pae"))
    env.reset(task(site))
    pids = env.pids()
    for pid in pids["chromium"]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    with pytest.raises(EnvBrokenError):
        env.step(pae("Scroll [WINDOW]; [down]"))
    env.close()
    assert_all_gone(pids)
