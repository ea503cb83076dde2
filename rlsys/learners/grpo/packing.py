"""A trajectory packed small for the replay of successes (replay.py), in what a checkpoint holds and `torch.load`
reads with `weights_only`: its distinct screenshots as their PNG bytes, each once however many steps show it (a
page returned to is drawn again alike), and the rest as zlib-compressed JSON (the fields rlsys's trajectory shards
store as JSON). Left out: cached `features`, which a policy computes again from the screenshot, and the final
observation, which GRPO never scores. A synthweb episode of four steps packs into 15.5 kB, 14.5 of them its
screenshots."""

from __future__ import annotations

import json
import zlib
from dataclasses import fields

from rlsys.core.types import Observation, Step, Task, Trajectory

STEP_FIELDS = [f.name for f in fields(Step) if f.name != "observation"]


def pack(traj: Trajectory) -> dict:
    screens: dict[bytes, int] = {}
    steps = []
    for step in traj.steps:
        obs = step.observation
        steps.append(
            {name: getattr(step, name) for name in STEP_FIELDS}
            | {"screen": screens.setdefault(obs.screenshot_png, len(screens)), "ui_text": obs.ui_text,
               "location": obs.location, "task": obs.task, "extras": obs.extras}
        )  # fmt: skip
    record = {
        "task": vars(traj.task),
        "outcome": traj.outcome,
        "env_id": traj.env_id,
        "runner_id": traj.runner_id,
        "error": traj.error,
        "steps": steps,
    }
    return {"id": traj.id, "record": zlib.compress(json.dumps(record).encode()), "screens": list(screens)}


def unpack(packed: dict) -> Trajectory:
    record = json.loads(zlib.decompress(packed["record"]))
    screens = packed["screens"]
    steps = [
        Step(
            Observation(screens[s["screen"]], s["ui_text"], s["location"], s["task"], s["extras"]),
            **{name: s[name] for name in STEP_FIELDS},
        )
        for s in record["steps"]
    ]
    return Trajectory(
        Task(**record["task"]), steps, record["outcome"], record["env_id"], record["runner_id"], record["error"],
        packed["id"],
    )  # fmt: skip


def packed_size(packed: dict) -> int:
    return len(packed["record"]) + sum(len(png) for png in packed["screens"])
