"""rlsys.report.run_report: a run folder made of real shards, metrics and PNG screenshots, turned into one offline HTML
page and checked in real headless Chromium (plots drawn, numbers right, filters, steps, no network)."""

import io
import json
import re
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from PIL import Image, ImageDraw
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from rlsys.cli.report import main
from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.data.shards import ShardWriter, to_table
from rlsys.report import run_report as report_module
from rlsys.report.run_report import RunReport, write_report
from tests.conftest import load

TASKS = ("click-test-2", "click-tab", "focus-text-2")
SIZE = (400, 300)
SHAPE = (40, 30, 159, 109)  # the red box on every first screenshot; also element 0's box
RED = (220, 20, 20)
STEP_COLORS = (RED, (30, 90, 220), (20, 160, 60), (240, 140, 0))
EVAL_AT = {  # iteration: (overall, per task) as the metrics record it
    0: (0.25, {"click-test-2": 0.5, "click-tab": 0.0, "focus-text-2": 0.25}),
    2: (0.625, {"click-test-2": 1.0, "click-tab": 0.5, "focus-text-2": 0.375}),
    4: (0.875, {"click-test-2": 1.0, "click-tab": 0.75, "focus-text-2": 0.875}),
}
TRAIN_OUTCOMES = {
    "click-test-2": ("success", "failure"),
    "click-tab": ("success", "timeout"),
    "focus-text-2": ("failure", "success"),
}
PARSE_ERROR_ID = "train-it4-click-tab-timeout"
DIGIQ_ID = "scored-0"
VALUES_ID = "train-it3-click-test-2-success"
STORED_PROMPT = "Task: do it\nPrevious: click [0]\nElements:\n[0] button <b>ONE</b></s>"


def screenshot(label: str, step: int, size=SIZE) -> bytes:
    im = Image.new("RGB", size, (248, 248, 248))
    draw = ImageDraw.Draw(im)
    draw.rectangle(SHAPE, fill=STEP_COLORS[step % len(STEP_COLORS)])
    draw.rectangle((220, 150, 319, 189), outline=(0, 0, 0), width=2)
    draw.text((10, size[1] - 20), f"{label} step {step}", fill=(0, 0, 0))
    out = io.BytesIO()
    im.save(out, "PNG")
    return out.getvalue()


def observation(label: str, step: int, feedback=None, size=SIZE, pool=None, previous=()) -> Observation:
    """A screen with two elements; `pool` (a list of PNGs) gives screenshots without drawing new ones;
    `previous`, the episode's earlier action texts, as the runner gives them to the policy."""
    png = pool[hash((label, step)) % len(pool)] if pool else screenshot(label, step, size)
    elements = [
        {"tag": "button", "text": "ONE", "box": [SHAPE[0], SHAPE[1], 120, 80]},
        {"tag": "input", "text": "", "box": [220, 150, 100, 40]},
    ]
    return Observation(
        png,
        '[0] button "ONE"\n[1] input',
        f"file:///{label}.html",
        f"do {label}",
        {"elements": elements, "feedback": feedback, "previous_actions": list(previous)},
    )


def episode(
    tid: str, name: str, outcome: str, steps: int = 2, parse_error_at=None, suite="miniwob", size=SIZE, pool=None
):
    task = Task(
        f"{name}-seed7", f"Click the button in {name}", suite, "eval" if tid.startswith("eval") else "train", start=name
    )
    out = []
    for i in range(steps):
        bad = i == parse_error_at
        error = "could not parse 'clik [3]': expected click [N] or type [N] text" if bad else None
        feedback, previous = None if i == 0 else out[-1].error, [s.action_text for s in out]
        out.append(
            Step(
                observation(tid, i, feedback=feedback, size=size, pool=pool, previous=previous),
                "clik [3]" if bad else f"click [{i % 2}]",
                None if bad else {"kind": "click", "element": i % 2},
                0.0,
                False,
                3,
                -0.25 * (i + 1),
                {"act_s": 0.0123456, "env_s": 1.23456},
                error,
            )
        )
    last = out[-1]
    last.done, last.reward = True, 1.0 if outcome == "success" else 0.0
    if outcome in ("success", "failure"):
        reward = 1 if outcome == "success" else -1
        last.info["verdict"] = {
            "success": outcome == "success",
            "source": "miniwob",
            "reason": f"page reward {reward} (done)",
            "raw": "",
            "latency_s": 0.0,
            "score": None,
            "calls": 0,
            "cached": False,
            "error": None,
        }
    final = observation(tid, steps, feedback=last.error, size=size, pool=pool)
    return Trajectory(task, out, outcome, env_id="miniwob", runner_id="runner-0", id=tid, final_observation=final)


def with_digiq_scores(traj: Trajectory, j: int) -> Trajectory:
    for i, step in enumerate(traj.steps):
        q = [0.5 + 0.1 * i, 0.812, 0.25]
        v = 0.4
        step.info["digiq"] = {
            "candidates": [step.action_text, "press home", "type [1] hello"],
            "q": q,
            "v": v,
            "advantage": [round(x - v, 6) for x in q],
            "best": 1,
            "representation": {"model": "tiny-vlm", "dim": 8},
        }
    traj.steps[-1].info["judge"] = {"verdicts": 1, "calls": 2, "cached": 0, "shortcuts": 0, "seconds": 0.5}
    return traj


def metrics_records() -> list[dict]:
    records = []
    for it in range(5):
        r = {"iteration": it, "policy_version": it}
        if it:
            r |= {
                "trajectories": 6 * it,
                "env_steps": 14 * it,
                "train/trajectories": 6,
                "train/success_rate": 0.3 + 0.1 * it,
                **{f"train/success_rate/{t}": min(1.0, 0.2 * it + 0.1 * k) for k, t in enumerate(TASKS)},
                "train/unknown": it % 2,
                "train/policy_lag": 0.5 * it,
                "time/env_steps_per_s": 10.0 + it,
                "replay/size": 6 * it,
                "replay/bytes": 1000 * it,
                "actor/loss": 2.0 / it,
                "critic/val_loss": 1.0 / it,
                "judge/calls": 3 * it,
                "judge/unknown_rate": 0.1,
                "train/judge_calls_per_trajectory": 0.5,
                "learner/train_s": 1.5,
                "time/iteration_s": 2.0,
            }
        if it in EVAL_AT:
            overall, tasks = EVAL_AT[it]
            r |= {
                "eval/success_rate": overall,
                "eval/episodes": 8,
                "eval/unknown": 0,
                "eval/env_errors": 0,
                **{f"eval/success_rate/{t}": v for t, v in tasks.items()},
            }
        records.append(r)
    return records


