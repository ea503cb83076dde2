"""Digi-Q's representation fine-tuning data: does an action visibly change the screen?

Before the critic is trained, the VLM whose hidden states it reads is fine-tuned to answer "yes" or
"no" to "will this action visibly change the screen?" for the (screenshot, action) pairs of the
offline data. The label comes from the data itself: the mean squared pixel difference between the
screenshots before and after the action, both shrunk to a quarter of their size, above 30 means
"yes". `change_examples` turns trajectories into one single-step trajectory per labelled pair, so
the existing SFT path (`learner.algorithm: sft` with `policy.prompt: digiq_change`) trains on them.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import replace

import numpy as np
from PIL import Image

from rlsys.core.types import Step, Trajectory

CHANGE_PROMPT = "digiq_change"  # the policy.prompt template that asks the question
DEFAULT_THRESHOLD = 30.0


def _rgb(png: bytes) -> Image.Image:
    with Image.open(io.BytesIO(png)) as im:
        return im.convert("RGB")


def change_score(before_png: bytes, after_png: bytes, downscale: int = 4) -> float:
    """Mean over pixels and channels of the squared difference (0-255 scale) between the two
    screenshots, both resized with a box filter to the before image's size divided by `downscale`."""
    before, after = _rgb(before_png), _rgb(after_png)
    size = (max(1, before.width // downscale), max(1, before.height // downscale))
    a = np.asarray(before.resize(size, Image.Resampling.BOX), dtype=np.float64)
    b = np.asarray(after.resize(size, Image.Resampling.BOX), dtype=np.float64)
    return float(np.mean((a - b) ** 2))


def change_examples(
    trajectories: Iterable[Trajectory], threshold: float = DEFAULT_THRESHOLD
) -> tuple[list[Trajectory], dict]:
    """One single-step trajectory per step that was carried out and has a next screen: the step's
    observation with the action as `extras["candidate_action"]` (no grammar: the answer is free
    text; no cached features), and "yes" as the action when the change score is above `threshold`,
    else "no". Steps with an error or no action count as `skipped_error`, the last step of a
    trajectory without a final observation as `skipped_no_next`."""
    examples: list[Trajectory] = []
    stats = {"examples": 0, "yes": 0, "no": 0, "skipped_no_next": 0, "skipped_error": 0}
    for t in trajectories:
        for i, step in enumerate(t.steps):
            if step.error or not step.action_text:
                stats["skipped_error"] += 1
                continue
            after = t.next_observation(i)
            if after is None:
                stats["skipped_no_next"] += 1
                continue
            score = change_score(step.observation.screenshot_png, after.screenshot_png)
            answer = "yes" if score > threshold else "no"
            extras = {k: v for k, v in step.observation.extras.items() if k != "grammar"}
            observation = replace(step.observation, extras=extras | {"candidate_action": step.action_text}, features={})
            example = Step(
                observation=observation,
                action_text=answer,
                action=None,
                reward=0.0,
                done=True,
                policy_version=step.policy_version,
                logprob=None,
                info={"change_score": score, "source": {"trajectory_id": t.id, "step": i}},
            )
            examples.append(
                Trajectory(
                    task=t.task,
                    steps=[example],
                    outcome="success",
                    env_id=t.env_id,
                    runner_id=t.runner_id,
                    id=f"{t.id}:{i}",
                )
            )
            stats[answer] += 1
    stats["examples"] = len(examples)
    return examples, stats
