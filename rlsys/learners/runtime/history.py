"""The replay-buffer actor seen as an algorithm's history (rlsys.learners.history.History)."""

from __future__ import annotations

import ray

from rlsys.core.types import Trajectory
from rlsys.data.history import Summaries

TIMEOUT_S = 600


class BufferActorHistory:
    def __init__(self, buffer, min_version: int | None = None):
        """`buffer`: a ReplayBufferActor handle; `min_version`: leave out trajectories of older policies (never
        offline data)."""
        self.buffer = buffer
        self.min_version = min_version

    def summaries(self) -> Summaries:
        return ray.get(self.buffer.summaries.remote(self.min_version), timeout=TIMEOUT_S)

    def fetch(self, ids: list[str]) -> list[Trajectory]:
        return ray.get(self.buffer.fetch.remote(ids), timeout=TIMEOUT_S) if ids else []
