"""The benchmarks' interval helpers, which every quoted learning verdict comes from. Reference quantiles are
scipy.stats.t.ppf(0.975, df), written out so the test needs no scipy."""

import random
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from digirl_vs_filteredbc import difference, interval, t975  # noqa: E402
from quickstart_seeds import summary  # noqa: E402
from synthweb_bench import BASE, SETTINGS  # noqa: E402
from synthweb_dataset import scripted_action  # noqa: E402
from synthweb_s3_analysis import imitated_from_failures, rollout_groups, slips, success_differences  # noqa: E402

from rlsys.config import load_config  # noqa: E402
from rlsys.core.types import Step, Task, Trajectory  # noqa: E402
from rlsys.envs.synthweb import FORWARD, SynthWebEnv, suite_tasks  # noqa: E402

T_QUANTILE = {1: 12.7062, 2: 4.30265, 4.5: 2.65891, 9: 2.26216, 12.6: 2.16736, 17.3: 2.10703, 29: 2.04523}


@pytest.mark.parametrize("df", T_QUANTILE)
def test_t_quantile_is_exact_at_whole_df_and_never_narrower_between(df):
    # between whole df the table is interpolated linearly: the quantile is convex in df, so that errs wide
    assert T_QUANTILE[df] <= t975(df) + 5e-4
    assert t975(df) == pytest.approx(T_QUANTILE[df], abs=2e-2 if df < 8 else 1e-3)


def test_welch_difference_of_two_arms():
    a, b = [0.69, 0.70, 0.61, 0.66, 0.75], [0.62, 0.535, 0.495, 0.52, 0.575, 0.65]
    got = difference(a, b)  # Welch df 8.98, half-width 0.07640 by scipy
    assert got["mean"] == pytest.approx(0.116167, abs=1e-6)
    assert got["ci95"] == pytest.approx([0.116167 - 0.07640, 0.116167 + 0.07640], abs=1e-4)


def test_difference_of_a_measure_constant_in_every_seed_is_exact():
    # e.g. the share of imitated transitions that come from failures, on noise-free rewards: 0 in every run
    assert difference([0.0, 0.0, 0.0], [0.0, 0.0]) == {"mean": 0.0, "ci95": [0.0, 0.0]}
    assert difference([0.3, 0.3], [0.1, 0.1, 0.1])["ci95"] == pytest.approx([0.2, 0.2])


def test_interval_of_one_seed_claims_no_width():
    assert np.isnan(interval([0.5])["ci95"]).all()


def test_difference_with_one_seed_in_an_arm_claims_no_interval():
    # a partial run of an arm (one seed so far) is reported, not refused
    for a, b in (([0.7], [0.6, 0.65]), ([0.7, 0.75], [0.6]), ([0.7], [0.6])):
        got = difference(a, b)
        assert got["mean"] == pytest.approx(np.mean(a) - np.mean(b)) and np.isnan(got["ci95"]).all()


def test_quickstart_seeds_interval_uses_t_beyond_ten_seeds():
    # 12 seeds: df 11, t 2.20099 by scipy; a table that stopped at df 10 fell back to the normal's 1.96
    values = [0.5 + 0.01 * i for i in range(12)]
    sd = float(np.std(values, ddof=1))
    got = summary(values)["ci95"]
    assert got[1] - got[0] == pytest.approx(2 * 2.20099 * sd / 12**0.5, rel=1e-3)


def test_success_differences_compare_each_run_s_end_where_one_run_has_a_point_fewer():
    # a run whose budget ran out just before an evaluation point has one point fewer; its last is still its end
    a = [
        {"curve": [{"success": 0.5}, {"success": 0.6}, {"success": 0.7}]},
        {"curve": [{"success": 0.4}, {"success": 0.8}]},
    ]
    b = [
        {"curve": [{"success": 0.3}, {"success": 0.5}, {"success": 0.4}]},
        {"curve": [{"success": 0.3}, {"success": 0.6}]},
    ]
    got = success_differences(a, b)
    assert list(got) == ["success, evaluation 1", "success, evaluation 2"]
    assert got["success, evaluation 1"]["mean"] == pytest.approx(0.15)
    assert got["success, evaluation 2"]["mean"] == pytest.approx((0.7 + 0.8) / 2 - (0.4 + 0.6) / 2)