def write_metrics(run, records):
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def build_run(run) -> dict:
    """Iterations 1-4 of training (one shard each), evaluations at 0, 2 and 4, Digi-Q's scored data, a
    corrupt shard, metrics, config and provenance. Returns the trajectories by split."""
    run.mkdir(parents=True)
    write_metrics(run, metrics_records())
    (run / "config.yaml").write_text(
        "run:\n  name: report-test\nenv:\n  kind: miniwob\n  set_of_marks: false\n"
        "policy:\n  api:\n    auth_env: <redacted>\n"
    )
    (run / "run_info.json").write_text(json.dumps({"git_commit": "0123abc", "rlsys": "0.1.0", "host": "testbox"}))
    made = {"train": [], "eval": [], "scored": []}
    writer = ShardWriter(run / "trajectories", split="train")
    for it in range(1, 5):
        batch = [
            episode(
                f"train-it{it}-{name}-{outcome}",
                name,
                outcome,
                steps=2 + (it % 2),
                parse_error_at=1 if f"train-it{it}-{name}-{outcome}" == PARSE_ERROR_ID else None,
            )
            for name in TASKS
            for outcome in TRAIN_OUTCOMES[name]
        ]
        for t in batch:
            if t.id == VALUES_ID:  # as DigiRL's critics would annotate a step
                t.steps[0].info["digirl"] = {"value": 0.42, "next_value": 0.61, "advantage": 0.17}
                t.steps[1].info["prompt"] = STORED_PROMPT  # as a runner keeps it (the policy's ActionSample.prompt)
        writer.write(batch, it)
        made["train"] += batch
    eval_writer = ShardWriter(run / "eval", split="eval")
    for it in EVAL_AT:
        batch = [
            episode(f"eval-it{it}-{name}-{j}", name, "success" if j == 0 else "failure")
            for name in TASKS
            for j in range(2)
        ]
        eval_writer.write(batch, it)
        made["eval"] += batch
    scored = [
        with_digiq_scores(episode(f"scored-{j}", "aitw", "success" if j % 2 else "failure", suite="aitw-general"), j)
        for j in range(4)
    ]
    ShardWriter(run / "scored", split="scored").write(scored, 4)
    made["scored"] = scored
    (run / "trajectories" / "shard-000009.parquet").write_bytes(b"this is not parquet \x00\x01\x02" * 50)
    return made


def embedded(html: str) -> tuple[list[dict], dict[int, dict]]:
    """The trajectory index and details a report embeds."""
    index = json.loads(re.search(r'<script type="application/json" id="traj-index">(.*?)</script>', html, re.S)[1])
    details = {
        int(k): json.loads(v)
        for k, v in re.findall(r'<script type="application/json" id="d-(\d+)" class="traj">(.*?)</script>', html, re.S)
    }
    return index, details


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    run = tmp_path_factory.mktemp("report") / "run"
    made = build_run(run)
    t0 = time.perf_counter()
    path = write_report(run)
    print(f"report of the test run: {path.stat().st_size / 1e6:.2f} MB in {time.perf_counter() - t0:.2f} s")
    return path, made


