"""GRPO's step-level groups (GiGPO; rlsys/learners/grpo/steps.py): what makes two observations one anchor state, the
advantages of a synthweb group's real episodes against a hand computation, the groups they keep, and the update's
counts. No Ray: the episodes are played by stepping the env directly."""

import dataclasses
import statistics

import numpy as np
import pytest

from rlsys.config import EnvConfig, GRPOConfig, LearnerConfig, PolicyConfig, SynthWebTasksConfig, build
from rlsys.core.types import Observation, Step, Trajectory
from rlsys.envs import make_env
from rlsys.envs.synthweb import BACK, build_site, suite_tasks
from rlsys.learners.grpo.algorithm import GRPO
from rlsys.learners.grpo.groups import StepGrouping, group_samples
from rlsys.learners.grpo.steps import state_key
from rlsys.policies import build_policy

GAMMA = 0.95
TASK = next(t for t in suite_tasks(SynthWebTasksConfig(num_tasks=40), "train") if t.meta["depth"] == 2
            and not t.meta["impossible"])  # fmt: skip


def play(moves: list[str], name: str = "g", max_steps: int = 4) -> Trajectory:
    """One synthweb episode of TASK in rollout group `name`: each move clicks the page's named link (`right`), its
    first other link (`wrong`) or Back."""
    env = make_env(build(EnvConfig, {"kind": "synthweb", "max_steps": max_steps}, "env"), "steps")
    path = build_site(TASK.meta).path
    task = dataclasses.replace(TASK, meta=TASK.meta | {"rollout_group": name, "group_size": 3})
    obs, page, steps, outcome = env.reset(task), 0, [], None
    for move in moves:
        texts = [e["text"] for e in obs.extras["elements"]]
        target = {"right": path[page], "back": BACK}.get(move) or next(t for t in texts if t not in (BACK, *path))
        action = f"click [{texts.index(target)}]"
        result = env.step(action)
        steps.append(Step(obs, action, result.info["action"], result.reward, result.done, 0, None))
        obs, page, outcome = result.observation, result.info["synthweb"]["page"], result.info.get("outcome")
    assert outcome is not None, "each scripted episode ends"
    return Trajectory(task, steps, outcome)


def group_of_three() -> list[Trajectory]:
    return [
        play(["right", "right"]),  # solved in 2: first page, second page
        play(["wrong", "back", "right", "right"]),  # first page, a detour, first page again, second page: solved in 4
        play(["right", "wrong", "back", "wrong"]),  # first, second, a detour of the second, second again: timeout
    ]


def hand(returns: list[float], scale: bool) -> list[float]:
    mean = statistics.mean(returns)
    return [(r - mean) / (statistics.stdev(returns) + 1e-6) if scale else r - mean for r in returns]


# ---------------------------------------------------------------------------------------------- anchor states


def test_an_anchor_state_is_the_element_list_values_location_and_task_and_nothing_else():
    obs = Observation(b"png-1", '[0]: <a> "Back";\n[1]: <input> "name";', "https://a.test/form", "Fill the form",
                      {"elements": [{"text": "Back"}, {"text": "name", "value": ""}], "history": [], "feedback": None,
                       "settle_ms": 12.0})  # fmt: skip
    same = [
        dataclasses.replace(obs, screenshot_png=b"png-2"),  # a caret blinked, a clock ticked
        dataclasses.replace(obs, extras=obs.extras | {"settle_ms": 80.0, "feedback": "element [0] takes no text"}),
        dataclasses.replace(obs, extras=obs.extras | {"history": [{"step": 1, "action": "click [1]"}]}),
        dataclasses.replace(obs, features={"image": np.zeros(3)}),
    ]
    elements = [{"text": "Back"}, {"text": "name", "value": "Ada"}]
    other = [
        dataclasses.replace(obs, ui_text='[0]: <a> "Back";'),
        dataclasses.replace(obs, location="https://a.test/form?page=2"),
        dataclasses.replace(obs, task="Fill the other form"),
        dataclasses.replace(obs, extras=obs.extras | {"elements": elements}),  # typed into, same PAE listing
    ]
    assert all(state_key(o) == state_key(obs) for o in same)
    assert len({state_key(o) for o in [obs, *other]}) == 5
    assert state_key(dataclasses.replace(obs, ui_text="")) is None  # a screen known only by its screenshot


