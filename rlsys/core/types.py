"""The data model shared by every part of rlsys (docs/architecture.md#contracts)."""

from __future__ import annotations

import io
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

OUTCOMES = ("success", "failure", "timeout", "env_error", "unknown")
TRAINABLE_OUTCOMES = frozenset({"success", "failure", "timeout"})


@dataclass
class Task:
    id: str
    instruction: str
    suite: str
    split: str = "train"
    start: str = ""
    checks: dict | None = None
    meta: dict = field(default_factory=dict)


def task_group(task: Task) -> str:
    """What success rates are reported per: the MiniWoB++ task, the synthetic task's depth (or "impossible"), or
    the website."""
    if task.suite == "synthweb":
        return task.meta.get("group") or task.suite
    return task.start if task.suite == "miniwob" else task.meta.get("web_name") or task.suite


def rollout_group(task: Task) -> str | None:
    """The id of the rollout group `task` was issued in (`run.group_size` > 1: the copies of one drawn task, each
    played from the same start; `meta["group_size"]` of them), or None for a task issued alone."""
    return task.meta.get("rollout_group")


@dataclass
class Observation:
    """What an agent sees at one step.

    The screenshot is kept as the PNG bytes the browser or device produced; `screenshot`
    decodes it on demand, so observations that are only stored never pay for a decode.
    """

    screenshot_png: bytes
    ui_text: str
    location: str
    task: str
    extras: dict = field(default_factory=dict)
    # Cached model inputs computed from this observation (e.g. pooled image features), keyed by
    # what computed them, so a feature is never reused by a model it does not belong to.
    features: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def screenshot(self) -> np.ndarray:
        from PIL import Image

        with Image.open(io.BytesIO(self.screenshot_png)) as im:
            return np.asarray(im.convert("RGB"))


@dataclass
class StepResult:
    observation: Observation
    reward: float
    done: bool
    info: dict = field(default_factory=dict)


@dataclass
class ActionSample:
    text: str
    logprob: float | None
    version: int
    token_ids: list[int] | None = None  # what was sampled, where the learner must score those ids (vLLM)
    prompt: str | None = None  # the model's input as it read it (after truncation, in its chat format), if it has one


@dataclass
class Step:
    observation: Observation
    action_text: str
    action: dict | None
    reward: float
    done: bool
    policy_version: int
    logprob: float | None
    timings: dict = field(default_factory=dict)
    error: str | None = None
    info: dict = field(default_factory=dict)  # env events: dialogs, blocked navigation, answer, verdict
    token_ids: list[int] | None = None  # the action's sampled token ids, when the policy reported them


@dataclass
class Trajectory:
    task: Task
    steps: list[Step]
    outcome: str
    env_id: str = ""
    runner_id: str = ""
    error: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # What the last action led to (the s' of the last step), when the episode got that far.
    final_observation: Observation | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {self.outcome!r}")

    @property
    def trainable(self) -> bool:
        return self.outcome in TRAINABLE_OUTCOMES

    @property
    def reward(self) -> float:
        return float(sum(s.reward for s in self.steps))

    @property
    def policy_version(self) -> int:
        """The oldest policy version that acted in this trajectory (-1 when it has no steps)."""
        return min((s.policy_version for s in self.steps), default=-1)

    def nbytes(self) -> int:
        """What this trajectory holds in memory: every object it reaches (screenshots, element lists,
        grammars, infos, the task), each counted once, with Python's own object overheads."""
        return deep_size(self)

    def next_observation(self, index: int) -> Observation | None:
        """s' of step `index`: the next step's observation, or the final one after the last step."""
        return self.steps[index + 1].observation if index + 1 < len(self.steps) else self.final_observation


def deep_size(obj: object) -> int:
    """Bytes of `obj` and of everything it references (dataclass fields, containers, arrays), each object once."""
    seen: set[int] = set()
    total = 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            total += sys.getsizeof(o) + (0 if o.base is None else o.nbytes)
            continue
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, list | tuple | set | frozenset):
            stack.extend(o)
        elif hasattr(o, "__dict__"):
            total += sys.getsizeof(o.__dict__)
            stack.extend(o.__dict__.values())
    return total


# Whether a text is an action of an env's action space: the parse error, or None for a valid action
# (`rlsys.envs.action_validator` makes one; Digi-Q's candidate sampler takes one).
Validator = Callable[[Observation, str], str | None]
