import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

from rlsys.config import load_config


def _chromium_paths():
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return chromium, driver


def make_config(tmp_path, **overrides):
    """A small, fast config for tests; `section__key=value` keyword overrides."""
    chromium, driver = _chromium_paths()
    data = {
        "run": {
            "name": "test",
            "output_dir": str(tmp_path / "run"),
            "iterations": 2,
            "rollout_size": 4,
            "eval_every": 0,
            "eval_at_start": False,
            "checkpoint_every": 1,
            "episode_timeout_s": 120,
        },
        "ray": {"dashboard": False},
        "runners": {"num": 2, "num_cpus": 0.25},
        "env": {"max_steps": 3, "chromium": chromium, "chromedriver": driver},
        "tasks": {"train": ["click-test-2", "click-tab"]},
        "policy": {"d_model": 32, "d_ff": 64, "num_heads": 2},
        "learner": {"updates_per_iteration": 2, "batch_size": 8, "num_cpus": 0.25},
        "metrics": {"progress": False},
    }
    for key, value in overrides.items():
        section, name = key.split("__")
        data.setdefault(section, {})[name] = value
    return load_config(None, data=data)


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from rlsys.trainer import SUBREAPER

    os.environ.setdefault(SUBREAPER, "true")
    ray.init(num_cpus=2, resources={"browser": 8}, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def browsers_started_after(t0: float) -> list:
    """Chromium/chromedriver processes created after `t0` that are still running."""
    import psutil

    alive = []
    for p in psutil.process_iter(["name", "create_time", "status"]):
        info = p.info
        if info["name"] and "chrom" in info["name"] and info["create_time"] >= t0 and info["status"] != "zombie":
            alive.append(p.pid)
    return alive


def assert_no_browsers_left(t0: float, timeout: float = 15.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while browsers_started_after(t0) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not browsers_started_after(t0), f"browsers outlived the run: {browsers_started_after(t0)}"
