"""The Evaluator contract (docs/architecture.md#contracts): programmatic checks and VLM judges return a Verdict."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

from rlsys.core.types import Task, Trajectory


@dataclass
class Verdict:
    """`success` is None when no verdict could be had; such a trajectory is never trained on."""

    success: bool | None
    source: str
    reason: str = ""
    raw: str = ""
    latency_s: float = 0.0
    score: float | None = None  # a graded score in [0, 1] where the check has one
    calls: int = 0  # model calls made for this verdict, retries included (0 for a cached one)
    cached: bool = False
    error: str | None = None  # why there is no verdict: an LLMError kind, "deadline", "no_verdict", ...

    @property
    def reward(self) -> float | None:
        if self.success is None:
            return None
        return float(self.score if self.score is not None else self.success)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class Evaluator(Protocol):
    def judge(self, task: Task, trajectory: Trajectory) -> Verdict: ...


def judge_inputs(trajectory: Trajectory, screenshots: int = 3) -> tuple[str | None, list[bytes]]:
    """What a PAE-style judge sees: the agent's final answer (None if it never answered) and the
    last `screenshots` screenshots, oldest first. On an answering step the env acts on nothing,
    so the last observation is the screen the agent answered on."""
    if not trajectory.steps:
        return None, []
    answer = trajectory.steps[-1].info.get("answer") or None
    return answer, [s.observation.screenshot_png for s in trajectory.steps[-screenshots:]]
