"""The simulated env and the random policy: latency statistics, hangs, outcomes, seeding, and sim runners
on real Ray (a RunnerPool playing episodes end to end, runner processes that never load torch)."""

import math
import statistics
import sys
import threading
import time
from collections import Counter

import numpy as np
import pytest
import ray

from rlsys.config import ConfigError, load_config
from rlsys.core.env import EnvBrokenError
from rlsys.core.types import Observation, Task
from rlsys.envs.sim import SimEnv
from rlsys.policies import build_policy
from rlsys.policies.random_agent import RandomPolicy
from tests.conftest import make_config

Z90 = 1.2816  # the standard normal's 90th percentile


def sim_cfg(**sim):
    """An EnvConfig for a SimEnv; `max_steps`, `step_timeout_s` and `action_space` go to env, the rest to env.sim."""
    env = {k: sim.pop(k) for k in ("max_steps", "step_timeout_s", "action_space") if k in sim}
    data = {"env": {"kind": "sim", "max_steps": 10_000, "step_timeout_s": 1e6, **env, "sim": sim}}
    return load_config(None, data=data).env


class Recorder:
    """Stands in for the env's sleep: records what it would have waited."""

    def __init__(self):
        self.waits = []

    def __call__(self, seconds):
        self.waits.append(seconds)


def task(i=0):
    return Task(f"sim-{i}", "click the right thing", "sim")


def quantile(values, q):
    return float(np.quantile(values, q))


# ---------------------------------------------------------------------------------- the env alone


def test_latencies_are_lognormal_with_the_configured_median_and_spread():
    clock = Recorder()
    cfg = sim_cfg(reset_median_s=2.0, reset_sigma=0.8, step_median_s=0.5, step_sigma=0.5, success_prob=0.0)
    env = SimEnv(cfg, "e0", sleep=clock)
    resets = []
    for i in range(2000):
        env.reset(task(i))
        resets.append(clock.waits.pop())
    clock.waits.clear()
    for _ in range(4000):
        env.step("click [1]")
    steps = clock.waits
    assert len(steps) == 4000
    assert statistics.median(resets) == pytest.approx(2.0, rel=0.08)
    assert statistics.median(steps) == pytest.approx(0.5, rel=0.06)
    # the spread: p90 / median = exp(1.28 sigma), and the mean sits above the median (a right tail)
    assert quantile(resets, 0.9) / statistics.median(resets) == pytest.approx(math.exp(Z90 * 0.8), rel=0.12)
    assert quantile(steps, 0.9) / statistics.median(steps) == pytest.approx(math.exp(Z90 * 0.5), rel=0.08)
    assert statistics.mean(steps) == pytest.approx(0.5 * math.exp(0.5**2 / 2), rel=0.06)
    # sigma 0: every latency is the median
    fixed = SimEnv(sim_cfg(step_median_s=0.3, step_sigma=0.0, success_prob=0.0), "e1", sleep=clock)
    clock.waits.clear()
    fixed.reset(task())
    fixed.step("click [0]")
    assert clock.waits[-1] == pytest.approx(0.3)


def test_real_sleeps_take_the_drawn_latency():
    env = SimEnv(sim_cfg(reset_median_s=0.05, reset_sigma=0.0, step_median_s=0.04, step_sigma=0.0), "real")
    t0 = time.perf_counter()
    env.reset(task())
    assert 0.05 <= time.perf_counter() - t0 < 0.2
    for _ in range(3):
        t0 = time.perf_counter()
        env.step("click [0]")
        assert 0.04 <= time.perf_counter() - t0 < 0.2


def test_a_hang_waits_step_timeout_then_breaks_the_env():
    env = SimEnv(sim_cfg(step_median_s=0.01, step_sigma=0.0, hang_prob=1.0, step_timeout_s=0.3), "hangs")
    env.reset(task())
    t0 = time.perf_counter()
    with pytest.raises(EnvBrokenError, match=r"hangs: step 1 got no answer within env.step_timeout_s=0.3s.*hung"):
        env.step("click [0]")
    assert 0.3 <= time.perf_counter() - t0 < 1.0
    # a draw from the tail beyond the timeout is a timeout too (the clock is recorded, not slept)
    clock = Recorder()
    slow = SimEnv(sim_cfg(step_median_s=5.0, step_sigma=0.0, step_timeout_s=2.0), "slow", sleep=clock)
    slow.reset(task())
    with pytest.raises(EnvBrokenError, match=r"within env.step_timeout_s=2s: would have taken 5.00s"):
        slow.step("click [0]")
    assert clock.waits[-1] == 2.0
    # close() wakes a step sleeping in a hang
    env = SimEnv(sim_cfg(hang_prob=1.0, step_timeout_s=30.0), "closed")
    env.reset(task())
    threading.Timer(0.2, env.close).start()
    t0 = time.perf_counter()
    with pytest.raises(EnvBrokenError, match="closed"):
        env.step("click [0]")
    assert time.perf_counter() - t0 < 5.0


