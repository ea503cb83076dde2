"""Whole training runs: sync and async loops, and a run killed with SIGKILL then resumed."""

import json
import time

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from rlsys.cli.eval import main as eval_main
from rlsys.config import to_dict
from rlsys.data import checkpoint
from rlsys.data.shards import read_trajectories
from rlsys.driver.metrics import read_metrics
from rlsys.driver.trainer import Trainer
from tests.conftest import SIMULATED_ENV, assert_no_browsers_left, make_config
from tests.support.train_command import kill_session, start_train

REQUIRED = {"iteration", "trajectories", "env_steps", "policy_version", "train/success_rate"}
# the loop's subject is not the browser or the model: a policy without transformers starts the actors sooner
SIMULATED = SIMULATED_ENV | {"policy__kind": "element_pointer"}


def run_trainer(cfg):
    trainer = Trainer(cfg, cfg.output_dir)
    try:
        return trainer.run()
    finally:
        trainer.shutdown()


@pytest.fixture(scope="module")
def sync_run(ray_session, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("sync")
    cfg = make_config(tmp_path, run__eval_every=2, run__eval_episodes=4, run__eval_at_start=True)
    t0 = time.time()
    records = run_trainer(cfg)
    assert_no_browsers_left(t0)
    return cfg, records


def test_sync_run_completes_with_metrics_eval_and_checkpoints(sync_run):
    cfg, records = sync_run
    assert [r["iteration"] for r in records] == [0, 1, 2]
    for r in records[1:]:
        assert REQUIRED <= r.keys()
    assert records[-1]["trajectories"] >= 8
    # a version is published per update that changed the policy (an iteration without successes does not)
    assert records[-1]["policy_version"] == sum(r["actor/updates"] > 0 for r in records[1:])
    assert records[0]["eval/episodes"] == 4 and "eval/success_rate" in records[2]
    # the staleness of the successes the update imitated (in sync mode too the sample reaches back over the
    # buffer, to what the first weights collected); none when it imitated nothing
    second = records[2]
    if second["learner/samples"]:
        lag, lag_max = second["train/policy_lag"], second["train/policy_lag_max"]
        assert 0 <= lag <= lag_max <= second["learner/trained_from_version"]
    else:
        assert second["train/policy_lag"] is None
    assert second["train/offline_in_sample"] == 0
    per_task = {k for r in records[1:] for k in r if k.startswith("train/success_rate/")}
    assert per_task and per_task <= {"train/success_rate/click-test-2", "train/success_rate/click-tab"}
    assert [p.name for p in checkpoint.complete_checkpoints(cfg.output_dir)] == ["000001", "000002"]
    stored = read_trajectories(cfg.output_dir / "trajectories")
    assert len(stored) == records[-1]["trajectories"]
    assert all(s.policy_version in (0, 1) for t in stored for s in t.steps)
    # evaluation episodes live beside the training data, not inside it
    training = pd.read_parquet(cfg.output_dir / "trajectories")
    assert set(training["split"]) == {"train"} and set(training["iteration"]) <= {1, 2}
    assert training["trajectory_id"].nunique() == len(stored)
    # the report was rewritten after the last evaluation: it holds the final numbers
    page = (cfg.output_dir / "report.html").read_text()
    assert f"{100 * records[-1]['eval/success_rate']:.1f}" in page and "click-tab" in page
    evaluated = pd.read_parquet(cfg.output_dir / "eval")
    assert set(evaluated["split"]) == {"eval"} and sorted(evaluated["iteration"].unique()) == [0, 2]
    assert evaluated["trajectory_id"].nunique() == 4 * 2


def test_eval_cli_scores_a_checkpoint(sync_run, tmp_path, capsys):
    cfg, _ = sync_run
    config_file = tmp_path / "cfg.yaml"
    config_file.write_text(yaml.safe_dump(to_dict(cfg)))
    final = checkpoint.latest(cfg.output_dir)
    assert eval_main(["--config", str(config_file), "--checkpoint", str(final), "run.eval_episodes=4"]) == 0
    out = capsys.readouterr().out
    results = cfg.output_dir / "evals" / final.name  # beside the run's own evaluations, not in the checkpoint
    assert not (final / "eval.json").exists()
    summary = json.loads((results / "eval.json").read_text())
    assert summary["eval/episodes"] == 4 and "overall" in out and "click-test-2" in out
    kept = read_trajectories(results / "episodes")  # the episodes behind the numbers are kept
    judged = [t for t in kept if t.trainable]
    successes = sum(t.outcome == "success" for t in judged)
    assert len(kept) == 4 and successes == round(len(judged) * summary["eval/success_rate"])
    assert eval_main(["--config", str(config_file), "--checkpoint", str(tmp_path)]) == 2  # no policy there


def test_async_run_completes_and_drops_stale_data(ray_session, tmp_path):
    # SFT learns from every episode: with filtered BC's success filter no update (and no new version) comes until
    # the untrained policy succeeds, which in a CI run it once did not in three iterations
    cfg = make_config(
        tmp_path,
        **SIMULATED,
        learner__algorithm="sft",
        run__mode="async",
        run__iterations=3,
        run__max_policy_lag=0,
        run__checkpoint_every=3,
        run__eval_every=2,
        run__eval_episodes=4,
    )
    records = run_trainer(cfg)
    assert [r["iteration"] for r in records] == [1, 2, 3]
    # an update that finishes during an evaluation is still counted as its own iteration; each one that
    # changed the policy published a version
    trained = [r["actor/updates"] > 0 for r in records]
    assert [r["policy_version"] for r in records] == [sum(trained[: i + 1]) for i in range(3)]
    assert records[-1]["policy_version"] >= 1
    assert records[1]["eval/episodes"] == 4
    # with lag 0 an update learns only from what the weights it starts from collected: episodes still in flight
    # when the learner published were dropped (how many depends on timing; the dropping is tested in
    # tests/data/test_replay.py), never trained on
    lags = [r["train/policy_lag_max"] for r in records if r.get("train/policy_lag_max") is not None]
    assert all(lag == 0 for lag in lags), lags
    assert records[-1]["trajectories"] >= 12


def test_an_env_step_budget_ends_the_run_with_an_evaluation(ray_session, tmp_path):
    cfg = make_config(
        tmp_path, **SIMULATED, run__iterations=50, run__max_env_steps=6, run__eval_every=10, run__eval_episodes=2
    )
    records = run_trainer(cfg)
    spent = [r["env_steps"] >= 6 for r in records]
    assert spent[-1] and not any(spent[:-1]) and len(records) < 50  # stopped at the iteration that reached it
    assert records[-1]["eval/episodes"] == 2


def test_sigkill_then_resume_keeps_counters_optimizer_and_buffer(tmp_path):
    # SFT trains on every trajectory, so each iteration moves the optimizer whatever the episodes' outcomes
    cfg = make_config(tmp_path, run__iterations=4, tasks__train=["click-test-2"], learner__algorithm="sft")
    config_file = tmp_path / "cfg.yaml"
    config_file.write_text(yaml.safe_dump(to_dict(cfg)))
    run_dir = cfg.output_dir

    proc = start_train("--config", str(config_file), log=tmp_path / "first.log")
    deadline = time.monotonic() + 300
    while not (run_dir / "checkpoints" / "000002").exists():
        assert proc.poll() is None, (tmp_path / "first.log").read_text()
        assert time.monotonic() < deadline, "no second checkpoint within 300 s"
        time.sleep(0.5)
    kill_session(proc.pid)  # the driver, Ray, its workers and every browser, at once
    proc.wait()

    ckpt = checkpoint.latest(run_dir)
    state = checkpoint.read_json(ckpt / "state.json")
    saved_ids = set(pq.read_table(ckpt / "replay.parquet", columns=["trajectory_id"])["trajectory_id"].to_pylist())
    assert state["iteration"] >= 2 and saved_ids

    resumed_at = time.time()
    proc = start_train("--resume", str(run_dir), log=tmp_path / "second.log")
    assert proc.wait(timeout=400) == 0, (tmp_path / "second.log").read_text()
    out = (tmp_path / "second.log").read_text()
    assert f"resumed from {ckpt} at iteration {state['iteration']}" in out

    records = [r for r in read_metrics(run_dir) if r["iteration"] > 0]
    assert [r["iteration"] for r in records] == [1, 2, 3, 4]  # nothing skipped, nothing repeated
    assert [r["policy_version"] for r in records] == [1, 2, 3, 4]
    resumed = records[state["iteration"]]
    assert resumed["trajectories"] > state["counters"]["trajectories"]
    assert resumed["replay/added"] > state["replay"]["counters"]["added"]
    final = checkpoint.latest(run_dir)
    final_ids = set(pq.read_table(final / "replay.parquet", columns=["trajectory_id"])["trajectory_id"].to_pylist())
    assert saved_ids <= final_ids  # the buffer came back whole

    import torch

    learner_state = torch.load(final / "learner.pt", weights_only=True)
    assert learner_state["version"] == records[-1]["policy_version"]
    adam = learner_state["algorithm"]["actor"]["optimizer"]["optimizer"]
    adam_steps = {int(v["step"]) for v in adam["state"].values()}
    updates = sum(r["actor/updates"] for r in records)
    assert updates > 0 and adam_steps == {updates}  # optimizer state survived the kill

    assert_no_browsers_left(resumed_at)


def test_the_runs_own_report_renders_in_a_browser(sync_run, browser):
    """The report the trainer wrote for a real run: curves drawn, the evaluation table, an episode's
    screenshot loaded, and nothing fetched from the network."""
    from selenium.webdriver.common.by import By

    from tests.conftest import load

    cfg, records = sync_run
    page = cfg.output_dir / "report.html"
    load(browser, page)
    curves = browser.find_elements(By.CSS_SELECTOR, "#curves svg polyline")
    points = [line.get_attribute("points").count(",") for line in curves]
    assert points and min(points) >= 1 and max(points) >= 2  # every curve has a point, some join two
    table = browser.find_element(By.ID, "eval-table").text
    assert "click-tab" in table and "click-test-2" in table
    rows = browser.find_elements(By.CSS_SELECTOR, "#traj-list tbody tr")
    trained = sum(r["train/trajectories"] for r in records[1:])
    assert len(rows) == min(50, trained + 4 * 2)  # every training and evaluation episode, first page of 50
    rows[0].click()
    image = browser.find_element(By.CSS_SELECTOR, "#traj-detail img")
    assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image) > 0
    requested = [
        m["params"]["request"]["url"]
        for m in (json.loads(e["message"])["message"] for e in browser.network_log + browser.get_log("performance"))
        if m["method"] == "Network.requestWillBeSent"
    ]
    assert [u for u in requested if u != page.as_uri() and not u.startswith("data:")] == []
