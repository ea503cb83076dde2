"""What the run does when parts of it fail: a runner that hangs is found by its health probe, a slot
that keeps failing backs off, and a learner that dies ends the run with a checkpoint to resume from."""

import logging
import os
import re
import signal
import threading
import time

import pytest
import ray

from rlsys.actors.pool import RunnerPool
from rlsys.actors.weight_store import WeightStore
from rlsys.core.types import Task
from rlsys.data import checkpoint
from rlsys.driver.metrics import read_metrics
from rlsys.driver.trainer import Trainer
from rlsys.learners.runtime.group import LearnerFailed
from tests.conftest import SIMULATED_ENV, make_config


def sim_config(tmp_path, step_s: float, max_steps: int, **overrides):
    sim = {"reset_median_s": 0.05, "step_median_s": step_s, "step_sigma": 0.0, "success_prob": 0.0}
    base = SIMULATED_ENV | {"runners__num": 1, "env__max_steps": max_steps, "env__sim": sim}
    return make_config(tmp_path, **(base | overrides))


@pytest.fixture
def store(ray_session):
    store = ray.remote(WeightStore).options(num_cpus=0).remote()
    ray.get(store.publish.remote(0, {}))
    yield store
    ray.kill(store)


def submit(pool, task, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not pool.submit(task):
        assert time.monotonic() < deadline, "no runner became idle"
        assert pool.wait(0.2) == []


def collect(pool, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        finished = pool.wait(0.5)
        if finished:
            return finished[0][0]
    raise AssertionError("no episode finished")


def task(i: int) -> Task:
    return Task(f"sim-{i}", f"simulated task {i}", "sim")


def test_a_runner_that_stops_answering_is_replaced_by_its_health_probe(store, tmp_path):
    cfg = sim_config(tmp_path, step_s=5.0, max_steps=50, policy__kind="random", runners__health_interval_s=0.5,
                     runners__health_timeout_s=2.0, runners__restart_backoff_s=0.1)  # fmt: skip
    pool = RunnerPool(cfg, store)
    pid = None
    try:
        submit(pool, task(0))
        old = pool.runners[0]
        pid = ray.get(old.status.remote(), timeout=30)["pid"]
        os.kill(pid, signal.SIGSTOP)  # alive, but answers nothing: what a wedged process looks like
        started = time.monotonic()
        traj = collect(pool)
        waited = time.monotonic() - started
        assert traj.outcome == "env_error" and "no answer to a health probe" in traj.error
        assert "runners.health_timeout_s=2" in traj.error and "pid" in traj.error  # what failed, and where
        assert 2.0 <= waited < 20  # found by the probe, long before the episode's 120 s deadline
        assert pool.restarts == 1
        submit(pool, task(1))  # a new runner plays
        assert pool.runners[0] is not old and pool.num_inflight == 1
    finally:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        pool.shutdown()


def unreadable_store():
    """A weight store whose every pull raises: an exception inside each runner's episode. (A dead store is no way to
    make one: the pool ends the run then, see test_damaged_runs.)"""

    class UnreadableWeightStore(WeightStore):  # defined here, so that Ray ships it to its workers by value
        def get_if_newer(self, version):
            raise OSError("the weights could not be read")

    return ray.remote(UnreadableWeightStore).options(num_cpus=0).remote()


def test_an_exception_inside_a_runner_costs_its_episode_not_the_run(ray_session, tmp_path):
    cfg = sim_config(tmp_path, step_s=0.05, max_steps=2, policy__kind="random")
    pool = RunnerPool(cfg, unreadable_store())
    try:
        submit(pool, task(0))
        traj = collect(pool)
        assert traj.outcome == "env_error" and not traj.trainable
        assert traj.error.startswith("runner raised mid-episode: ") and "the weights could not be read" in traj.error
        assert pool.restarts == 1
    finally:
        pool.shutdown()


def test_a_slot_that_keeps_failing_backs_off_and_recovers(store, tmp_path, caplog):
    cfg = sim_config(tmp_path, step_s=0.3, max_steps=2, policy__kind="random", runners__restart_backoff_s=0.5,
                     runners__restart_backoff_max_s=1.5)  # fmt: skip
    pool = RunnerPool(cfg, store)
    caplog.set_level(logging.WARNING, logger="rlsys.actors.pool")
    try:

        def kill_mid_episode(i: int) -> float:
            """Fail the slot's runner; returns how long until its replacement took an episode."""
            submit(pool, task(i))
            os.kill(ray.get(pool.runners[0].status.remote(), timeout=30)["pid"], signal.SIGKILL)
            assert collect(pool).outcome == "env_error"
            killed = time.monotonic()
            submit(pool, task(100 + i))
            waited = time.monotonic() - killed
            pool.wait(0.01)
            return waited

        waits = [kill_mid_episode(0)]
        for i in (1, 2):  # the replacement fails before finishing anything: the backoff doubles, then is capped
            os.kill(ray.get(pool.runners[0].status.remote(), timeout=30)["pid"], signal.SIGKILL)
            assert collect(pool).outcome == "env_error"
            killed = time.monotonic()
            submit(pool, task(200 + i))
            waits.append(time.monotonic() - killed)
        assert collect(pool).outcome == "timeout"  # a finished episode: the slot is healthy again
        waits.append(kill_mid_episode(3))
        assert collect(pool).outcome == "timeout"

        delays = [float(r.getMessage().split(" replaced in ")[1].split("s:")[0]) for r in caplog.records]
        assert delays == [0.5, 1.0, 1.5, 0.5, 0.5][: len(delays)] and len(delays) == 4, delays
        assert [w >= d for w, d in zip(waits, delays)] == [True] * 4, waits
        assert pool.restarts == 4
    finally:
        pool.shutdown()


def test_a_dead_learner_ends_the_run_with_a_checkpoint_to_resume_from(ray_session, tmp_path):
    # element_pointer: no transformers to import in the learner and runners of either trainer
    cfg = sim_config(tmp_path, step_s=0.05, max_steps=3, run__iterations=4, runners__num=2,
                     policy__kind="element_pointer",
                     env__sim={"step_median_s": 0.05, "step_sigma": 0.0, "success_prob": 0.4})  # fmt: skip
    trainer = Trainer(cfg, cfg.output_dir)
    failure = {}

    def train():
        try:
            trainer.run()
        except LearnerFailed as e:
            failure["error"] = e

    thread = threading.Thread(target=train)
    try:
        thread.start()
        while len(read_metrics(cfg.output_dir)) < 2 and thread.is_alive():
            time.sleep(0.05)
        ray.kill(trainer.learners.actors[0], no_restart=True)
        thread.join(timeout=120)
    finally:
        trainer.shutdown()
    message = str(failure["error"])
    # what failed (killed mid-update or mid-checkpoint, whichever it was doing)...
    assert re.match(r"learner-0 died during (an update|saving a checkpoint): ", message), message
    newest = checkpoint.latest(cfg.output_dir)
    assert newest is not None and 1 <= int(newest.name) < 4
    assert f"the newest checkpoint is {newest}" in message
    assert f"rlsys-train --resume {cfg.output_dir}" in message  # ...and how to go on

    resumed = Trainer(cfg, cfg.output_dir, resume=True)
    try:
        records = resumed.run()
    finally:
        resumed.shutdown()
    assert [r["iteration"] for r in records] == [1, 2, 3, 4]
    assert [r["policy_version"] for r in records] == [1, 2, 3, 4]
