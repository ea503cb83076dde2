"""The Env contract (docs/architecture.md#contracts) and the errors an env may raise."""

from __future__ import annotations

from typing import Protocol

from rlsys.core.types import Observation, StepResult, Task


class EnvBrokenError(RuntimeError):
    """The env can no longer be used (its browser or device died or hung); recreate it."""


class EnvSetupError(RuntimeError):
    """The env cannot be created on this machine (a missing binary, a bad path)."""


class Env(Protocol):
    def reset(self, task: Task) -> Observation: ...

    def step(self, action_text: str) -> StepResult: ...

    def close(self) -> None: ...
