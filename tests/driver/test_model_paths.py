"""Relative paths in a config and Ray's workers: the driver checks them against its own working directory, so
the runners and learners it starts (elsewhere on a cluster, or in a job's working_dir) get them absolute, while
config.yaml keeps them as written. Hub ids stay ids."""

import os
import subprocess
import sys
from pathlib import Path

import yaml

from rlsys.config import to_dict
from rlsys.config.checks import with_absolute_paths
from rlsys.policies import build_policy
from tests.conftest import make_config
from tests.driver.test_fault_tolerance import sim_config

REPO = Path(__file__).resolve().parents[2]
# A driver whose Ray workers start in another folder (Ray's runtime_env working_dir, as on a cluster's nodes).
DRIVER = """
import sys
import ray
from rlsys.driver.ray_init import bind_to_loopback
from rlsys.cli.train import main

bind_to_loopback()
ray.init(num_cpus=2, resources={"sim": 2}, include_dashboard=False, log_to_driver=False,
         runtime_env={"working_dir": sys.argv[1]})
sys.exit(main(sys.argv[2:]))
"""


def test_workers_elsewhere_get_the_relative_policy_path_absolute_and_config_yaml_keeps_it(tmp_path):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "README").write_text("not the driver's folder\n")
    # element_pointer: a model folder the same way, without transformers to import in the run's actors
    cfg = sim_config(tmp_path, step_s=0.01, max_steps=2, run__iterations=1, runners__resource="sim",
                     policy__kind="element_pointer")  # fmt: skip
    build_policy(cfg.policy, seed=3).save_pretrained(work / "models" / "tiny")
    data = to_dict(cfg)
    data["policy"]["path"] = "models/tiny"
    data["run"]["output_dir"] = "runs/a"
    (work / "run.yaml").write_text(yaml.safe_dump(data))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_JOB_CONFIG_JSON_ENV_VAR")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))  # this checkout's rlsys

    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(elsewhere), "--config", "run.yaml"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = work / "runs" / "a"
    assert yaml.safe_load((run / "config.yaml").read_text())["policy"]["path"] == "models/tiny"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["000001"]
    assert (run / "checkpoints" / "000001" / "replay.parquet").is_file()


def test_local_paths_become_absolute_hub_ids_stay_and_the_config_is_not_changed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    build_policy(make_config(tmp_path).policy).save_pretrained(tmp_path / "saved")
    (tmp_path / "shards").mkdir()
    (tmp_path / "exemplars.jsonl").write_text("{}\n")
    cfg = make_config(
        tmp_path,
        policy__path="./saved",
        policy__vision_path="tiny-org/tiny-vision",
        evaluator__judge={"exemplars": "exemplars.jsonl"},
        run__training="offline",
        learner__offline_iterations=1,
        offline__data=["shards", str(tmp_path / "shards")],
    )

    absolute = with_absolute_paths(cfg)

    assert absolute.policy.path == str(tmp_path / "saved")
    assert absolute.policy.vision_path == "tiny-org/tiny-vision"
    assert absolute.evaluator.judge.exemplars == str(tmp_path / "exemplars.jsonl")
    assert absolute.offline.data == [str(tmp_path / "shards")] * 2
    assert (cfg.policy.path, cfg.evaluator.judge.exemplars) == ("./saved", "exemplars.jsonl")  # the config as written
    assert cfg.offline.data[0] == "shards"