def severe_console_errors(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def open_trajectory(driver, trajectory_id: str):
    search = driver.find_element(By.ID, "f-search")
    search.clear()
    search.send_keys(trajectory_id)
    rows = driver.find_elements(By.CSS_SELECTOR, "#traj-list tbody tr")
    assert len(rows) == 1, [r.text for r in rows]
    rows[0].click()
    return driver.find_element(By.ID, "traj-detail")


def test_header_names_the_corrupt_shard_and_counts_what_was_read(report, browser):
    path, made = report
    load(browser, path)
    header = browser.find_element(By.TAG_NAME, "header").text
    assert "report-test" in browser.find_element(By.TAG_NAME, "h1").text
    problem = browser.find_element(By.CSS_SELECTOR, "header .problem").text
    assert "shard-000009.parquet" in problem and "not a readable trajectory shard" in problem
    total = sum(len(v) for v in made.values())
    steps = sum(len(t.steps) for v in made.values() for t in v)
    assert f"{total} ({len(made['eval'])} eval, {len(made['train'])} train, {len(made['scored'])} scored)" in header
    assert f"{steps}\nsteps" in header
    assert "8 (3 eval, 1 scored, 4 train)" in header  # the corrupt one is not counted as read
    assert browser.find_element(By.ID, "traj-count").text == f"{total} of {total} trajectories"
    assert "0123abc" in browser.find_element(By.ID, "provenance").text
    assert severe_console_errors(browser) == []


def test_svg_plots_are_drawn_with_axes_and_lines(report, browser):
    load(browser, report[0])
    figures = {
        f.get_attribute("data-key"): f for f in browser.find_elements(By.CSS_SELECTOR, "#curves > .plots > figure")
    }
    for key in (  # drawn against iterations until the page's axis switch says otherwise
        "eval/success_rate",
        "train/success_rate",
        "actor/loss",
        "critic/val_loss",
        "time/env_steps_per_s",
        "train/policy_lag",
        "replay/size",
        "judge/calls",
        "judge/unknown_rate",
        "eval/unknown",
    ):
        assert key in figures, f"no plot of {key}: {sorted(figures)}"
        svg = figures[key].find_element(By.CSS_SELECTOR, 'svg[data-x="iteration"]')
        assert svg.size["width"] > 200 and svg.size["height"] > 100
        lines = svg.find_elements(By.TAG_NAME, "polyline")
        assert lines and all(len(line.get_attribute("points").split()) >= 2 for line in lines)
        assert len(svg.find_elements(By.CSS_SELECTOR, "text.tick")) >= 6
    evaluation = figures["eval/success_rate"].find_element(By.CSS_SELECTOR, 'svg[data-x="iteration"]')
    assert len(evaluation.find_elements(By.TAG_NAME, "polyline")) == 1 + len(TASKS)  # overall and each task
    legend = figures["eval/success_rate"].find_elements(By.CSS_SELECTOR, ".lg")
    assert [e.text for e in legend] == ["overall", *sorted(TASKS)]
    assert len(evaluation.find_element(By.CSS_SELECTOR, ".series.main").find_elements(By.TAG_NAME, "circle")) == 3
    # the overall line rises from 25% to 87.5%: its last point lies above its first on screen
    points = [
        tuple(map(float, p.split(",")))
        for p in evaluation.find_element(By.CSS_SELECTOR, ".series.main polyline").get_attribute("points").split()
    ]
    assert points[-1][1] < points[0][1] and points[-1][0] > points[0][0]
    others = browser.find_elements(By.CSS_SELECTOR, "details.more figure")
    assert {"learner/train_s", "replay/bytes"} <= {f.get_attribute("data-key") for f in others}


def test_eval_table_holds_each_evaluation(report, browser):
    load(browser, report[0])
    rows = browser.find_elements(By.CSS_SELECTOR, "#eval-table tbody tr")
    assert [r.get_attribute("data-iteration") for r in rows] == ["0", "2", "4"]
    for row in rows:
        overall, tasks = EVAL_AT[int(row.get_attribute("data-iteration"))]
        cells = {c.get_attribute("data-task"): c.text for c in row.find_elements(By.CSS_SELECTOR, "td[data-task]")}
        assert cells == {"overall": f"{100 * overall:.1f}%", **{t: f"{100 * v:.1f}%" for t, v in tasks.items()}}
    assert rows[1].find_elements(By.TAG_NAME, "td")[2].text == "8"  # episodes


def test_filters_change_the_list(report, browser):
    path, made = report
    load(browser, path)
    everything = [t for v in made.values() for t in v]

    def listed():
        return browser.find_elements(By.CSS_SELECTOR, "#traj-list tbody tr")

    assert len(listed()) == len(everything)
    assert [r.find_elements(By.TAG_NAME, "td")[1].text for r in listed()[:2]] == ["eval", "eval"]  # newest first
    assert listed()[0].find_elements(By.TAG_NAME, "td")[2].text == "4"
    Select(browser.find_element(By.ID, "f-outcome")).select_by_value("success")
    successes = sum(t.outcome == "success" for t in everything)
    assert len(listed()) == successes < len(everything)
    assert {r.get_attribute("data-outcome") for r in listed()} == {"success"}
    Select(browser.find_element(By.ID, "f-task")).select_by_value("click-tab")
    assert len(listed()) == sum(t.outcome == "success" and t.task.start == "click-tab" for t in everything)
    assert browser.find_element(By.ID, "traj-count").text.startswith(f"{len(listed())} of ")
    Select(browser.find_element(By.ID, "f-outcome")).select_by_value("")
    Select(browser.find_element(By.ID, "f-split")).select_by_value("eval")
    assert len(listed()) == sum(t.task.start == "click-tab" for t in made["eval"])
    Select(browser.find_element(By.ID, "f-iteration")).select_by_value("2")
    assert {r.find_elements(By.TAG_NAME, "td")[2].text for r in listed()} == {"2"}
    assert len(listed()) == 2


def test_a_step_shows_its_screenshot_action_error_and_verdict(report, browser):
    load(browser, report[0])
    detail = open_trajectory(browser, PARSE_ERROR_ID)
    steps = detail.find_elements(By.CSS_SELECTOR, ".step")
    assert len(steps) == 2 + 1  # iteration 4's episodes have two steps, then the final observation
    bad = steps[1].text
    assert "clik [3]" in bad and "none (did not parse)" in bad and "could not parse 'clik [3]'" in bad
    assert "could not parse" in steps[2].text  # the next screen's feedback about it
    assert "final observation" in steps[-1].text
    image = steps[0].find_element(By.TAG_NAME, "img")
    assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image) == 320
    # the thumbnail shows the red box where the screenshot had it (scaled 400 -> 320)
    pixel = browser.execute_script(
        """
        var img = arguments[0], c = document.createElement('canvas');
        c.width = img.naturalWidth; c.height = img.naturalHeight;
        var g = c.getContext('2d'); g.drawImage(img, 0, 0);
        return Array.from(g.getImageData(arguments[1], arguments[2], 1, 1).data);""",
        image,
        80,
        56,
    )
    assert pixel[0] > 180 and pixel[1] < 70 and pixel[2] < 70, pixel
    background = browser.execute_script(
        """
        var img = arguments[0], c = document.createElement('canvas');
        c.width = img.naturalWidth; c.height = img.naturalHeight;
        var g = c.getContext('2d'); g.drawImage(img, 0, 0);
        return Array.from(g.getImageData(300, 10, 1, 1).data);""",
        image,
    )
    assert min(background[:3]) > 230, background
    # env.set_of_marks is off in this run, so the element boxes are drawn over the screenshot
    marks = steps[0].find_element(By.CSS_SELECTOR, "svg.marks")
    assert marks.is_displayed() and len(marks.find_elements(By.TAG_NAME, "rect")) == 2
    image.click()
    zoom = browser.find_element(By.ID, "zoom")
    assert zoom.is_displayed() and zoom.find_element(By.TAG_NAME, "img").size["width"] > 320
    zoom.click()
    assert not zoom.is_displayed()

    detail = open_trajectory(browser, VALUES_ID)
    assert "page reward 1 (done)" in detail.text and "success (miniwob)" in detail.text
    assert '"advantage": 0.17' in detail.find_element(By.CSS_SELECTOR, ".step").text  # DigiRL's values, step 0


def test_digiq_candidates_show_q_v_and_advantage(report, browser):
    load(browser, report[0])
    detail = open_trajectory(browser, DIGIQ_ID)
    table = detail.find_elements(By.CSS_SELECTOR, "table.cands")[1]  # the second step's
    rows = [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in table.find_elements(By.TAG_NAME, "tr")[1:]]
    assert rows == [
        ["0 (data)", "click [1]", "0.600", "0.200"],
        ["1", "press home", "0.812", "0.412"],
        ["2", "type [1] hello", "0.250", "-0.150"],
    ]
    assert len(table.find_elements(By.CSS_SELECTOR, "td.best")) == 4  # the best candidate's row
    assert "V(s) = 0.400, best candidate #1" in detail.text
    assert '"calls": 2' in detail.text  # the judge's record on the last step