def test_success_probability_outcomes_and_the_step_cap():
    clock = Recorder()
    env = SimEnv(sim_cfg(success_prob=0.3, max_steps=10_000), "succ", sleep=clock)
    env.reset(task())
    n, wins = 3000, 0
    for _ in range(n):
        result = env.step("click [2]")
        if result.done:
            assert result.reward == 1.0 and result.info["outcome"] == "success"
            assert result.info["action"] == {"kind": "click", "element": 2}
            wins += 1
            env.reset(task())
        else:
            assert result.reward == 0.0 and "outcome" not in result.info
    assert wins / n == pytest.approx(0.3, abs=4 * math.sqrt(0.3 * 0.7 / n))
    # no success within env.max_steps: the last step ends the episode as a timeout
    env = SimEnv(sim_cfg(success_prob=0.0, max_steps=3), "cap", sleep=clock)
    env.reset(task())
    done = [env.step("click [0]").done for _ in range(2)]
    last = env.step("click [0]")
    assert done == [False, False] and last.done and last.info["outcome"] == "timeout" and last.reward == 0.0
    # an action that does not parse never succeeds; the step counts and the error is reported
    env = SimEnv(sim_cfg(success_prob=1.0, num_elements=3), "parse", sleep=clock)
    obs = env.reset(task())
    bad = env.step("click [7]")
    assert not bad.done and "does not exist" in bad.info["parse_error"] and env.steps == 1
    assert env.step("click [2]").done
    # the observation: a tiny screenshot and numbered elements in the web envs' format
    assert obs.screenshot.shape == (8, 8, 3)
    assert obs.ui_text.splitlines() == ['[0] button "Item 0"', '[1] button "Item 1"', '[2] button "Item 2"']
    assert obs.extras["grammar"]["choices"] == ["click [0]", "click [1]", "click [2]"]
    assert obs.task == "click the right thing" and env.pids() == {}


def test_same_seed_and_id_replay_exactly():
    def play(seed, env_id):
        clock = Recorder()
        cfg = sim_cfg(seed=seed, success_prob=0.2, hang_prob=0.05, step_timeout_s=3.0, step_sigma=1.0)
        env = SimEnv(cfg, env_id, sleep=clock)
        events = []
        for i in range(30):
            env.reset(task(i))
            for _ in range(5):
                try:
                    result = env.step("click [1]")
                except EnvBrokenError:
                    events.append("broken")
                    break
                events.append(result.info.get("outcome", "-"))
                if result.done:
                    break
        return clock.waits, events

    first = play(7, "runner-0/env1")
    assert first == play(7, "runner-0/env1")
    assert "broken" in first[1] and "success" in first[1]
    assert play(8, "runner-0/env1")[0] != first[0]
    assert play(7, "runner-1/env1")[0] != first[0]


# ---------------------------------------------------------------------------------- the random policy


def obs_with(n):
    return Observation(b"", "\n".join(f'[{i}] button "b{i}"' for i in range(n)), "", "task")


def test_random_policy_is_uniform_over_the_numbered_elements():
    policy = RandomPolicy(seed=3)
    n, draws = 5, 5000
    samples = policy.act([obs_with(n)] * draws)
    counts = Counter(s.text for s in samples)
    assert set(counts) == {f"click [{i}]" for i in range(n)}
    chi2 = sum((c - draws / n) ** 2 / (draws / n) for c in counts.values())
    assert chi2 < 18.47  # df 4, p = 0.001
    assert all(s.logprob == pytest.approx(-math.log(n)) for s in samples)
    # it reads whatever elements are listed, numbered as they are
    odd = Observation(b"", '[2] link "a"\n  some text\n[7] input text ""\n', "", "")
    assert {policy.act([odd])[0].text for _ in range(50)} == {"click [2]", "click [7]"}
    assert policy.act([obs_with(0)])[0].text == "click [0]"
    np.testing.assert_allclose(
        policy.log_probs([obs_with(4)] * 3, ["click [3]", "click [4]", "type [1] x"]), [-math.log(4), -np.inf, -np.inf]
    )
    # seeded: the same seed, the same choices
    a, b = RandomPolicy(seed=11), RandomPolicy(seed=5)
    b.manual_seed(11)
    assert [s.text for s in a.act([obs_with(9)] * 20)] == [s.text for s in b.act([obs_with(9)] * 20)]


def test_random_policy_has_no_weights_and_takes_versions():
    cfg = load_config(None, data={"policy": {"kind": "random"}})
    policy = build_policy(cfg.policy, seed=0)
    assert isinstance(policy, RandomPolicy) and policy.state_dict() == {} and policy.parameters() == []
    assert policy.act([obs_with(3)])[0].version == 0
    policy.load_state_dict({"whatever": np.zeros(3)}, 4)  # a learner's weights are ignored, the version taken
    assert policy.version == 4 and policy.act([obs_with(3)])[0].version == 4
    policy.load_state_dict({})
    assert policy.version == 4


