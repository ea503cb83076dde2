"""What an algorithm reads of the run's history (rlsys.data.history): every trajectory's summary, and whole
trajectories by id. A ReplayBuffer in this process is one; the learner actor hands its algorithm the
replay-buffer actor through rlsys.learners.runtime.history."""

from __future__ import annotations

from typing import Protocol

from rlsys.core.types import Trajectory
from rlsys.data.history import Summaries


class History(Protocol):
    def summaries(self) -> Summaries: ...

    def fetch(self, ids: list[str]) -> list[Trajectory]: ...
