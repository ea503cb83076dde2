"""What a MiniWoB++ observation shows, in real headless Chromium: the task area only (never the page's reward
panel, its click trace or the START cover shown once an episode is done), at a fixed size, with element boxes
in the image's own pixels and mark tags that leave the text of small buttons visible."""

import numpy as np
import pytest

from rlsys.core.env import EnvSetupError
from rlsys.envs.tasks import miniwob_task
from rlsys.envs.web.miniwob import MiniWoBEnv
from rlsys.envs.web.spaces import WebAction, coords
from tests.conftest import make_config

MAGENTA = (255, 0, 255)
# Paints the page's own harness a colour the tasks never use: where it showed, the screenshot would say so.
PAINT_HARNESS = """
for (const id of ["reward-display", "click-canvas", "sync-task-cover"]) {
  const el = document.getElementById(id);
  el.style.background = "#f0f";
  el.style.color = "#f0f";
}
"""
# Each listed element's bounding box and, for buttons, the boxes of its text, in viewport pixels.
DOM_BOXES = """
return window.__rlsysElements.map((el) => {
  const r = el.getBoundingClientRect();
  const range = document.createRange();
  range.selectNodeContents(el);
  const rects = el.tagName === "BUTTON" ? [...range.getClientRects()] : [];
  return {box: [r.left, r.top, r.right, r.bottom], text: rects.map((t) => [t.left, t.top, t.right, t.bottom])};
});
"""
# Whether a click at viewport point arguments[1] reaches listed element arguments[0].
HITS = "return window.__rlsysElements[arguments[0]].contains(document.elementFromPoint(...arguments[1]));"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = MiniWoBEnv(make_config(tmp_path_factory.mktemp("miniwob")).env, "observation")
    yield e
    e.close()


@pytest.fixture(scope="module")
def tap_env(tmp_path_factory):
    cfg = make_config(tmp_path_factory.mktemp("miniwob")).env
    cfg.action_space = "coords"  # AutoUI's points, as fractions of the image
    e = MiniWoBEnv(cfg, "taps")
    yield e
    e.close()


def shows(obs, color) -> bool:
    return bool((obs.screenshot == color).all(axis=-1).any())


def index_of(obs, text):
    return next(i for i, e in enumerate(obs.extras["elements"]) if e["text"] == text)


def test_no_reward_panel_click_trace_or_done_cover_in_any_screenshot(env):
    obs = env.reset(miniwob_task("click-test-2", 5, "train"))
    env.step(f"click [{index_of(obs, 'ONE')}]")  # rewarded: the panel now reads "Last reward: 1.00"
    obs = env.reset(miniwob_task("click-test-2", 6, "train"))
    env.driver.execute_script(PAINT_HARNESS)
    obs = env.step("noop").observation  # an unparsable action, observed all the same
    assert not shows(obs, MAGENTA), "the reward panel or the click trace is in the screenshot"
    result = env.step(f"click [{index_of(obs, 'ONE')}]")
    assert result.done and result.reward == 1.0
    final = result.observation
    assert env.driver.execute_script("return WOB_DONE_GLOBAL && core.cover_div.style.display") == "block"
    assert not shows(final, MAGENTA), "the START cover shown after the episode is in the final screenshot"
    assert tuple(final.screenshot[5, 5]) == (255, 255, 0), "the final screenshot shows the task (its instruction)"
    scale = env.cfg.task_area_scale
    assert final.screenshot.shape == obs.screenshot.shape == (210 * scale, 160 * scale, 3)  # the task area


def test_element_boxes_are_in_image_pixels_and_a_tap_at_a_box_centre_clicks_that_element(tap_env):
    for seed in (3, 7):
        obs = tap_env.reset(miniwob_task("click-button", seed, "train"))
        height, width, _ = obs.screenshot.shape
        scale = width / 160  # the image is the 160x210 task area, enlarged
        assert scale == int(scale) and height == 210 * scale
        elements = obs.extras["elements"]
        assert len(elements) >= 2
        for index, (element, dom) in enumerate(zip(elements, tap_env.driver.execute_script(DOM_BOXES))):
            left, top, w, h = element["box"]
            assert 0 <= left and 0 <= top and left + w <= width and top + h <= height
            assert np.allclose([left, top, left + w, top + h], np.array(dom["box"]) * scale, atol=scale)
            x, y = element["point"]
            assert tap_env.driver.execute_script(HITS, index, [x / scale, y / scale])
        wanted = obs.task.split('"')[1]
        left, top, w, h = elements[index_of(obs, wanted)]["box"]
        tap = WebAction("tap", point=((left + w / 2) / width, (top + h / 2) / height))
        result = tap_env.step(coords.render(tap))
        assert result.done and result.reward == 1.0, (seed, wanted)


def outlines(elements, shape) -> np.ndarray:
    """Where the marks' box outlines go (two pixels inside each box's edges)."""
    mask = np.zeros(shape[:2], dtype=bool)
    for element in elements:
        left, top, width, height = element["box"]
        inside = np.zeros_like(mask)
        inside[top : top + height, left : left + width] = True
        inside[top + 2 : top + height - 2, left + 2 : left + width - 2] = False
        mask |= inside
    return mask


@pytest.mark.parametrize("name", ["click-test-2", "click-button"])
def test_mark_tags_leave_the_text_of_small_buttons_visible(env, name):
    checked = 0
    for seed in range(1, 9):
        env.cfg.set_of_marks = True
        marked = env.reset(miniwob_task(name, seed, "train"))
        env.cfg.set_of_marks = False
        try:
            clean = env.step("noop").observation  # the same page, unmarked
        finally:
            env.cfg.set_of_marks = True
        elements = marked.extras["elements"]
        tags = (marked.screenshot != clean.screenshot).any(axis=-1) & ~outlines(elements, marked.screenshot.shape)
        assert tags.any(), "the tags are drawn"
        for element, dom in zip(elements, env.driver.execute_script(DOM_BOXES)):
            box, page_box = element["box"], dom["box"]
            scale = box[2] / (page_box[2] - page_box[0])
            for text in dom["text"]:  # the text's box in image pixels, from where it sits in its element
                x0, y0, x1, y1 = (round(box[i % 2] + (text[i] - page_box[i % 2]) * scale) for i in range(4))
                assert not tags[y0:y1, x0:x1].any(), f"seed {seed}: a tag covers the text of {element['text']!r}"
                checked += 1
    assert checked >= 16


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [("viewport", [150, 400], "must hold MiniWoB"), ("task_area_scale", 1.5, "whole number")],
)
def test_a_viewport_smaller_than_the_task_area_or_a_fractional_scale_is_refused(tmp_path, setting, value, message):
    cfg = make_config(tmp_path).env
    setattr(cfg, setting, value)
    with pytest.raises(EnvSetupError, match=message):
        MiniWoBEnv(cfg)