def test_nothing_is_requested_from_the_network(report, browser):
    path = report[0]
    load(browser, path)
    open_trajectory(browser, DIGIQ_ID).find_element(By.TAG_NAME, "img").click()
    browser.find_element(By.ID, "zoom").click()
    browser.network_log += browser.get_log("performance")
    urls = [
        m["params"]["request"]["url"]
        for m in (json.loads(e["message"])["message"] for e in browser.network_log)
        if m["method"] == "Network.requestWillBeSent"
    ]
    assert path.as_uri() in urls
    assert [u for u in urls if u != path.as_uri() and not u.startswith("data:")] == []
    assert severe_console_errors(browser) == []


def shot_fraction(driver, step, selector: str) -> tuple[float, float]:
    """Where the centre of the overlay shape `selector` appears on the step's screenshot, as fractions of the
    displayed image (what a reader sees, whatever the thumbnail's scale)."""
    return tuple(
        driver.execute_script(
            """
            var step = arguments[0], img = step.querySelector('.shot img').getBoundingClientRect();
            var r = step.querySelector(arguments[1]).getBoundingClientRect();
            return [(r.left + r.width / 2 - img.left) / img.width, (r.top + r.height / 2 - img.top) / img.height];""",
            step,
            selector,
        )
    )


def attributes(element, *names) -> list[float]:
    return [float(element.get_attribute(n)) for n in names]


def test_the_action_is_drawn_on_its_screenshot(report, browser):
    """A click is drawn on its screenshot: the element's box outlined and the point the env clicks (the box's
    centre) marked, where the reader sees them on the thumbnail; an action that did not parse draws nothing."""
    load(browser, report[0])
    steps = open_trajectory(browser, VALUES_ID).find_elements(By.CSS_SELECTOR, ".step")
    for step, (box, centre) in zip(steps, [((40, 30, 120, 80), (100, 70)), ((220, 150, 100, 40), (270, 170))]):
        acts = step.find_element(By.CSS_SELECTOR, ".shot svg.acts")
        assert acts.get_dom_attribute("viewBox") == f"0 0 {SIZE[0]} {SIZE[1]}"
        assert attributes(acts.find_element(By.CSS_SELECTOR, "rect.act-box"), "x", "y", "width", "height") == list(box)
        assert attributes(acts.find_element(By.CSS_SELECTOR, "circle.act-point"), "cx", "cy") == list(centre)
        x, y = shot_fraction(browser, step, "circle.act-point")
        assert abs(x - centre[0] / SIZE[0]) < 0.01 and abs(y - centre[1] / SIZE[1]) < 0.01, (x, y)
    assert steps[0].find_element(By.CSS_SELECTOR, ".act-label").text == "click [0]"
    assert steps[1].find_element(By.CSS_SELECTOR, ".act-label").text == "click [1]"
    browser.find_element(By.ID, "acts-toggle").click()
    assert not steps[0].find_element(By.CSS_SELECTOR, "svg.acts").is_displayed()
    browser.find_element(By.ID, "acts-toggle").click()
    assert steps[0].find_element(By.CSS_SELECTOR, "svg.acts").is_displayed()

    unparsed = open_trajectory(browser, PARSE_ERROR_ID).find_elements(By.CSS_SELECTOR, ".step")[1]
    assert unparsed.find_elements(By.CSS_SELECTOR, "svg.acts, .act-label") == []
    assert severe_console_errors(browser) == []


def action_steps(name: str, actions: list[tuple[str, dict | None, str]], size, elements) -> Trajectory:
    """An episode of the given (action text, parsed action, location) steps on blank screens of `size`."""
    task = Task(f"{name}-1", f"act on {name}", "miniwob", start=name)
    steps = [
        Step(
            Observation(screenshot(name, i, size), "", location, f"act on {name}", {"elements": elements}),
            text,
            action,
            0.0,
            i == len(actions) - 1,
            1,
            None,
        )
        for i, (text, action, location) in enumerate(actions)
    ]
    return Trajectory(task, steps, "failure", id=name)


