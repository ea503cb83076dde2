"""rlsys.api.train: the run `rlsys-train` starts, from Python, joining the Ray the process is connected to; and
the Ray Tune seed sweep in docs/examples built on it."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from rlsys.api import train
from rlsys.config import ConfigError, to_dict
from tests.conftest import make_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sim_run(tmp_path, **overrides) -> dict:
    """A two-iteration run on the simulated env (no browser) and a policy without transformers (its actors start
    sooner), as the mapping a config file holds."""
    sim = {"reset_median_s": 0.01, "step_median_s": 0.01, "step_sigma": 0.0, "reset_sigma": 0.0, "success_prob": 0.5}
    cfg = make_config(tmp_path, env__kind="sim", env__sim=sim, runners__resource="browser", runners__num=1,
                      policy__kind="element_pointer", **overrides)  # fmt: skip
    return to_dict(cfg)


def metrics_file(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_train_from_python_returns_the_records_it_wrote(ray_session, tmp_path):
    seen = []
    result = train(sim_run(tmp_path), ["run.eval_every=2", "run.eval_episodes=2"], on_record=seen.append)
    assert result.run_dir == tmp_path / "run"
    on_disk = [r for r in metrics_file(result.run_dir) if "iteration" in r]
    assert [r["iteration"] for r in result.metrics if "iteration" in r] == [1, 2]
    assert [r["iteration"] for r in seen] == [1, 2]  # each record as it was written, in order
    assert [r["iteration"] for r in on_disk] == [1, 2]
    assert seen[-1]["eval/episodes"] == 2 and result.final["eval/episodes"] == 2
    assert 0 < seen[0]["time/run_s"] < seen[1]["time/run_s"]  # the run's wall clock
    assert yaml.safe_load((result.run_dir / "config.yaml").read_text())["run"]["eval_every"] == 2
    import ray

    assert ray.is_initialized()  # the caller's Ray is left as it was


def test_a_bad_config_raises_before_anything_is_written(tmp_path):
    data = sim_run(tmp_path)
    with pytest.raises(ConfigError, match="learner.lrr"):
        train(data, ["learner.lrr=1e-4"])
    data["run"]["output_dir"] = str(tmp_path / "run")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        train(data)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["notes.txt"]


def test_tune_example_sweeps_seeds_each_in_its_own_run(tmp_path):
    config = tmp_path / "sim.yaml"
    config.write_text(yaml.safe_dump(sim_run(tmp_path, run__eval_every=1, run__eval_episodes=2, run__iterations=1)))
    out = tmp_path / "sweep"
    done = subprocess.run(
        [sys.executable, os.path.join(REPO, "docs", "examples", "tune_seeds.py"), "--config", str(config),
         "--seeds", "3", "4", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for seed in (3, 4):
        run_dir = out / str(seed)
        assert yaml.safe_load((run_dir / "config.yaml").read_text())["run"]["seed"] == seed
        assert [r["iteration"] for r in metrics_file(run_dir) if "iteration" in r] == [1]
        assert f"seed {seed}: eval/success_rate " in done.stdout
    assert "mean over 2 seeds, 95% interval: " in done.stdout
