"""The element list as assistive technology would read it, on tests/site/elements.html in real Chromium:
what is listed, what it is called, where its mark goes and where a click lands."""

import pytest

from rlsys.core.types import Task
from rlsys.envs.web.webenv import WebEnv
from tests.envs.web.test_env_web import web_config


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    env = WebEnv(web_config(tmp_path_factory.mktemp("elements"), action_space="pae", element_list="roles"))
    yield env
    env.close()


@pytest.fixture
def page(env, site):
    obs = env.reset(Task(id="elements", instruction="look", suite="webvoyager", start=f"{site}/elements.html"))
    return obs, {e["name"]: e for e in obs.extras["elements"]}


def ids(env) -> list[str]:
    return env.driver.execute_script("return window.__rlsysElements.map(e => e.id)")


def test_each_control_once_in_document_order_with_frames_and_shadow_roots(env, page):
    assert ids(env) == [
        "home",
        "wrapped",
        "inner",
        "image",
        "card-label",
        "email",
        "remember",
        "search",
        "qty",
        "close",
        "go",
        "framed",
        "frametext",
        "shadowed",
    ]  # "under" lies beneath the fixed header: not listed as clickable


def test_names_come_from_content_labels_alt_text_and_aria(page):
    obs, _ = page
    assert obs.ui_text.splitlines() == [
        '[0] link "Home"',
        '[1] link "the second chapter of the long tutorial"',  # wraps onto two lines
        '[2] link "json — JSON encoder and decoder"',  # the link, not its <code> or <span>
        '[3] link "Project logo"',  # an image link, by its alt text
        '[4] generic "Open the card"',  # a clickable card: its innermost part, which the click reaches it through
        '[5] textbox "Email address"',  # <label for>
        '[6] checkbox "Remember me" checked',  # a wrapping <label>
        '[7] searchbox "Search the docs" value "json"',  # placeholder; what is typed is its value
        '[8] spinbutton "Quantity"',  # aria-labelledby
        '[9] button "Close dialog"',  # aria-label over the "×" it shows
        '[10] button "Submit"',  # a submit input's default name
        '[11] link "Inside the frame"',
        '[12] textbox "Frame field"',
        '[13] button "In the shadow"',
    ]


def test_pae_rendering_keeps_its_format(env, site):
    env.cfg.element_list = "pae"
    try:
        obs = env.reset(Task(id="elements", instruction="look", suite="webvoyager", start=f"{site}/elements.html"))
    finally:
        env.cfg.element_list = "roles"
    lines = obs.ui_text.splitlines()
    assert lines[2] == '[2]: <a> "json — JSON encoder and decoder";'
    assert lines[7] == '[7]: <input> "json";'  # a field shows its label, else what it holds


def test_a_wrapped_link_is_marked_and_clicked_on_its_text_not_on_the_blank_centre(env, page):
    _, by_name = page
    link = by_name["the second chapter of the long tutorial"]
    left, top, width, height = link["box"]
    assert width < 150 and left >= 300  # the first line's rect, not the two-line bounding box
    assert left <= link["point"][0] <= left + width and top <= link["point"][1] <= top + height
    index = ids(env).index("wrapped")
    env.step(f"Thought: open it.\nAction: Click [{index}]")
    assert env.url.endswith("#wrapped")


def test_frame_elements_are_placed_in_page_coordinates_and_take_typing(env, page):
    _, by_name = page
    frame_box = env.driver.execute_script(
        "const r = document.getElementById('frame').getBoundingClientRect(); return [r.left, r.top];"
    )
    field = by_name["Frame field"]
    assert field["box"][1] >= frame_box[1]  # below the frame's top: offset by where the frame is
    index = ids(env).index("frametext")
    obs = env.step(f"Thought: type.\nAction: Type [{index}]; [hello]").observation
    typed = env.driver.execute_script(
        "return document.getElementById('frame').contentDocument.getElementById('frametext').value"
    )
    assert typed == "hello"
    assert '[12] textbox "Frame field" value "hello"' in obs.ui_text


def look_again(env):
    """An observation of the page as it is now (an unparsable action changes nothing)."""
    return env.step("Thought: look again.\nAction: nothing").observation


def test_elements_scrolled_under_a_sticky_header_are_not_listed(env, page):
    env.driver.execute_script("window.scrollTo(0, 30)")  # "wrapped" (at y = 50..82) slides under the 40 px header
    obs = look_again(env)
    assert "the second chapter" in obs.ui_text  # its second line is still below the header
    env.driver.execute_script("window.scrollTo(0, 60)")
    obs = look_again(env)
    assert "the second chapter" not in obs.ui_text and '"Home"' in obs.ui_text
