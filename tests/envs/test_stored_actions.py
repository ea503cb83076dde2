"""A parsed action as it is stored (the step's `action` dict, JSON in a trajectory shard) comes back as the same
action: zeros (element 0, coordinate 0) are values, not "unset"."""

from __future__ import annotations

import json

import pytest

from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.data.shards import read_shard, write_shard
from rlsys.envs.android.actions import KINDS as ANDROID_KINDS
from rlsys.envs.android.actions import AndroidAction
from rlsys.envs.web.spaces import KINDS as WEB_KINDS
from rlsys.envs.web.spaces import WebAction

WEB = [
    WebAction("click", element=0),
    WebAction("type", element=0, text="0"),
    WebAction("type", element=0, text="x", submit=True),
    WebAction("type", text="typed where the focus is"),  # no element: None, not 0
    WebAction("scroll", element=0, direction="down"),
    WebAction("scroll", direction="up"),
    WebAction("wait"),
    WebAction("back"),
    WebAction("goto", url="http://127.0.0.1:0/"),
    WebAction("google", text="0"),
    WebAction("home"),
    WebAction("key", text="Enter"),
    WebAction("tap", point=(0.0, 0.0)),
    WebAction("swipe", point=(0.0, 0.0), end=(0.0, 1.0)),
    WebAction("answer", text="0"),
    WebAction("answer"),
    WebAction("impossible", thought="0"),
]
ANDROID = [
    AndroidAction("tap", point=(0.0, 0.0)),
    AndroidAction("swipe", point=(0.0, 0.0), end=(1.0, 0.0)),
    AndroidAction("type", text="0"),
    AndroidAction("type"),
    AndroidAction("home"),
    AndroidAction("back"),
    AndroidAction("enter"),
    AndroidAction("complete"),
    AndroidAction("impossible"),
]


def test_every_kind_is_covered():
    assert {a.kind for a in WEB} == set(WEB_KINDS)
    assert {a.kind for a in ANDROID} == set(ANDROID_KINDS)


def test_zeros_are_kept():
    assert WebAction("click", element=0).to_dict() == {"kind": "click", "element": 0}
    assert WebAction("tap", point=(0.0, 0.0)).to_dict() == {"kind": "tap", "point": [0.0, 0.0]}
    assert WebAction("type", element=0, text="hi").to_dict() == {"kind": "type", "element": 0, "text": "hi"}


@pytest.mark.parametrize("action", WEB + ANDROID, ids=lambda a: f"{type(a).__name__}-{a.kind}")
def test_an_action_survives_json(action):
    assert type(action)(**json.loads(json.dumps(action.to_dict()))) == action


def test_actions_survive_a_trajectory_shard(tmp_path):
    actions = WEB + ANDROID
    obs = Observation(b"", "[0] button", "http://127.0.0.1/", "do it")
    steps = [Step(obs, f"action {i}", a.to_dict(), 0.0, False, 0, None) for i, a in enumerate(actions)]
    write_shard(tmp_path / "shard.parquet", [Trajectory(Task("t", "do it", "web"), steps, "failure")])
    (stored,) = read_shard(tmp_path / "shard.parquet")
    assert [type(a)(**step.action) for a, step in zip(actions, stored.steps, strict=True)] == actions
