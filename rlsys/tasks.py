"""Task sources: which task an env runner plays next."""

from __future__ import annotations

import random

from rlsys.types import Task

EVAL_SEED_BASE = 1_000_000  # evaluation problems never share a seed with training ones


def miniwob_task(name: str, seed: int, split: str) -> Task:
    return Task(id=f"{name}#{seed}", instruction="", suite="miniwob", split=split, start=name, meta={"seed": seed})


class TaskSource:
    """Training tasks, drawn at random (or in order) with fresh seeds; its state is checkpointed."""

    def __init__(self, names: list[str], sampling: str = "random", seed: int = 0):
        if not names:
            raise ValueError("tasks.train must name at least one task")
        self.names = list(names)
        self.sampling = sampling
        self._rng = random.Random(seed)
        self.drawn = 0

    def next(self) -> Task:
        if self.sampling == "sequential":
            name = self.names[self.drawn % len(self.names)]
        else:
            name = self._rng.choice(self.names)
        self.drawn += 1
        return miniwob_task(name, self._rng.randrange(EVAL_SEED_BASE), "train")

    def state_dict(self) -> dict:
        version, internal, gauss = self._rng.getstate()
        return {"drawn": self.drawn, "rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))
        self.drawn = state["drawn"]


def eval_tasks(names: list[str], episodes: int) -> list[Task]:
    """The same problems at every evaluation: `episodes` spread evenly over the tasks, fixed seeds."""
    return [miniwob_task(names[i % len(names)], EVAL_SEED_BASE + i, "eval") for i in range(episodes)]