def test_config_rules_for_sim_and_random():
    cfg = load_config(None, data={"env": {"kind": "sim"}, "policy": {"kind": "random"}})
    assert cfg.runners.resource == "sim" and cfg.env.sim.num_elements == 5
    assert load_config(None, data={"env": {"kind": "sim"}, "runners": {"resource": "browser"}}).runners.resource == (
        "browser"
    )
    for space in ("pae", "coords"):
        wanted = rf"policy.kind = 'random'.*env.action_space = 'element' \(got '{space}'\)"
        with pytest.raises(ConfigError, match=wanted):
            load_config(None, data={"env": {"action_space": space}, "policy": {"kind": "random"}})
    with pytest.raises(ConfigError, match="'env.sim.hang_probability'.*did you mean 'env.sim.hang_prob'"):
        load_config(None, data={"env": {"kind": "sim", "sim": {"hang_probability": 0.1}}})


# ---------------------------------------------------------------------------------- on Ray


def sim_runner_config(tmp_path, **sim):
    return make_config(
        tmp_path,
        env__kind="sim",
        env__max_steps=5,
        env__step_timeout_s=0.5,
        env__sim={"reset_median_s": 0.02, "step_median_s": 0.02, "step_sigma": 0.5, **sim},
        policy__kind="random",
        runners__resource="browser",  # the session's Ray declares browser and android only
        runners__num_cpus=0.05,
    )


def test_a_sim_runner_never_loads_torch(ray_session, tmp_path):
    from rlsys.actors.runner import RemoteEnvRunner
    from rlsys.actors.weight_store import WeightStore

    cfg = sim_runner_config(tmp_path, success_prob=0.0)
    store = ray.remote(WeightStore).options(num_cpus=0).remote()
    ray.get(store.publish.remote(0, {"w": np.zeros(16, dtype=np.float32)}))
    runner = RemoteEnvRunner.options(num_cpus=0.05, resources={"browser": 1}).remote("sim-r0", cfg, store, 5)
    try:
        traj = ray.get(runner.run_episode.remote(task()), timeout=60)
        assert traj.outcome == "timeout" and len(traj.steps) == 5
        assert {s.policy_version for s in traj.steps} == {0}
        assert all(s.action_text.startswith("click [") and s.error is None for s in traj.steps)
        ray.get(store.publish.remote(3, {"w": np.ones(16, dtype=np.float32)}))
        assert ray.get(runner.sync_weights.remote()) == 3
        traj = ray.get(runner.run_episode.remote(task(1)), timeout=60)
        assert traj.policy_version == 3
        assert ray.get(runner.pids.remote()) == {}
        heavy = ("torch", "transformers")
        loaded = ray.get(runner.__ray_call__.remote(lambda self: sorted(m for m in heavy if m in sys.modules)))
        assert loaded == [], f"a sim runner with the random policy imported {loaded}"
    finally:
        ray.get(runner.close.remote())
        ray.kill(runner)
        ray.kill(store)


def test_a_pool_of_sim_runners_plays_episodes_and_survives_hangs(ray_session, tmp_path):
    from rlsys.actors.pool import RunnerPool
    from rlsys.actors.weight_store import WeightStore

    cfg = sim_runner_config(tmp_path, success_prob=0.15, hang_prob=0.1)
    cfg.runners.num = 4
    store = ray.remote(WeightStore).options(num_cpus=0).remote()
    ray.get(store.publish.remote(0, {}))
    pool = RunnerPool(cfg, store, seed=1)
    try:
        trajs = pool.play([task(i) for i in range(40)], explore=True)
        outcomes = Counter(t.outcome for t in trajs)
        assert len(trajs) == 40 and set(outcomes) <= {"success", "timeout", "env_error"}
        assert outcomes["success"] and outcomes["timeout"] and outcomes["env_error"], outcomes
        for t in trajs:
            if t.outcome == "env_error":  # a hang: the runner's env broke, the runner itself lived on
                assert "no answer within env.step_timeout_s=0.5s" in t.error and t.runner_id.startswith("runner-")
            else:
                assert t.steps and t.steps[-1].done and t.trainable
            assert len(t.steps) <= 5
        assert pool.restarts == 0
        statuses = ray.get([r.status.remote() for r in pool.runners])
        # every hang cost an env; a new one is made when the runner's next episode starts
        assert 0 <= 4 + outcomes["env_error"] - sum(s["envs_created"] for s in statuses) <= 4
        assert len({s["pid"] for s in statuses}) == 4
    finally:
        pool.shutdown()
        ray.kill(store)
