"""The scripted demonstrations of the multi-step MiniWoB++ suite (rlsys/envs/web/miniwob_demos.py): each solves its
task in real Chromium, and the generator's shards (benchmarks/miniwob_demos.py) are offline data SFT learns from."""

import json
import math
import sys
from pathlib import Path

import pytest

from rlsys.config import load_config
from rlsys.core.types import Observation
from rlsys.data.shards import read_trajectories
from rlsys.driver.run_folder import check_before_ray
from rlsys.envs.web.miniwob_demos import MAX_DEMO_STEPS, SUITE, NoDemonstration, next_action
from rlsys.learners.filtered_bc import FilteredBC
from rlsys.policies import build_policy
from tests.conftest import make_config

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import miniwob_demos  # noqa: E402

EPISODES_PER_TASK = 2


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    """Two problems of every task of the suite, fresh seeds, played by the generator in one browser; every
    episode written."""
    tmp = tmp_path_factory.mktemp("demos")
    env = make_config(tmp).env  # the test machine's Chromium and chromedriver; missing, the generator fails
    out = tmp / "shards"
    summary = miniwob_demos.main(
        ["--out", str(out), "--episodes", str(EPISODES_PER_TASK * len(SUITE)), "--seed", "7", "--keep", "all",
         "--set", f"env.chromium={env.chromium}", f"env.chromedriver={env.chromedriver}", "env.viewport=[400,400]"]
    )  # fmt: skip
    return out, summary


def test_every_demonstrator_solves_its_task(demos):
    out, summary = demos
    for name in SUITE:
        task = summary["tasks"][name]
        assert task["episodes"] == EPISODES_PER_TASK and task["success_rate"] == 1.0, (name, task["not_solved"])
    trajectories = read_trajectories(out)
    assert sorted(t.task.start for t in trajectories) == sorted(SUITE * EPISODES_PER_TASK)
    assert len({t.task.meta["seed"] for t in trajectories}) == len(trajectories)  # a fresh problem each
    saved = json.loads((out / "dataset.json").read_text())
    assert saved["success_rate"] == 1.0 and saved["written_steps"] == sum(len(t.steps) for t in trajectories)
    for t in trajectories:
        assert t.outcome == "success" and 1 <= len(t.steps) <= MAX_DEMO_STEPS
        assert t.steps[-1].done and t.steps[-1].reward == 1.0 and t.task.instruction
        for k, step in enumerate(t.steps):
            assert step.logprob is None and step.policy_version == -1 and step.error is None
            # what the demonstrator read is what the runner shows a policy: the actions so far
            assert step.observation.extras["previous_actions"] == [s.action_text for s in t.steps[:k]]
            assert next_action(t.task.start, step.observation) == step.action_text  # a function of the observation


def test_the_shards_are_offline_data_that_sft_learns_from(demos, tmp_path):
    out, _ = demos
    cfg = load_config(
        None,
        overrides=["run.training=offline", f"offline.data=[{out}]", "learner.algorithm=sft",
                   "learner.offline_iterations=1", "learner.updates_per_iteration=2", "policy.kind=learned_pointer",
                   f"run.output_dir={tmp_path}", f"tasks.train=[{','.join(SUITE)}]"],
    )  # fmt: skip
    check_before_ray(cfg)  # what rlsys-train checks before it starts anything, offline.data's folders included
    trajectories = [t for path in cfg.offline.data for t in read_trajectories(path)]
    assert all(t.trainable for t in trajectories)
    policy = build_policy(cfg.policy, seed=0)
    steps = [s for t in trajectories for s in t.steps]
    scored = policy.log_probs([s.observation for s in steps], [s.action_text for s in steps])
    assert scored.isfinite().all()  # the policy can say every demonstrated action, typed texts included
    metrics = FilteredBC(cfg.learner, policy).update(trajectories)
    assert metrics["learner/selected_trajectories"] == len(trajectories) and metrics["learner/samples"] == len(steps)
    assert metrics["actor/updates"] == 2 and math.isfinite(metrics["actor/loss"])


def elements(*described):
    keys = ("tag", "type", "text", "value", "checked")
    return [dict(zip(keys, e, strict=True)) for e in described]


def test_login_user_types_by_input_type_whatever_the_order():
    """The page's labels are not tied to its fields, so the list names neither; their types tell them apart."""
    instruction = 'Enter the username "vina" and the password "US" into the text fields and press login.'
    page = elements(
        ("input", "password", "", "", None), ("input", "text", "", "", None), ("button", "", "Login", "", None)
    )
    obs = Observation(b"", "", "", instruction, {"elements": page})
    assert next_action("login-user", obs) == "type [1] vina"
    page[1]["value"] = "vina"
    assert next_action("login-user", obs) == "type [0] US"
    page[0]["value"] = "US"
    assert next_action("login-user", obs) == "click [2]"


def test_what_a_demonstrator_cannot_act_on_is_an_error_not_a_guess():
    tabs = elements(*[("a", "", f"Tab #{k}", "", None) for k in (1, 2, 3)], ("span", "", "other", "", None))
    obs = Observation(b"", "", "", 'Switch between the tabs to find and click on the link "ac".', {"elements": tabs})
    assert next_action("click-tab-2", obs) == "click [1]"
    obs.extras["previous_actions"] = ["click [1]", "click [2]"]
    with pytest.raises(NoDemonstration, match="in no tab"):
        next_action("click-tab-2", obs)
    with pytest.raises(ValueError, match="no demonstrator for 'click-test'"):
        next_action("click-test", obs)
