"""Runners on real Ray with real Chromium: weight pulls, web suites, and failures mid-episode."""

import json
import os
import signal
import sys
import time

import psutil
import pytest
import ray

from rlsys.actors.pool import RunnerPool
from rlsys.actors.runner import RemoteEnvRunner
from rlsys.actors.weight_store import WeightStore
from rlsys.envs.tasks import miniwob_task
from rlsys.policies import build_policy
from tests.conftest import make_config

# In drag-items only a drag ends the episode, and our actions never drag: episodes run to the
# horizon, so there is always time to kill something in the middle of one.
ENDLESS = "drag-items"


def weights(cfg, seed):
    return build_policy(cfg.policy, seed=seed).state_dict()


def wait_for(predicate, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def collect(pool, n, timeout=120.0):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out += pool.wait(1.0)
    assert len(out) >= n, f"only {len(out)} of {n} episodes finished"
    return out


def submit(pool, task, timeout=120.0):
    """Submit once a runner is idle (a new runner is idle once it answered its first status())."""
    deadline = time.monotonic() + timeout
    while not pool.submit(task):
        assert time.monotonic() < deadline, "no runner became idle"
        assert pool.wait(0.5) == []


def test_runner_pulls_newer_weights_at_episode_boundary(ray_session, tmp_path):
    cfg = make_config(tmp_path)
    store = ray.remote(WeightStore).remote()
    ray.get(store.publish.remote(0, weights(cfg, 0)))
    runner = RemoteEnvRunner.options(num_cpus=0.25, resources={"browser": 1}).remote("r0", cfg, store, 123)
    try:
        traj = ray.get(runner.run_episode.remote(miniwob_task("click-test-2", 1, "train")), timeout=120)
        assert {s.policy_version for s in traj.steps} == {0}
        assert ray.get(runner.sync_weights.remote()) == 0  # nothing newer: no pull

        new = weights(cfg, 1)
        ray.get(store.publish.remote(1, new))
        traj = ray.get(runner.run_episode.remote(miniwob_task("click-test-2", 2, "train")), timeout=120)
        assert {s.policy_version for s in traj.steps} == {1}
        # the replica now computes with exactly the published weights
        reference = build_policy(cfg.policy, seed=1)
        step = traj.steps[0]
        expected = reference.log_probs([step.observation], [step.action_text]).item()
        mine = ray.get(runner.score.remote(step.observation, step.action_text))
        assert mine == pytest.approx(expected, abs=1e-5)
        with pytest.raises(ray.exceptions.RayTaskError, match="not newer"):
            ray.get(store.publish.remote(1, new))
    finally:
        ray.get(runner.close.remote())
        ray.kill(runner)


@pytest.fixture
def pool(ray_session, tmp_path):
    cfg = make_config(tmp_path, runners__num=1, env__max_steps=100000)
    store = ray.remote(WeightStore).remote()
    ray.get(store.publish.remote(0, weights(cfg, 0)))
    p = RunnerPool(cfg, store)
    yield p
    p.shutdown()


def test_browser_killed_mid_episode_is_env_error_and_runner_recovers(pool):
    submit(pool, miniwob_task(ENDLESS, 1, "train"))
    runner = pool.runners[0]
    browsers = wait_for(lambda: ray.get(runner.pids.remote()).get("chromium"), what="a browser")
    wait_for(lambda: ray.get(runner.status.remote())["episode_steps"] >= 2, what="steps in the episode")
    for pid in browsers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    ((traj, explore),) = collect(pool, 1)
    assert explore and traj.outcome == "env_error" and len(traj.steps) >= 2
    assert "browser failed" in traj.error and not traj.trainable
    assert pool.restarts == 0  # the actor lived; only its env was replaced

    submit(pool, miniwob_task("click-test-2", 3, "train"))
    ((traj, _),) = collect(pool, 1)
    assert traj.outcome in ("success", "failure", "timeout") and traj.steps
    assert ray.get(runner.status.remote())["envs_created"] == 2


def test_actor_killed_mid_episode_is_env_error_and_pool_replaces_it(pool):
    submit(pool, miniwob_task(ENDLESS, 2, "train"))
    old = pool.runners[0]
    wait_for(lambda: ray.get(old.status.remote())["episode_steps"] >= 2, what="steps in the episode")
    pid = ray.get(old.status.remote())["pid"]
    browser_pids = [p for ps in ray.get(old.pids.remote()).values() for p in ps]
    os.kill(pid, signal.SIGKILL)
    ((traj, _),) = collect(pool, 1)
    assert traj.outcome == "env_error" and "runner died" in traj.error
    assert pool.restarts == 1
    # the dead runner's browser does not outlive it
    wait_for(
        lambda: (
            not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in browser_pids)
        ),
        timeout=30,
        what="orphaned browser to exit",
    )

    submit(pool, miniwob_task("click-test-2", 4, "train"))
    assert pool.runners[0] is not old  # a new actor, started after the slot's backoff
    ((traj, _),) = collect(pool, 1)
    assert traj.outcome in ("success", "failure", "timeout") and traj.steps


def test_runner_plays_a_web_suite_and_keeps_what_the_env_reported(ray_session, tmp_path, site):
    from rlsys.data.shards import read_shard, write_shard
    from rlsys.envs.web.task_files import load_task_file

    checks = {"eval_types": ["url_match"], "reference_url": "__SITE__/actions.html"}
    row = {"web_name": "local", "id": "local--0", "ques": "Stay here", "web": "__SITE__/actions.html", "eval": checks}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(row) + "\n")
    (task,) = load_task_file(tmp_path / "tasks.jsonl", url_map={"__SITE__": site})
    marker = tmp_path / "instance-reset"
    cfg = make_config(
        tmp_path,
        env__kind="web",
        env__max_steps=2,
        env__instance_reset_every=1,
        env__instance_reset_command=[sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')"],
        tasks__suite="webarena",
        tasks__file=str(tmp_path / "tasks.jsonl"),
        tasks__url_map={"__SITE__": site},
    )
    store = ray.remote(WeightStore).remote()
    ray.get(store.publish.remote(0, weights(cfg, 0)))
    runner = RemoteEnvRunner.options(num_cpus=0.25, resources={"browser": 1}).remote("web0", cfg, store, 7)
    try:
        first, second = (ray.get(runner.run_episode.remote(task), timeout=120) for _ in range(2))
    finally:
        ray.get(runner.close.remote())
    for traj in (first, second):
        final = traj.steps[-1]
        assert traj.outcome in ("success", "timeout") and len(traj.steps) == 2
        assert final.info["verdict"]["source"] == "webarena" and final.info["answer"] == ""
        assert traj.task.instruction == "Stay here" and traj.steps[0].observation.location == f"{site}/actions.html"
    assert "instance_reset" not in first.steps[0].info  # due after one episode, run before the next
    for step in second.steps:  # the prompt the policy (the byte-level T5) read, kept for the report
        assert step.info["prompt"].startswith("Task: Stay here\nPrevious: ") and step.info["prompt"].endswith("</s>")
    assert f"Previous: {second.steps[0].action_text}" in second.steps[1].info["prompt"]
    assert second.steps[0].info["instance_reset"]["ok"] and marker.read_text() == "x"
    write_shard(tmp_path / "shard.parquet", [second])
    (stored,) = read_shard(tmp_path / "shard.parquet")
    assert [s.info for s in stored.steps] == [s.info for s in second.steps]