def test_synthweb_revisits_give_anchor_states_whatever_the_history():
    solved_in_two, detoured, _ = group_of_three()
    first, again = detoured.steps[0].observation, detoured.steps[2].observation
    assert first.extras["history"] != again.extras["history"]
    assert state_key(first) == state_key(again) == state_key(solved_in_two.steps[0].observation)
    assert state_key(detoured.steps[1].observation) != state_key(first)  # the detour page


# ---------------------------------------------------------------------------------------------- advantages by hand


@pytest.mark.parametrize("scale", [True, False])
def test_each_action_gets_its_trajectorys_advantage_plus_omega_times_its_steps(scale):
    """Rewards 1, 1, 0. The first page is seen 4 times, returns 0.95 (solved next step), 0.95^3 and 0.95 (the
    detoured episode, before and after its detour), 0 (the timeout); the second page 4 times, returns 1, 1, 0, 0 (the
    timeout's twice); each detour page once (A_step 0)."""
    omega = 0.5
    groups = group_samples(group_of_three(), scale, StepGrouping(omega, GAMMA))
    a_traj = hand([1, 1, 0], scale)
    first = hand([GAMMA, GAMMA**3, GAMMA, 0], scale)
    second = hand([1, 1, 0, 0], scale)
    expected = [
        a_traj[0] + omega * first[0], a_traj[0] + omega * second[0],
        a_traj[1] + omega * first[1], a_traj[1], a_traj[1] + omega * first[2], a_traj[1] + omega * second[1],
        a_traj[2] + omega * first[3], a_traj[2] + omega * second[2], a_traj[2], a_traj[2] + omega * second[3],
    ]  # fmt: skip
    assert [s.advantage for s in groups.samples] == pytest.approx(expected, abs=1e-6)
    assert groups.metrics()["grpo/step_groups"] == 2 and groups.metrics()["grpo/step_grouped_actions"] == 8
    # without step-level groups every action carries its trajectory's advantage alone
    plain = group_samples(group_of_three(), scale)
    assert [s.advantage for s in plain.samples] == pytest.approx([a_traj[0]] * 2 + [a_traj[1]] * 4 + [a_traj[2]] * 4)
    assert plain.metrics()["grpo/step_groups"] == 0


def test_a_group_whose_rewards_agree_is_kept_for_its_steps_alone():
    """Both solve: the episode advantages are 0, but from the first page one went on directly (return 0.95) and one
    through a detour (0.95^3), so the first page's steps carry A_step (only with step-level groups on)."""
    both = [play(["right", "right"]), play(["wrong", "back", "right", "right"])]
    assert group_samples(both, True).metrics()["grpo/uniform_groups"] == 1
    groups = group_samples(both, True, StepGrouping(1.0, GAMMA))
    first = hand([GAMMA, GAMMA**3, GAMMA], scale=True)
    assert groups.metrics()["grpo/uniform_groups"] == 0
    assert [s.advantage for s in groups.samples] == pytest.approx([first[0], 0, first[1], 0, first[2], 0], abs=1e-6)
    # two timeouts that saw the same pages with the same (zero) returns carry nothing at either level, nor do three
    # direct solutions (returns 0.95 on the first page: their mean is a hair off 0.95, their advantages exactly 0)
    stuck = [play(["wrong", "back", "wrong", "back"]), play(["wrong", "back", "wrong", "back"])]
    direct = [play(["right", "right"]) for _ in range(3)]
    for uniform in (stuck, direct):
        groups = group_samples(uniform, True, StepGrouping(1.0, GAMMA))
        assert (groups.metrics()["grpo/uniform_groups"], groups.samples) == (1, [])


def test_the_update_trains_on_the_combined_advantage_and_counts_anchor_groups():
    policy = build_policy(PolicyConfig(kind="element_pointer", d_model=32, d_ff=64), seed=0)
    cfg = LearnerConfig(lr=1e-2, batch_size=16, grpo=GRPOConfig(step_groups=True, step_weight=0.5, step_gamma=GAMMA))
    metrics = GRPO(cfg, policy).update(group_of_three())
    assert metrics["actor/updates"] == 1 and metrics["grpo/samples"] == 10
    assert (metrics["grpo/step_groups"], metrics["grpo/step_grouped_actions"]) == (2, 8)
