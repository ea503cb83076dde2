"""benchmarks/synthweb_dataset.py: the S4 dataset of a weak scripted policy, as shards the offline phase reads."""

import json
import math
import sys
from collections import Counter
from pathlib import Path

import pytest

from rlsys.data.shards import read_trajectories

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import synthweb_dataset  # noqa: E402

MIX = ["tasks.synthweb.num_tasks=20", "tasks.synthweb.min_depth=3", "tasks.synthweb.max_depth=6",
       "tasks.synthweb.impossible=0.2", "env.max_steps=12"]  # fmt: skip


def test_the_dataset_reads_back_with_its_outcomes_and_exact_behaviour_logprobs(tmp_path):
    summary = synthweb_dataset.main(["--out", str(tmp_path / "d"), "--episodes", "120", "--set", *MIX])
    data = read_trajectories(tmp_path / "d")
    assert len(data) == 120 and sum(len(t.steps) for t in data) == summary["steps"]
    outcomes = Counter(t.outcome for t in data)
    assert summary["success_rate"] == pytest.approx(outcomes["success"] / 120)
    assert 0 < outcomes["success"] < 120 and summary["successes_with_a_wrong_click"] > 0
    assert json.loads((tmp_path / "d" / "dataset.json").read_text())["episodes"] == 120
    for t in data:
        assert all(s.policy_version == -1 for s in t.steps)
        assert t.steps[-1].done and (t.reward > 0) == (t.outcome == "success")
        for s in t.steps:
            n, p = len(s.observation.extras["elements"]), math.exp(s.logprob)
            # the good click's 0.7, another's 0.3 / (n - 1), or uniform on the impossible task's last page
            allowed = (0.7, 0.3 / (n - 1) if n > 1 else 1.0, 1 / n)
            assert any(math.isclose(p, q) for q in allowed), (p, n)


def test_a_perfect_script_solves_every_possible_task_in_its_depth(tmp_path):
    synthweb_dataset.main(["--out", str(tmp_path / "d"), "--episodes", "20", "--p-right", "1", "--p-back", "1",
                           "--set", *MIX])  # fmt: skip
    for t in read_trajectories(tmp_path / "d"):
        if t.task.meta["impossible"]:
            assert t.outcome != "success"
        else:
            assert t.outcome == "success" and len(t.steps) == int(t.task.meta["depth"])


def test_an_existing_dataset_is_not_written_over(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "shard-000000.parquet").write_bytes(b"old")
    with pytest.raises(SystemExit, match="not empty"):
        synthweb_dataset.main(["--out", str(tmp_path / "d"), "--episodes", "1"])