def test_web_and_android_actions_are_drawn(tmp_path, browser):
    """Actions as the web env and the Android env parse them: typed text shown at its element, a scroll arrow
    in its direction, a click at the point the page's hit test found, a tap at its fraction of the screen,
    a swipe's arrow, Android's typed text along the bottom, and keys named in the label."""
    from rlsys.envs.android.actions import parse_action
    from rlsys.envs.web.spaces import WebAction

    elements = [
        {"tag": "button", "text": "ONE", "box": [40, 30, 120, 80]},
        {"tag": "input", "text": "", "box": [220, 150, 100, 40]},
        {"tag": "a", "text": "Docs", "box": [300, 20, 80, 60], "point": [333, 44]},
    ]
    shop = "https://shop.example.com/catalog/shoes?page="
    web = action_steps(
        "web",
        [
            ("type [1] hello", WebAction("type", 1, "hello", submit=True).to_dict(), shop + "1"),
            ("scroll down", WebAction("scroll", direction="down").to_dict(), shop + "1"),
            ("click [2]", WebAction("click", 2).to_dict(), shop + "2"),
            ("tap", WebAction("tap", point=(0.25, 0.5)).to_dict(), "https://other.example.org/"),
            ("goto", WebAction("goto", url="https://example.org/x").to_dict(), "https://other.example.org/"),
            ("click [7]", WebAction("click", 7).to_dict(), "https://other.example.org/"),
        ],
        SIZE,
        elements,
    )
    phone = (270, 570)
    android = action_steps(
        "android",
        [
            (text, parse_action(text, "cogagent").to_dict(), "com.android.chrome")
            for text in (
                "Grounded Operation: tap [[250,500]]",
                "Grounded Operation: swipe up",
                'Grounded Operation: type "hi there"',
                "Grounded Operation: press back",
            )
        ],
        phone,
        [],
    )
    run = tmp_path / "actions"
    ShardWriter(run / "trajectories", split="train").write([web, android], 1)
    load(browser, write_report(run))

    steps = open_trajectory(browser, "web").find_elements(By.CSS_SELECTOR, ".step")
    typed = steps[0].find_element(By.CSS_SELECTOR, "svg.acts text.act-text")
    assert typed.text == "hello ⏎" and attributes(typed, "x")[0] == 220 and attributes(typed, "y")[0] > 150 + 40
    assert attributes(steps[0].find_element(By.CSS_SELECTOR, "circle.act-point"), "cx", "cy") == [270, 170]
    assert steps[0].find_element(By.CSS_SELECTOR, ".act-label").text == 'type [1] "hello" + Enter'
    x1, y1, x2, y2 = attributes(steps[1].find_element(By.CSS_SELECTOR, "line.act-arrow"), "x1", "y1", "x2", "y2")
    assert (x1, y1) == (200, 150) and x2 == 200 and y2 > y1 + 40  # the window scrolls down
    assert attributes(steps[2].find_element(By.CSS_SELECTOR, "circle.act-point"), "cx", "cy") == [333, 44]
    assert attributes(steps[3].find_element(By.CSS_SELECTOR, "circle.act-point"), "cx", "cy") == [100, 150]
    assert steps[4].find_elements(By.CSS_SELECTOR, "svg.acts > *") == []
    assert steps[4].find_element(By.CSS_SELECTOR, ".act-label").text == "goto https://example.org/x"
    assert steps[5].find_elements(By.CSS_SELECTOR, "svg.acts > *") == []
    assert steps[5].find_element(By.CSS_SELECTOR, ".act-label").text == "click [7] (no element [7] on this screen)"
    # a location like the step before's is shortened; the full one is its tooltip
    where = [s.find_element(By.CSS_SELECTOR, "pre.location") for s in steps]
    assert [w.text for w in where] == [
        shop + "1",
        "same as step 0",
        "…/shoes?page=2",
        "https://other.example.org/",
        "same as step 3",
        "same as step 3",
    ]
    assert where[2].get_attribute("title") == shop + "2"

    steps = open_trajectory(browser, "android").find_elements(By.CSS_SELECTOR, ".step")
    assert steps[0].find_element(By.CSS_SELECTOR, "svg.acts").get_dom_attribute("viewBox") == "0 0 270 570"
    assert attributes(steps[0].find_element(By.CSS_SELECTOR, "circle.act-point"), "cx", "cy") == [67.5, 285]
    x, y = shot_fraction(browser, steps[0], "circle.act-point")
    assert abs(x - 0.25) < 0.01 and abs(y - 0.5) < 0.01, (x, y)
    x1, y1, x2, y2 = attributes(steps[1].find_element(By.CSS_SELECTOR, "line.act-arrow"), "x1", "y1", "x2", "y2")
    assert (x1, y1) == (135, 285) and x2 == 135 and y2 < y1  # the finger moves up
    assert steps[1].find_element(By.CSS_SELECTOR, "polygon.act-head")
    typed = steps[2].find_element(By.CSS_SELECTOR, "text.act-text")
    assert typed.text == "hi there" and attributes(typed, "x")[0] == 135 and attributes(typed, "y")[0] > 500
    assert steps[3].find_element(By.CSS_SELECTOR, ".act-label").text == "back"
    assert severe_console_errors(browser) == []


def test_a_step_shows_the_model_output_and_what_the_policy_was_given(report, browser):
    """The raw model output, the prompt as the model read it where the step stored one, and the policy's inputs;
    timings rounded to three digits in ms or s; a location repeated from the step before shortened."""
    load(browser, report[0])
    step = open_trajectory(browser, VALUES_ID).find_elements(By.CSS_SELECTOR, ".step")[2]
    rows = {
        r.find_element(By.TAG_NAME, "th").text: r.find_element(By.TAG_NAME, "td")
        for r in step.find_elements(By.CSS_SELECTOR, ".fields > table > tr")
    }
    assert rows["model output"].text == "click [0]"
    assert rows["timings"].text == "act 12.3 ms · env 1.23 s"
    assert rows["location"].text == "same as step 0"
    assert rows["location"].find_element(By.TAG_NAME, "pre").get_attribute("title") == f"file:///{VALUES_ID}.html"
    given = rows["policy input"]
    given.find_element(By.TAG_NAME, "summary").click()
    assert "has no stored prompt" in given.text and not given.find_elements(By.CSS_SELECTOR, "pre.prompt")
    inputs = {r.find_element(By.TAG_NAME, "th").text: r.text for r in given.find_elements(By.CSS_SELECTOR, "tr")}
    assert inputs["instruction"].endswith(f"do {VALUES_ID}")
    assert inputs["earlier actions"].endswith("1. click [0]\n2. click [1]")
    assert inputs["element list"].endswith('[0] button "ONE"\n[1] input')

    before = open_trajectory(browser, VALUES_ID).find_elements(By.CSS_SELECTOR, ".step")[1]
    given = before.find_element(By.CSS_SELECTOR, "details.input")
    given.find_element(By.TAG_NAME, "summary").click()
    assert given.find_element(By.TAG_NAME, "summary").text.startswith("prompt, instruction")
    assert "The prompt as the model read it" in given.text
    assert given.find_element(By.CSS_SELECTOR, "pre.prompt").text == STORED_PROMPT  # as text, never as markup
    assert "info" not in {
        r.find_element(By.TAG_NAME, "th").text for r in before.find_elements(By.CSS_SELECTOR, ".fields > table > tr")
    }
    assert severe_console_errors(browser) == []


def other_run(folder, name: str, scale: float):
    """A run folder with metrics only: the test run's, every success rate scaled by `scale`."""
    folder.mkdir()
    records = [
        {k: (v * scale if "success_rate" in k else v) for k, v in r.items() if k != "env_steps"}
        for r in metrics_records()
    ]
    write_metrics(folder, records)
    (folder / "config.yaml").write_text(f"run:\n  name: {name}\n")
    return folder


def visible_plot(figure):
    return next(s for s in figure.find_elements(By.CSS_SELECTOR, ".plot-x") if s.is_displayed())


def point_titles(svg, series: str = ".series") -> list[str]:
    return [t.get_attribute("textContent") for t in svg.find_elements(By.CSS_SELECTOR, f"{series} circle title")]


