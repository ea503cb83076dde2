import json
import re
import time

from rlsys.config import redacted_dict, to_dict
from rlsys.driver.metrics import MetricsLogger, eval_table, read_metrics
from tests.conftest import make_config


def written(read, ready, timeout_s: float = 60):
    """What `read()` gives once `ready` holds for it: wandb's service process may still be writing its
    offline files after `finish()` returns. After `timeout_s`, the last read, for the test to check."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            data = read()
        except (ValueError, FileNotFoundError, json.JSONDecodeError):  # not there yet, or half written
            data = None
        if data is not None and ready(data):
            return data
        if time.monotonic() > deadline:
            assert data is not None, f"wandb did not write it within {timeout_s} s"
            return data
        time.sleep(0.2)


def one(folder, pattern):
    (path,) = folder.glob(pattern)  # ValueError while wandb has not written it
    return path


def wandb_record(run_dir) -> bytes:
    return one(run_dir / "wandb", "offline-run-*/*.wandb").read_bytes()


def test_metrics_jsonl_wandb_offline_and_no_secret_in_wandb(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = make_config(tmp_path, metrics__wandb=True, metrics__wandb_api_key="do-not-log-me")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    logger = MetricsLogger(cfg, run_dir, redacted_dict(to_dict(cfg)), total=2)
    logger.log({"iteration": 0, "policy_version": 0, "eval/success_rate": 0.25}, advance=False)
    logger.log({"iteration": 1, "policy_version": 1, "train/success_rate": 0.5, "eval/success_rate": 0.75})
    logger.close()

    records = read_metrics(run_dir)
    assert [r["iteration"] for r in records] == [0, 1]
    assert "+50.0 points" in eval_table(records)

    # offline runs keep their config and history in the run's .wandb record file
    logged = written(lambda: wandb_record(run_dir), lambda data: b"redacted" in data and b"train/success_rate" in data)
    assert b"do-not-log-me" not in logged and b"redacted" in logged and b"train/success_rate" in logged
    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert history[1]["train/success_rate"] == 0.5


def test_an_evaluation_logs_its_episodes_to_wandb_as_a_table_with_images(tmp_path, monkeypatch):
    from tests.data.test_storage import trajectory

    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = make_config(tmp_path, metrics__wandb=True)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    logger = MetricsLogger(cfg, run_dir, redacted_dict(to_dict(cfg)), total=1)
    episodes = [trajectory(2, seed=1), trajectory(1, "failure", seed=2)]
    logger.log({"iteration": 0, "policy_version": 0, "eval/episodes": 2, "eval/success_rate": 0.5}, episodes=episodes)
    logger.close()

    tables = "offline-run-*/files/media/table/eval/episodes_table_*.table.json"
    table = written(lambda: json.loads(one(run_dir / "wandb", tables).read_text()), lambda table: bool(table["data"]))
    assert table["columns"] == ["task", "group", "outcome", "steps", "actions", "last screen"]
    rows = [row[:4] for row in table["data"]]
    assert rows == [["t1", "click-test-2", "success", 2], ["t2", "click-test-2", "failure", 1]]
    # the table's images travel in the run's record (wandb stages them as an artifact): one per episode
    images = written(
        lambda: set(re.findall(rb"media/images/[0-9a-f]+\.png", wandb_record(run_dir))), lambda found: len(found) >= 2
    )
    assert len(images) == 2


def test_every_record_carries_the_run_clock_which_a_resumed_session_continues(tmp_path):
    cfg = make_config(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = MetricsLogger(cfg, run_dir, {}, total=2)
    first.log({"iteration": 1})
    time.sleep(0.2)
    first.log({"iteration": 2})
    first.close()
    clocks = [r["time/run_s"] for r in read_metrics(run_dir)]
    assert 0 <= clocks[0] and clocks[1] - clocks[0] >= 0.2 - 0.001  # each clock is rounded to the millisecond
    time.sleep(0.5)  # the run stopped: this wait is not the run's time
    resumed = MetricsLogger(cfg, run_dir, {}, total=3, start=2)
    resumed.log({"iteration": 3})
    resumed.close()
    third = read_metrics(run_dir)[-1]["time/run_s"]
    assert clocks[1] <= third < clocks[1] + 0.4


def test_the_time_axis_is_the_run_clock_where_the_metrics_record_it():
    from rlsys.report.plots import TIME_NOTE, axes_of

    clocked = [{"iteration": 0, "time/run_s": 5.0}, {"iteration": 1, "time/iteration_s": 2.0, "time/run_s": 30.0}]
    axes = axes_of([clocked])
    assert axes.runs[0]["time"] == [5.0, 30.0] and axes.captions["time"] == "wall-clock time (s)"
    assert axes.time_note == ""
    older = [{"iteration": 1, "time/iteration_s": 2.0}, {"iteration": 2, "time/iteration_s": 3.0}]
    axes = axes_of([clocked, older])
    assert axes.runs[1]["time"] == [2.0, 5.0] and axes.captions["time"] == "time collecting and updating (s)"
    assert axes.time_note == TIME_NOTE


def test_the_closing_table_leaves_out_what_is_not_a_number():
    """A resumed run's metrics.jsonl may hold a damaged line from before: the table printed at the end of the run
    shows the rest."""
    records = [
        {"iteration": 0, "eval/success_rate": "x"},
        {"iteration": 4, "eval/success_rate": 0.25, "eval/success_rate/a": "0.5", "eval/success_rate/b": 0.0},
        {"iteration": 8, "eval/success_rate": 0.75, "eval/success_rate/a": 1.0},
    ]
    table = eval_table(records).splitlines()
    assert table[2].split() == ["4", "25.0%", "n/a", "0.0%"] and table[3].split() == ["8", "75.0%", "100.0%", "n/a"]
    assert table[-1] == "eval success 25.0% -> 75.0% (+50.0 points)"
