"""GRPO's replay of successes (ARPO; rlsys/learners/grpo/replay.py): what is kept and for how long, a group that
failed whole given a stored success and the advantages that follow, the replayed actions' behaviour weight, packing
and the checkpoint. Real synthweb episodes (tests/learners/test_grpo_steps.play) and a real pointing policy."""

import dataclasses
import io
import json
import math

import pytest
import torch

from rlsys.config import GRPOConfig, LearnerConfig, PolicyConfig
from rlsys.core.types import Task
from rlsys.envs.tasks import miniwob_task
from rlsys.learners.grpo.algorithm import GRPO
from rlsys.learners.grpo.groups import group_samples
from rlsys.learners.grpo.packing import pack, packed_size, unpack
from rlsys.learners.grpo.replay import SuccessReplay, replay_key
from rlsys.policies import build_policy
from tests.learners.test_grpo_steps import TASK, play

SOLVE, STUCK = ["right", "right"], ["wrong", "back", "wrong", "back"]
POINTER = PolicyConfig(kind="element_pointer", d_model=32, d_ff=64)


def failed_group(name: str, size: int = 4) -> list:
    return [play(STUCK, name) for _ in range(size)]


def as_task(traj, task_id: str):
    """The same episode, as if played on another task of the suite."""
    return dataclasses.replace(traj, task=dataclasses.replace(traj.task, id=task_id), id=f"{task_id}-{traj.id}")


def learner(**grpo) -> LearnerConfig:
    return LearnerConfig(lr=1e-2, batch_size=64, grpo=GRPOConfig(success_replay=True, **grpo))


# ---------------------------------------------------------------------------------------------- what is kept


def test_only_successes_are_kept_the_newest_per_task_each_once():
    store = SuccessReplay(per_task=2, max_tasks=10, max_bytes=10**9)
    wins = [play(SOLVE, f"w{i}") for i in range(3)]
    store.add([wins[0], play(STUCK, "f"), wins[1]])
    store.add([wins[1], wins[2]])  # the second one sampled again by a later update
    assert [p["id"] for p in store.tasks[TASK.id]] == [wins[1].id, wins[2].id]
    assert store.metrics() == {
        "grpo/replay_tasks": 1,
        "grpo/replay_successes_kept": 2,
        "grpo/replay_bytes": packed_size(pack(wins[1])) + packed_size(pack(wins[2])),
    }


def test_tasks_past_the_bounds_go_least_recently_used_first():
    win = play(SOLVE, "w")
    a, b, c = (as_task(win, name) for name in "abc")
    store = SuccessReplay(per_task=4, max_tasks=2, max_bytes=10**9)
    store.add([a, b])
    store.fill([dataclasses.replace(t, task=dataclasses.replace(t.task, id="a")) for t in failed_group("g")])
    store.add([c])  # a was replayed from after b was stored: b goes
    assert list(store.tasks) == ["a", "c"]
    room = packed_size(pack(b)) + packed_size(pack(c))
    by_bytes = SuccessReplay(per_task=4, max_tasks=10, max_bytes=room)
    by_bytes.add([a, b, c])
    assert list(by_bytes.tasks) == ["b", "c"] and by_bytes.nbytes == room


def test_miniwob_successes_are_kept_by_task_name_others_by_task_id():
    assert replay_key(miniwob_task("click-tab", 5, "train")) == replay_key(miniwob_task("click-tab", 9, "train"))
    assert replay_key(miniwob_task("click-tab", 5, "train")) == "click-tab"
    assert replay_key(TASK) == TASK.id and replay_key(Task("aitw-17", "Open settings", "aitw-general")) == "aitw-17"


def test_a_packed_trajectory_keeps_what_a_policy_scores_and_each_screenshot_once():
    detoured = play(["wrong", "back", "right", "right"], "g")  # the first page is shown twice
    detoured.steps[2].logprob, detoured.steps[2].token_ids = -1.25, [5, 7]
    detoured.steps[0].observation.features["image"] = torch.zeros(8).numpy()
    packed = pack(detoured)
    assert len(packed["screens"]) == 3 and packed_size(packed) < detoured.nbytes() / 2
    back = unpack(torch.load(_saved(packed), weights_only=True))
    assert (back.id, back.outcome, back.task) == (detoured.id, detoured.outcome, detoured.task)
    for s, original in zip(back.steps, detoured.steps, strict=True):
        o, p = s.observation, original.observation
        assert (o.screenshot_png, o.ui_text, o.location, o.task) == (p.screenshot_png, p.ui_text, p.location, p.task)
        assert o.extras == _json_like(p.extras) and o.features == {}  # features are computed again when needed
        assert (s.action_text, s.reward, s.logprob, s.token_ids, s.policy_version, s.error) == (
            original.action_text, original.reward, original.logprob, original.token_ids, original.policy_version,
            original.error,
        )  # fmt: skip


# ---------------------------------------------------------------------------------------------- replayed into groups