def test_several_runs_are_overlaid_on_one_page(report, tmp_path, browser, monkeypatch):
    """rlsys-report RUN_A RUN_B: each metric drawn once with a line per run, in one colour per run, and a
    legend naming the runs; the page goes to ./report-compare.html unless --out says otherwise."""
    run_a, run_b = report[0].parent, other_run(tmp_path / "b", "other-run", 0.5)
    monkeypatch.chdir(tmp_path)
    assert main([str(run_a), str(run_b)]) == 0
    page = tmp_path / "report-compare.html"
    load(browser, page)
    assert browser.find_element(By.TAG_NAME, "h1").text == "2 runs compared"
    rows = browser.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr")
    assert [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in rows] == [
        ["report-test", str(run_a), "0–4", "56", "87.5% at iteration 4"],
        ["other-run", str(run_b), "0–4", "100", "43.8% at iteration 4"],  # env steps summed from steps/s
    ]
    figures = {f.get_attribute("data-key"): f for f in browser.find_elements(By.CSS_SELECTOR, "#curves figure")}
    for key in ("eval/success_rate", "train/success_rate", "actor/loss", "eval/success_rate/click-tab"):
        svg = figures[key].find_element(By.CSS_SELECTOR, 'svg[data-x="iteration"]')
        lines = svg.find_elements(By.TAG_NAME, "polyline")
        colours = [browser.execute_script("return getComputedStyle(arguments[0]).stroke", line) for line in lines]
        assert colours == ["rgb(31, 119, 180)", "rgb(214, 39, 40)"], key
        legend = [e.get_attribute("textContent") for e in figures[key].find_elements(By.CSS_SELECTOR, ".lg")]
        assert legend == ["report-test", "other-run"], key
    evaluation = figures["eval/success_rate"].find_element(By.CSS_SELECTOR, 'svg[data-x="iteration"]')
    assert point_titles(evaluation, '.series[data-s="1"]') == [
        "other-run at iteration 0: 12.5%",
        "other-run at iteration 2: 31.2%",
        "other-run at iteration 4: 43.8%",
    ]
    assert browser.find_elements(By.ID, "browser") == []
    assert severe_console_errors(browser) == []

    out = tmp_path / "ab.html"
    assert main([str(run_a), str(run_b), "--out", str(out), "--iterations", "3:"]) == 0
    assert "Iterations 3: only" in out.read_text() and "at iteration 2" not in out.read_text()
    assert main([str(run_a), str(tmp_path / "missing")]) == 2


def test_the_x_axis_switches_to_env_steps_and_time(report, tmp_path, browser):
    """The curves against iterations, then the env steps the metrics count, then the time spent collecting and
    updating (the sum of time/iteration_s, 2 s an iteration here); where env_steps is not recorded, it is
    summed from each iteration's steps per second times its seconds."""
    load(browser, report[0])
    evaluation = browser.find_element(By.CSS_SELECTOR, '#curves figure[data-key="eval/success_rate"]')
    overall = lambda: point_titles(visible_plot(evaluation), ".series.main")
    ticks = lambda: [t.text for t in visible_plot(evaluation).find_elements(By.CSS_SELECTOR, "text.tick")]
    assert overall() == [f"overall at iteration {it}: {rate}" for it, rate in ((0, "25%"), (2, "62.5%"), (4, "87.5%"))]
    by_iteration = ticks()
    browser.find_element(By.ID, "x-env_steps").click()
    assert overall() == [
        "overall at 0 env steps: 25%",
        "overall at 28 env steps: 62.5%",
        "overall at 56 env steps: 87.5%",
    ]
    assert ticks() != by_iteration and "env steps (training)" in visible_plot(evaluation).text
    browser.find_element(By.ID, "x-time").click()
    assert overall() == ["overall at 0 s: 25%", "overall at 4 s: 62.5%", "overall at 8 s: 87.5%"]
    assert "time/iteration_s" in browser.find_element(By.CSS_SELECTOR, ".axis-switch").text
    browser.find_element(By.ID, "x-iteration").click()
    assert overall()[1] == "overall at iteration 2: 62.5%"

    run = other_run(tmp_path / "no-env-steps", "derived", 1.0)  # 10 + it steps/s for 2 s each
    load(browser, write_report(run))
    browser.find_element(By.ID, "x-env_steps").click()
    loss = browser.find_element(By.CSS_SELECTOR, '#curves figure[data-key="actor/loss"]')
    assert [t.split(":")[0] for t in point_titles(visible_plot(loss))] == [
        f"actor/loss at {steps} env steps" for steps in (22, 46, 72, 100)
    ]
    assert severe_console_errors(browser) == []


def test_page_screenshot_is_not_blank(report, browser, tmp_path_factory):
    load(browser, report[0])
    png = browser.get_screenshot_as_png()
    saved = tmp_path_factory.mktemp("report-screens") / "report.png"
    saved.write_bytes(png)
    page = Image.open(io.BytesIO(png)).convert("RGB")
    assert len(page.getcolors(1 << 20)) > 50, f"a blank-looking page: {saved}"
    plot = browser.find_element(By.CSS_SELECTOR, "#curves figure svg")
    image = Image.open(io.BytesIO(plot.screenshot_as_png)).convert("RGB")
    assert image.width > 200 and len(image.getcolors(1 << 20)) > 10, f"a uniform plot: {saved}"
    print(f"page screenshot: {saved}")


def test_max_trajectories_keeps_one_of_each_kind_then_the_newest_evaluations(report, tmp_path):
    run, made = report[0].parent, report[1]
    two = embedded(write_report(run, tmp_path / "two.html", max_trajectories=2).read_text())
    assert len(two[0]) == len(two[1]) == 2
    assert {(r["split"], r["iteration"]) for r in two[0]} == {("eval", 4)}
    strata = {
        (split, t.task.start if split != "scored" else "aitw-general", t.outcome)
        for split, ts in made.items()
        for t in ts
    }
    index, details = embedded(write_report(run, tmp_path / "strata.html", max_trajectories=len(strata)).read_text())
    assert {(r["split"], r["group"], r["outcome"]) for r in index} == strata
    assert len(details) == len(strata)


def test_a_small_byte_budget_omits_screenshots_with_a_note(report, tmp_path):
    full = report[0].read_text()
    small = write_report(report[0].parent, tmp_path / "small.html", max_bytes=40_000).read_text()
    assert 0 < small.count("data:image/jpeg") < full.count("data:image/jpeg") / 4
    assert "screenshot(s) omitted" in small and "screenshot(s) omitted" not in full
    _, details = embedded(small)
    notes = [s.get("img_note") for d in details.values() for s in d["steps"]]
    assert "screenshot omitted: the report reached its size budget (--max-bytes)" in notes
    assert len(small) < len(full) / 2


