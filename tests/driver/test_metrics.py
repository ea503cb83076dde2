import json
import re

from rlsys.config import redacted_dict, to_dict
from rlsys.metrics import MetricsLogger, eval_table, read_metrics
from tests.conftest import make_config


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

    offline_runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert offline_runs, "wandb wrote no offline run"
    # offline runs keep their config and history in the run's .wandb record file
    (record_file,) = offline_runs[0].glob("*.wandb")
    logged = record_file.read_bytes()
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

    (files,) = (run_dir / "wandb").glob("offline-run-*/files")
    (table_file,) = files.glob("media/table/eval/episodes_table_*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["task", "group", "outcome", "steps", "actions", "last screen"]
    rows = [row[:4] for row in table["data"]]
    assert rows == [["t1", "click-test-2", "success", 2], ["t2", "click-test-2", "failure", 1]]
    # the table's images travel in the run's record (wandb stages them as an artifact): one per episode
    (record_file,) = (run_dir / "wandb").glob("offline-run-*/*.wandb")
    images = set(re.findall(rb"media/images/[0-9a-f]+\.png", record_file.read_bytes()))
    assert len(images) == 2
