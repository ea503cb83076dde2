"""What an algorithm reads of the run's history (rlsys.data.history): a ReplayBuffer in this process, or the
replay-buffer actor, seen through the same two calls."""

from __future__ import annotations

import ray

from rlsys.core.types import Trajectory
from rlsys.data.history import Summaries

TIMEOUT_S = 600


class HistoryView:
    def __init__(self, buffer, min_version: int | None = None):
        """`buffer`: a ReplayBuffer or a ReplayBufferActor handle; `min_version`: leave out trajectories of
        older policies (never offline data)."""
        self.buffer = buffer
        self.min_version = min_version

    def summaries(self) -> Summaries:
        return self._call("summaries", self.min_version)

    def fetch(self, ids: list[str]) -> list[Trajectory]:
        return self._call("fetch", ids) if ids else []

    def _call(self, name: str, *args):
        method = getattr(self.buffer, name)
        if hasattr(method, "remote"):
            return ray.get(method.remote(*args), timeout=TIMEOUT_S)
        return method(*args)
