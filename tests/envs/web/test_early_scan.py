"""The element scan and the screenshot taken while a step's quiet window is waited out (observe.js) are used
only when nothing could have moved or restyled an element since: a page that scrolls, runs a transition,
changes a style sheet through the CSSOM or changes a shadow root after them is scanned and photographed again,
and its observation shows and lists what is there at the end of the window."""

import numpy as np
import pytest

from rlsys.envs.web.marks import draw_marks
from rlsys.envs.web.png import decode_rgb
from rlsys.envs.web.webenv import WebEnv
from tests.envs.web.test_env_web import index_of, pae, page_text, task, web_config

# the page's changes come 350-400 ms after the click, well after the early scan even on a busy machine (at 150 ms
# a loaded one sometimes scanned only after them, and rightly used that scan)
QUIET_MS = 800


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    env = WebEnv(web_config(tmp_path_factory.mktemp("web"), action_space="pae", settle_quiet_ms=QUIET_MS))
    yield env
    env.close()


def texts(result):
    return [element["text"] for element in result.observation.extras["elements"]]


def click(env, site, button, page="quiet_changes.html"):
    env.reset(task(site, page))
    return env.step(pae(f"Click [{index_of(env, button)}]"))


def shows_the_page_as_it_is(env, result) -> bool:
    """Whether the observation's screenshot is pixel for pixel the page as it is now (quiet, after the step)."""
    now = draw_marks(env.browser.screenshot_png(), result.observation.extras["elements"])
    return np.array_equal(np.asarray(decode_rgb(now)), np.asarray(decode_rgb(result.observation.screenshot_png)))


def test_a_quiet_page_uses_the_early_scan_and_screenshot(env, site):
    result = click(env, site, "Nothing")
    assert result.observation.extras["early_scan"] and result.observation.extras["early_screenshot"]
    assert result.observation.extras["settled"]
    assert "Near link" in texts(result) and "Far link" not in texts(result)
    assert shows_the_page_as_it_is(env, result)


def test_what_happened_before_the_early_scan_does_not_void_it(env, site):
    """Resize events for 30 ms after the click, then a request of 0.4 s whose answer is written into the page
    while the request still counts as in flight (its load handler runs before its loadend): the scan comes
    after the answer, and the events before it are in it."""
    result = click(env, site, "Busy, then load")
    assert result.observation.extras["early_scan"] and result.observation.extras["settled"]
    assert page_text(env) == "loaded slowly"


def test_scrolling_the_window_by_the_env_leaves_the_early_scan_valid(env, site):
    env.reset(task(site, "quiet_changes.html"))
    result = env.step(pae("Scroll [WINDOW]; [down]"))
    assert result.observation.extras["early_scan"] and result.observation.extras["early_screenshot"]
    assert "Near link" not in texts(result)
    assert shows_the_page_as_it_is(env, result)


@pytest.mark.parametrize(
    "page, button, appears, goes",
    [
        ("quiet_changes.html", "Scroll later", "Far link", "Near link"),  # a scroll event
        ("quiet_changes.html", "Slide in later", "Sliding link", None),  # a delayed CSS transition
        ("quiet_changes.html", "Restyle later", "Hidden link", None),  # CSSStyleSheet.insertRule
        ("quiet_shadow.html", "Add to the shadow root later", "Shadow link", None),  # not observed: never early
    ],
)
def test_a_change_after_the_early_scan_is_seen(env, site, page, button, appears, goes):
    result = click(env, site, button, page)
    assert not result.observation.extras["early_scan"] and not result.observation.extras["early_screenshot"]
    assert appears in texts(result)
    assert goes is None or goes not in texts(result)
    assert shows_the_page_as_it_is(env, result)


def test_a_page_that_leaves_while_being_photographed_is_observed_where_it_went(env, site):
    result = click(env, site, "Leave later")
    assert result.observation.location.endswith("/page2.html") and "Back to actions" in texts(result)
    assert not result.observation.extras["early_screenshot"]
    assert shows_the_page_as_it_is(env, result)
