"""run_info.json records what produced each session of a run (first run, then every --resume), and the wandb run
id it keeps makes a resumed run log to the same wandb run."""

import json
import os
import platform
import socket
import subprocess
from datetime import datetime
from importlib.metadata import version
from pathlib import Path

import yaml

from rlsys.config import to_dict
from rlsys.driver.run_info import FILE, record_session
from tests.driver.test_fault_tolerance import sim_config
from tests.support.train_command import run_train

ROOT = Path(__file__).resolve().parents[2]
MARKER = "rlsys-test-do-not-record-me"


def train(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "RLSYS_TEST_SECRET": MARKER}
    done = run_train(*args, env=env, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_train_then_resume_records_two_sessions_and_logs_to_one_wandb_run(tmp_path):
    # element_pointer: a policy without transformers starts the learner and runner of both sessions sooner
    cfg = sim_config(tmp_path, step_s=0.05, max_steps=2, run__iterations=1, metrics__wandb=True,
                     env__sim={"step_median_s": 0.05, "step_sigma": 0.0, "success_prob": 0.5},
                     policy__kind="element_pointer")  # fmt: skip
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(to_dict(cfg)))
    run_dir = cfg.output_dir

    train("--config", str(path))
    first = json.loads((run_dir / FILE).read_text())
    train("--resume", str(run_dir), "run.iterations=2")
    info = json.loads((run_dir / FILE).read_text())

    # one session per start, the first kept as it was
    assert [s["resumed"] for s in info["sessions"]] == [False, True]
    assert info["sessions"][0] == first["sessions"][0]
    started = [datetime.fromisoformat(s["started"]) for s in info["sessions"]]
    assert all(t.utcoffset().total_seconds() == 0 for t in started) and started[0] <= started[1]
    session = info["sessions"][1]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert session["git"]["commit"] == head.strip() and isinstance(session["git"]["dirty"], bool)
    for name in ("rlsys", "torch", "ray", "transformers", "peft", "wandb"):
        assert session["packages"][name] == version(name), name
    assert session["python"] == platform.python_version()
    assert session["host"] == socket.gethostname() and session["cpu"]["count"] == os.cpu_count()
    assert session["ray"]["address"].startswith("127.0.0.1:")  # the Ray the driver started, on loopback
    assert MARKER not in (run_dir / FILE).read_text()  # no environment is recorded

    # both sessions logged to the wandb run whose id the run folder keeps
    run_id = info["wandb_run_id"]
    assert run_id and first["wandb_run_id"] == run_id
    offline = sorted(p.name for p in (run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and all(name.endswith(f"-{run_id}") for name in offline), offline

    page = (run_dir / "report.html").read_text()
    assert "Provenance (run_info.json)" in page and session["git"]["commit"] in page and "resumed" in page


def test_an_unreadable_run_info_is_set_aside_not_lost(tmp_path):
    (tmp_path / FILE).write_text('{"sessions": [')
    info = record_session(tmp_path, resumed=True)
    assert [s["resumed"] for s in info["sessions"]] == [True]
    (kept,) = tmp_path.glob(f"{FILE}.unreadable-*")
    assert kept.read_text() == '{"sessions": ['
    assert json.loads((tmp_path / FILE).read_text()) == info