def test_share_imitated_from_failures_reads_the_last_quarter_of_each_learner_s_own_metrics():
    # filtered BC: 8 updates, the last 2 kept 10 and 30 trajectories of which 1 and 3 failed
    fbc = [{"learner/selected_trajectories": n, "learner/selected_failures": n // 10} for n in (5,) * 6 + (10, 30)]
    assert imitated_from_failures([{"eval/success": 0.5}] + fbc) == {
        "selected_trajectories_last_quarter": 20.0,
        "imitated_from_failures_last_quarter": 0.1,
    }
    # DigiRL from before its failure count was logged: the share is unknown, not 0
    digirl = [{"digirl/actor_transitions": 100}] * 4
    assert imitated_from_failures(digirl)["imitated_from_failures_last_quarter"] is None


def test_slips_counts_the_wrong_clicks_a_slip_carried_on_as_the_env_saw_them():
    # scripted episodes on S3 with many slips and a policy wrong half the time; which click was wrong is taken
    # from the env's own page as it was clicked, where the analysis rebuilds the page from the task
    cfg = load_config(BASE, overrides=[*SETTINGS["S3-slips"], "env.synthweb.slip_prob=0.5"])
    env, rng = SynthWebEnv(cfg.env, env_id="slips"), random.Random(0)
    trajectories, carried = [], []
    for task in suite_tasks(cfg.tasks.synthweb, "train")[:200]:
        obs, steps, count = env.reset(task), [], 0
        while True:
            text, _ = scripted_action(env, rng, 0.5, 1.0)
            right = env._page.kinds[int(text.split("[")[1].rstrip("]"))] == FORWARD
            page, result = env.position, env.step(text)
            led_on = env.position > page or result.info.get("outcome") == "success"
            count += bool(result.info.get("slipped")) and led_on and not right
            steps.append(Step(obs, text, result.info["action"], result.reward, result.done, 0, None, info=result.info))
            obs = result.observation
            if result.done:
                break
        trajectories.append(Trajectory(task, steps, result.info["outcome"]))
        carried.append(count)
    got = slips(cfg, trajectories)
    for part, name in ((slice(None, 50), "first"), (slice(-50, None), "last")):
        won = [(t, c) for t, c in zip(trajectories[part], carried[part]) if t.outcome == "success"]
        expected = sum(c for _, c in won) / sum(len(t.steps) for t, _ in won)
        assert got[f"success_steps_carried_by_a_slip_{name}_quarter"] == pytest.approx(expected)
    assert sum(carried) > 10  # the case is exercised, not vacuously 0
    assert 0.4 < got["slipped_steps"] < 0.6
    assert slips(load_config(BASE, overrides=SETTINGS["S3-clean"]), trajectories) == {}


def test_rollout_groups_count_alike_groups_by_quarter_and_whole_failures_of_tasks_solved_before():
    # eight groups of two, in the order collected: (task, outcomes); the replay of successes could have filled only
    # the third (task a failed whole after the second solved it), not the first (nothing solved yet) nor the fifth
    # (task c never solved before it)
    played = [("a", "ff"), ("a", "sf"), ("a", "ff"), ("b", "ss"), ("c", "ff"), ("c", "sf"), ("d", "ss"), ("e", "ss")]
    outcome = {"s": "success", "f": "failure"}
    trajectories = [
        Trajectory(Task(task, "go", "synthweb", meta={"rollout_group": str(g), "group_size": 2}), [], outcome[o])
        for g, (task, outcomes) in enumerate(played)
        for o in outcomes
    ]
    solo = Trajectory(Task("z", "go", "synthweb"), [], "success")  # issued alone: in no group
    got = rollout_groups([*trajectories, solo])
    assert got["groups"] == 8 and got["distinct_group_tasks"] == 5
    assert got["uniform_groups"] == 6 / 8
    assert got["uniform_groups_first_quarter"] == 1 / 2 and got["uniform_groups_last_quarter"] == 1
    assert got["failed_whole_groups"] == 3 and got["failed_whole_groups_solved_before"] == 1
    assert rollout_groups([solo]) == {}
