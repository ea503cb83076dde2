"""DigiRL's scoring cost: each state is scored once, and a screenshot or text is encoded once while the feature
cache holds it, although every update receives fresh copies of the trajectories (as from the replay actor)."""

import pickle

import numpy as np
import pytest

from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.learners.digirl.algorithm import DigiRL, transitions_of
from tests.learners.test_digirl import learner_cfg, png, policy  # noqa: F401  (policy: a fixture)

SCREENS = [png((40 * i, 200 - 30 * i, 90)) for i in range(6)]


def walk(tid: str, screens: list[int], success: bool, final: bool = True) -> Trajectory:
    """A trajectory through distinct screens, so that s and s' of a step differ in both their inputs."""
    task = f"reach screen {screens[-1]}"
    steps = [
        Step(Observation(SCREENS[s], f'[0] link "to {s + 1}"', "", task), "click [0]", None, 0.0, False, 0, -1.0)
        for s in screens
    ]
    steps[-1].reward, steps[-1].done = float(success), True
    last = Observation(SCREENS[-1], "done", "", task) if final else None
    return Trajectory(Task(task, task, "test"), steps, "success" if success else "failure", id=tid,
                      final_observation=last)  # fmt: skip


def copies(trajectories: list[Trajectory]) -> list[Trajectory]:
    return pickle.loads(pickle.dumps(trajectories))


def test_a_trajectorys_values_are_its_states_values_with_s_prime_the_next_steps_s(policy):  # noqa: F811
    algo = DigiRL(learner_cfg(step_critic_steps=20, actor_steps=0), policy)
    data = [walk("a", [0, 1, 2, 3], True), walk("b", [4, 2], False, final=False), walk("c", [5], True)]
    algo.update(copies(data))  # trained heads: values differ from state to state
    per_trajectory = [transitions_of(t, 0.5) for t in data]
    values = algo.trajectory_values(per_trajectory)
    assert [len(v) for v in values] == [5, 3, 2]
    for v, transitions in zip(values, per_trajectory):
        np.testing.assert_allclose(v[:-1], algo.state_values(transitions, next_state=False), atol=1e-6)
        np.testing.assert_allclose(v[1:], algo.state_values(transitions, next_state=True), atol=1e-6)
    assert np.ptp(np.concatenate(values)) > 1e-3


def count_calls(module) -> list[int]:
    calls = [0]
    module.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize("cache_mb", [512, 0])
def test_a_later_update_encodes_no_screenshot_or_text_the_cache_still_holds(policy, cache_mb):  # noqa: F811
    algo = DigiRL(learner_cfg(step_critic_steps=2, actor_steps=1, feature_cache_mb=cache_mb), policy)
    screenshots, texts = count_calls(algo.images.model), count_calls(algo.step_critic.encoder.model)
    first = [walk(f"x{i}", [i % 6, (i + 1) % 6], i % 2 == 0) for i in range(8)]
    second = [walk(f"y{i}", [(i + 3) % 6, i % 6, 5], i % 3 == 0) for i in range(8)]
    algo.update(copies(first))
    algo.update(copies(second))
    assert screenshots[0] > 0 and texts[0] > 0
    screenshots[0] = texts[0] = 0
    algo.update(copies(first))  # fresh objects, as every update's sample is
    if cache_mb:
        assert screenshots[0] == texts[0] == 0
    else:
        assert screenshots[0] > 0 and texts[0] > 0