def write_legacy_shard(path, trajectories):
    """A shard as runs wrote them before the grouping columns (split, iteration, task_id, ...) existed."""
    table = to_table(trajectories)
    table = table.drop_columns(
        [c for c in ("task_id", "task_group", "split", "iteration", "is_final") if c in table.column_names]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def test_older_runs_infer_iterations_from_shard_order(tmp_path):
    """The older layout (eval/ and scored/ inside trajectories/), shards without split or iteration columns, and
    an offline iteration that wrote no shard: iterations come from the metrics and the shards' order."""
    run = tmp_path / "old"
    records = [
        {"iteration": 0, "eval/success_rate": 0.5, "eval/episodes": 1},
        {"iteration": 1, "train/trajectories": 0, "actor/loss": 1.0},  # offline: no shard
        {"iteration": 2, "train/trajectories": 1},
        {"iteration": 3, "train/trajectories": 1, "eval/success_rate": 1.0, "eval/episodes": 1},
    ]
    run.mkdir()
    write_metrics(run, records)
    write_legacy_shard(
        run / "trajectories" / "shard-000000.parquet",
        [episode("a", "click-tab", "success"), episode("a2", "focus-text-2", "failure")],
    )
    write_legacy_shard(run / "trajectories" / "shard-000001.parquet", [episode("b", "click-tab", "failure")])
    ShardWriter(run / "trajectories", split="train").write([episode("c", "click-tab", "timeout")], 9)  # has its own
    write_legacy_shard(run / "trajectories" / "eval" / "shard-000000.parquet", [episode("e0", "click-tab", "failure")])
    write_legacy_shard(run / "trajectories" / "eval" / "shard-000001.parquet", [episode("e1", "click-tab", "success")])
    write_legacy_shard(
        run / "trajectories" / "scored" / "shard-000000.parquet",
        [with_digiq_scores(episode("s", "aitw", "success", suite="aitw-general"), 0)],
    )
    html = write_report(run).read_text()
    index, details = embedded(html)
    found = {r["id"]: (r["split"], r["iteration"], r["inferred"]) for r in index}
    assert found == {
        "a": ("train", 2, True),
        "a2": ("train", 2, True),
        "b": ("train", 3, True),
        "c": ("train", 9, False),
        "e0": ("eval", 0, True),
        "e1": ("eval", 3, True),
        "s": ("scored", None, False),
    }
    assert "iteration inferred from the shard" in html
    assert len(details) == 7 and all(d["steps"][0]["img"] is not None for d in details.values())
    assert details[next(r["k"] for r in index if r["id"] == "s")]["steps"][0]["digiq"]["best"] == 1


def test_iteration_range_limits_curves_table_and_trajectories(report, tmp_path):
    html = write_report(report[0].parent, tmp_path / "late.html", iterations="3:4").read_text()
    index, _ = embedded(html)
    assert {r["iteration"] for r in index} == {3, 4}
    assert {r["split"] for r in index} == {"train", "eval", "scored"}
    assert re.findall(r'<tr data-iteration="(\d+)">', html) == ["4"]


def test_a_rewrite_reads_only_the_new_shards(tmp_path, monkeypatch):
    run = tmp_path / "growing"
    writer = ShardWriter(run / "trajectories", split="train")
    for it in (1, 2):
        writer.write([episode(f"it{it}", "click-tab", "success")], it)
    read = []
    index_shard = report_module.index_shard
    monkeypatch.setattr(report_module, "index_shard", lambda shard: read.append(shard.path.name) or index_shard(shard))
    report = RunReport(run, max_trajectories=10)
    assert embedded(report.write().read_text())[0][0]["id"] == "it2"
    assert read == ["shard-000000.parquet", "shard-000001.parquet"]
    read.clear()
    writer.write([episode("it3", "click-tab", "failure")], 3)
    index, details = embedded(report.write().read_text())
    assert read == ["shard-000002.parquet"]
    assert [r["id"] for r in index] == ["it3", "it2", "it1"] and len(details) == 3


def test_empty_run_folder_gives_a_page_that_says_so(tmp_path, browser):
    """The header says there is nothing yet, and no empty panel is drawn below it."""
    (tmp_path / "empty").mkdir()
    path = write_report(tmp_path / "empty")
    load(browser, path)
    assert "Nothing here yet" in browser.find_element(By.TAG_NAME, "header").text
    assert [s.get_attribute("id") for s in browser.find_elements(By.TAG_NAME, "section")] == []
    assert "0 of 0" in browser.find_element(By.TAG_NAME, "header").text  # trajectories shown
    assert severe_console_errors(browser) == []


def test_offline_only_run_without_evaluation(tmp_path, browser):
    run = tmp_path / "offline"
    run.mkdir()
    write_metrics(
        run,
        [
            {
                "iteration": i,
                "policy_version": i,
                "train/trajectories": 0,
                "actor/loss": 1.0 / i,
                "critic/loss": 0.5 / i,
                "replay/size": 40,
            }
            for i in range(1, 4)
        ],
    )
    ShardWriter(run / "scored", split="scored").write(
        [with_digiq_scores(episode("s", "aitw", "failure", suite="aitw-general"), 0)], 3
    )
    load(browser, write_report(run))
    assert browser.find_elements(By.ID, "eval") == []  # no empty evaluation panel
    assert [s.get_attribute("id") for s in browser.find_elements(By.TAG_NAME, "section")] == [
        "curves",
        "browser",
    ]
    keys = [f.get_attribute("data-key") for f in browser.find_elements(By.CSS_SELECTOR, "#curves > .plots > figure")]
    assert keys == ["actor/loss", "critic/loss", "replay/size"]
    assert browser.find_element(By.ID, "traj-count").text == "1 of 1 trajectories"
    assert "Nothing here yet" not in browser.page_source
    assert severe_console_errors(browser) == []


def test_bad_metric_values_are_named_by_line_and_the_rest_is_drawn(tmp_path, browser):
    """A run folder whose metrics.jsonl holds a string where the report counts (eval/success_rate at iteration 2,
    train/trajectories at 3), a task's rate that is a list, a torn line and a record without an iteration."""
    run = tmp_path / "run"
    made = build_run(run)
    records = metrics_records()
    records[2] |= {"eval/success_rate": "x", "eval/success_rate/click-tab": [0.5]}
    records[3]["train/trajectories"] = "3"
    lines = [json.dumps(r) for r in records] + ['{"iteration": 5, "eval/succ', '{"note": "no iteration"}']
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    load(browser, write_report(run))
    problems = [p.text for p in browser.find_elements(By.CSS_SELECTOR, "header .problem")]
    assert "Could not read: metrics.jsonl line 3: eval/success_rate is 'x', not a number; left out" in problems
    assert "Could not read: metrics.jsonl line 3: eval/success_rate/click-tab is [0.5], not a number; left out" in (
        problems
    )
    assert "Could not read: metrics.jsonl line 4: train/trajectories is '3', not a number; left out" in problems
    skipped = "not a JSON record with a whole-number iteration; skipped"
    assert f"Could not read: metrics.jsonl line 6: {skipped}" in problems
    assert f"Could not read: metrics.jsonl line 7: {skipped}" in problems
    rows = browser.find_elements(By.CSS_SELECTOR, "#eval-table tbody tr")
    assert [r.get_attribute("data-iteration") for r in rows] == ["0", "2", "4"]
    cells = {c.get_attribute("data-task"): c.text for c in rows[1].find_elements(By.CSS_SELECTOR, "td[data-task]")}
    assert cells == {"overall": "—", "click-tab": "—", "click-test-2": "100.0%", "focus-text-2": "37.5%"}
    evaluation = browser.find_element(By.CSS_SELECTOR, '#curves figure[data-key="eval/success_rate"]')
    assert len(evaluation.find_element(By.CSS_SELECTOR, ".series.main").find_elements(By.TAG_NAME, "circle")) == 2
    total = sum(len(v) for v in made.values())
    assert browser.find_element(By.ID, "traj-count").text == f"{total} of {total} trajectories"
    assert severe_console_errors(browser) == []


@pytest.mark.timeout(30)
def test_a_metric_constant_but_for_rounding_is_drawn_on_a_finite_axis(tmp_path):
    """Two values a float apart (a mean that differs only in its last bit between iterations) once sent the tick
    loop round forever, its step too small to change the value, until the process ran out of memory."""
    run = tmp_path / "run"
    build_run(run)
    records = metrics_records()
    for r, value in zip(records, [0.7886736345976787, 0.7886736345976789] * len(records)):
        r["replay/mean_reward"] = value
    write_metrics(run, records)
    page = write_report(run).read_text()
    figure = re.search(r'<figure[^>]*data-key="replay/mean_reward".*?</figure>', page, re.S)
    assert figure is not None
    for svg in re.findall(r"<svg.*?</svg>", figure.group(0), re.S):  # one per x axis
        value_ticks = re.findall(r'<text class="tick"[^>]*text-anchor="end">([^<]+)<', svg)
        assert 2 <= len(value_ticks) <= 10, value_ticks


def test_cli(report, tmp_path, capsys):
    missing = tmp_path / "no-such-run"
    done = subprocess.run([sys.executable, "-m", "rlsys.cli.report", str(missing)], capture_output=True, text=True)
    assert done.returncode == 2 and str(missing) in done.stderr
    out = tmp_path / "cli.html"
    assert main([str(report[0].parent), "--out", str(out), "--max-trajectories", "3", "--max-bytes", "2M"]) == 0
    printed = capsys.readouterr().out
    assert str(out) in printed and " MB " in printed and printed.rstrip().endswith(" s")
    assert len(embedded(out.read_text())[1]) == 3
    with pytest.raises(SystemExit) as exit_info:
        main([str(report[0].parent), "--iterations", "x:y"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("rlsys ")


def test_a_large_run_stays_fast_and_paginates(tmp_path, browser):
    """40 iterations of 12 episodes of 6 steps at 1024x768, every 5th evaluated: the report reads only what it
    embeds and stops screenshots at its budget. (Screens come from a pool of 64, which keeps building the run
    quick; benchmarks with distinct screens are in the report's notes.)"""
    run = tmp_path / "large"
    run.mkdir()
    pool = [screenshot(f"screen {i}", i, (1024, 768)) for i in range(64)]
    records = [
        {
            "iteration": it,
            "policy_version": it,
            "train/trajectories": 12,
            "train/success_rate": it / 40,
            "actor/loss": 1 / it,
            **({"eval/success_rate": it / 40, "eval/episodes": 12} if it % 5 == 0 else {}),
        }
        for it in range(1, 41)
    ]
    write_metrics(run, records)
    writer, eval_writer = ShardWriter(run / "trajectories", split="train"), ShardWriter(run / "eval", split="eval")
    for it in range(1, 41):
        writer.write(
            [episode(f"t{it}-{j}", TASKS[j % 3], ("success", "failure")[j % 2], steps=6, pool=pool) for j in range(12)],
            it,
        )
        if it % 5 == 0:
            eval_writer.write(
                [episode(f"eval-{it}-{j}", TASKS[j % 3], "success", steps=3, pool=pool) for j in range(12)], it
            )
    t0 = time.perf_counter()
    path = write_report(run, max_bytes=100_000)
    seconds = time.perf_counter() - t0
    html = path.read_text()
    print(f"large run ({40 * 12 + 8 * 12} trajectories): {len(html) / 1e6:.2f} MB in {seconds:.2f} s")
    assert seconds < 30
    index, details = embedded(html)
    assert len(index) == len(details) == 200
    assert 0 < html.count("data:image/jpeg") < 64 and "screenshot(s) omitted" in html
    load(browser, path)
    assert browser.find_element(By.ID, "page-label").text == "page 1 / 4"
    first = browser.find_element(By.CSS_SELECTOR, "#traj-list tbody tr").get_attribute("data-k")
    browser.find_element(By.ID, "next").click()
    assert browser.find_element(By.ID, "page-label").text == "page 2 / 4"
    assert browser.find_element(By.CSS_SELECTOR, "#traj-list tbody tr").get_attribute("data-k") != first
    assert severe_console_errors(browser) == []