def test_a_group_that_failed_whole_gets_a_stored_success_and_the_advantages_by_hand():
    """Four timeouts of one task: no signal. With a success of the task stored, one of them is replaced: rewards
    1, 0, 0, 0 give the success A = 1.5 and the three others -0.5 (mean 0.25, sample std 0.5)."""
    win = play(SOLVE, "earlier")
    algo = GRPO(learner(), build_policy(POINTER, seed=0))
    algo.replay.add([win])
    group = failed_group("g")
    filled, replayed = algo.replay.fill(group)
    assert len(replayed) == 1 and replayed[0].id == win.id and replayed[0].task.meta["rollout_group"] == "g"
    assert sum(t is replayed[0] for t in filled) == 1 and sum(any(t is g for g in group) for t in filled) == 3
    advantages = {(s.action, round(s.advantage, 5)) for s in group_samples(filled, True).samples}
    assert {a for _, a in advantages} == {1.5, -0.5}
    assert {s.action_text for s in replayed[0].steps} == {a for a, adv in advantages if adv == 1.5}

    # left alone: a group with a success, one whose rewards differ, one of a task with nothing stored
    solved = [play(SOLVE, "s")] + failed_group("s", 3)
    differ = failed_group("d")
    differ[0].steps[-1].reward = 0.5  # a partial reward: the group has its own signal
    other = [as_task(t, "never-solved") for t in failed_group("o")]
    for untouched in (solved, differ, other):
        assert algo.replay.fill(untouched) == (untouched, [])

    metrics = algo.update(group)
    assert metrics["grpo/replayed_successes"] == 1 and metrics["actor/updates"] == 1
    plain = GRPO(dataclasses.replace(learner(), grpo=GRPOConfig()), build_policy(POINTER, seed=0)).update(group)
    assert (plain["actor/updates"], plain["grpo/uniform_groups"]) == (0, 1)


def test_a_replayed_success_enters_with_its_behaviour_weight_and_not_in_the_policy_lag():
    """The success was played by an older policy (version 1) that gave each of its actions twice the current
    probability: each enters with min(importance_clip, pi_prox / mu) = 0.5; the members played now (mu = pi) with 1.
    The policy lag is that of the runs' own episodes (0), not the replayed one's (4)."""
    policy = build_policy(POINTER, seed=0)
    policy.version = 5
    win, group = play(SOLVE, "earlier"), failed_group("g")
    for t, mu_over_pi, version in [(win, 2.0, 1)] + [(t, 1.0, 5) for t in group]:
        for s in t.steps:
            pi = policy.log_probs([s.observation], [s.action_text])[0].item()
            s.logprob, s.policy_version = pi + math.log(mu_over_pi), version
    algo = GRPO(learner(), policy)
    algo.replay.add([win])
    state = algo.replay.state_dict()
    filled, replayed = algo.replay.fill(group)
    samples = group_samples(filled, True).samples
    algo._score_before_update(samples)
    weights = [s.weight for s in samples if s.advantage > 0]
    assert weights == pytest.approx([0.5] * len(replayed[0].steps), abs=1e-5)
    assert all(s.weight == pytest.approx(1.0, abs=1e-5) for s in samples if s.advantage < 0)

    algo.replay.load_state_dict(state)  # the same draw again, through the whole update
    metrics = algo.update(group)
    assert metrics["actor/importance_weight"] < 1 and metrics["grpo/replayed_successes"] == 1
    assert (metrics["train/policy_lag"], metrics["train/policy_lag_max"]) == (0, 0)


# ---------------------------------------------------------------------------------------------- checkpoints


def test_the_store_and_its_draws_survive_a_checkpoint():
    policy = build_policy(POINTER, seed=0)
    algo = GRPO(learner(), policy)
    algo.replay.add([play(SOLVE, f"w{i}") for i in range(3)] + [as_task(play(SOLVE, "x"), "other")])
    saved = _saved(algo.state_dict()).getvalue()
    restored = GRPO(learner(), build_policy(POINTER, seed=0))
    restored.load_state_dict(torch.load(io.BytesIO(saved), weights_only=True))
    assert restored.replay.tasks == algo.replay.tasks and restored.replay.nbytes == algo.replay.nbytes

    groups = [failed_group(f"g{i}") for i in range(4)]
    for group in groups:  # the same member replaced by the same success, draw after draw
        (a, ra), (b, rb) = algo.replay.fill(group), restored.replay.fill(group)
        assert len(ra) == 1 and [t.id for t in a] == [t.id for t in b] and [t.id for t in ra] == [t.id for t in rb]
    # a run resumed with smaller bounds keeps the most recent task's most recent success
    smaller = GRPO(learner(replay_per_task=1, replay_tasks=1), build_policy(POINTER, seed=0))
    smaller.load_state_dict(torch.load(io.BytesIO(saved), weights_only=True))
    assert list(smaller.replay.tasks) == ["other"] and len(smaller.replay.tasks["other"]) == 1
    assert "replay" not in GRPO(LearnerConfig(), build_policy(POINTER, seed=0)).state_dict()


def _saved(obj) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def _json_like(value):
    return json.loads(json.dumps(value))
