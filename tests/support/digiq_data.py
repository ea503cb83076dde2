"""A synthetic offline dataset for Digi-Q with a known better action.

Every episode has two steps. The first action only moves to the second screen; the second decides
the outcome: `click [2]` succeeds with probability 0.9, every other action with 0.1. The behaviour
policy picks uniformly, so it succeeds about 30% of the time; a policy that always picks the better
action succeeds 90% of the time.
"""

from __future__ import annotations

import io
import random

from PIL import Image

from rlsys.core.grammar import Grammar
from rlsys.core.types import Observation, Step, Task, Trajectory

ACTIONS = tuple(f"click [{i}]" for i in range(4))
GOOD = "click [2]"
P_SUCCESS = {a: 0.9 if a == GOOD else 0.1 for a in ACTIONS}
COLOURS = {0: (40, 60, 200), 1: (40, 180, 60), "success": (250, 250, 250), "failure": (200, 30, 30)}


def png(colour: tuple[int, int, int], size: int = 32) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(buf, format="PNG")
    return buf.getvalue()


def observation(task: Task, screen) -> Observation:
    elements = [{"text": f"item {i}"} for i in range(len(ACTIONS))]
    ui = "\n".join(f"[{i}] item {i} on screen {screen}" for i in range(len(ACTIONS)))
    return Observation(
        png(COLOURS[screen]),
        ui,
        f"synthetic://{screen}",
        task.instruction,
        {"elements": elements, "grammar": Grammar(ACTIONS, (), 32).to_dict()},
    )


def episode(task: Task, first: str, second: str, success: bool) -> Trajectory:
    outcome = "success" if success else "failure"
    steps = [
        Step(observation(task, 0), first, None, 0.0, False, 0, None),
        Step(observation(task, 1), second, None, float(success), True, 0, None),
    ]
    return Trajectory(task, steps, outcome, final_observation=observation(task, outcome))


def synthetic_dataset(episodes: int, seed: int = 0, tasks: int = 4) -> list[Trajectory]:
    rng = random.Random(seed)
    out = []
    for j in range(episodes):
        task = Task(f"synthetic-{j % tasks}", f"open the item of list {j % tasks}", "synthetic")
        second = rng.choice(ACTIONS)
        out.append(episode(task, rng.choice(ACTIONS), second, rng.random() < P_SUCCESS[second]))
    return out


def with_candidates(trajectories: list[Trajectory], k: int, seed: int = 0) -> list[Trajectory]:
    """Candidates as a behaviour-like sampler would give them: the dataset action, then k - 1 uniform draws."""
    rng = random.Random(seed)
    for t in trajectories:
        for step in t.steps:
            step.info["digiq"] = {"candidates": [step.action_text] + [rng.choice(ACTIONS) for _ in range(k - 1)]}
    return trajectories


def tiny_learner(vlm_folder, k: int) -> dict:
    """`learner` settings small enough for a CPU, with which the critic separates the better action."""
    return {
        "algorithm": "digiq",
        "lr": 3e-3,
        "batch_size": 16,
        "digiq": {
            "text_hidden": 16,
            "max_text_tokens": 48,
            "image_feature_dim": 8,
            "image_size": 16,
            "critic_hidden": 32,
            "critic_lr": 1e-3,
            "critic_steps": 300,
            "critic_iterations": 2,
            "actor_steps": 40,
            "actor_iterations": 2,
            "best_of_n": k,
            "advantage_threshold": 0.1,
            "validation_fraction": 0.1,
            "representation": {"model": str(vlm_folder), "batch_size": 32},
            "candidates": {"k": k, "temperature": 1.2, "max_redraws": 2, "batch_size": 64},
        },
    }
