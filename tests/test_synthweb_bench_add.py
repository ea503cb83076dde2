"""`synthweb_bench.py --add`: seeds run later join the reported ones only when they start from the same start
policy, judged by how the start was trained, since an evaluation of the same weights varied with the runners'
schedule where the env draws at random (S3-slips, before evaluation episodes drew their own streams); and two
scripts adding to one results file at once keep both additions."""

import argparse
import json
import multiprocessing as mp
import shutil
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from synthweb_bench import reported  # noqa: E402


@pytest.fixture
def earlier(tmp_path) -> Path:
    path = tmp_path / "synthweb_bench-S3-slips-read.json"
    shutil.copy(BENCHMARKS / "results" / path.name, path)
    return path


def call(path: Path, start: dict):
    saved = json.loads(path.read_text())
    return reported(path, argparse.Namespace(**saved["settings"]), saved["setting"], start)


def test_a_start_trained_the_same_joins_though_its_evaluation_drew_otherwise(earlier):
    saved = json.loads(earlier.read_text())
    retrained = dict(saved["start"])
    retrained["eval/success_rate"] = saved["start"]["eval/success_rate"] - 0.02  # another draw of the slips
    retrained["actor/loss"] *= 1 + 1e-6  # another machine's float rounding
    runs, commands, start = call(earlier, retrained)
    assert start == saved["start"]  # the start point first reported stays
    assert set(runs) == set(saved["runs"]) and all(isinstance(seed, int) for seed in runs["D-c"])
    assert commands[-1] == saved["command"]


@pytest.mark.parametrize("key, change", [("actor/loss", 1.001), ("learner/samples", 2)])
def test_a_start_trained_otherwise_is_refused_by_name(earlier, key, change):
    start = dict(json.loads(earlier.read_text())["start"])
    start[key] = start[key] * change
    with pytest.raises(SystemExit, match="the shared start's training"):
        call(earlier, start)


def test_no_earlier_results_leaves_the_start_as_evaluated(tmp_path):
    start = {"eval/success_rate": 0.5, "learner/samples": 10, "actor/loss": 1.0}
    assert reported(tmp_path / "none.json", argparse.Namespace(), "S3-slips", start) == ({}, [], start)


class SlowPath(type(Path())):
    """A results file on a slow disk: its read returns late, so that two writers' read-modify-writes overlap."""

    def read_text(self, *args, **kwargs) -> str:
        text = super().read_text(*args, **kwargs)
        time.sleep(0.5)
        return text


def add_arm(results: str, arm: str) -> None:
    import synthweb_s3_analysis

    synthweb_s3_analysis.RESULTS = SlowPath(results)
    args = argparse.Namespace(arms=[arm], difference=None, noise_cost=None)
    synthweb_s3_analysis.save(args, "S3-both-read", {f"{arm}-seed0": {"trajectories": 1}})


def test_two_analyses_adding_to_one_results_file_at_once_keep_both_additions(tmp_path):
    """The S3 analysis and the bench's --add read a results file, merge runs in, and write it back; two at once
    kept only the last writer's additions until both took the results folder's lock."""
    results = tmp_path / "synthweb_s3_analysis.json"
    results.write_text(json.dumps({"S3-both-read": {"FBC-q-seed0": {"trajectories": 2}}}))
    writers = [mp.get_context("spawn").Process(target=add_arm, args=(str(results), arm)) for arm in ("D", "D-lam1")]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
        assert w.exitcode == 0
    assert sorted(json.loads(results.read_text())["S3-both-read"]) == ["D-lam1-seed0", "D-seed0", "FBC-q-seed0"]
