"""How many optimizer steps `learner.grpo.epochs` passes over an update's samples take, and the draws that make
them passes (train_steps otherwise draws each micro-batch at random, so one "pass" would leave about a third of
the samples out)."""

from __future__ import annotations

import math
import random


def steps_for(samples: int, epochs: int, batch_size: int, grad_accumulation: int) -> int:
    """Steps of `grad_accumulation` micro-batches of `batch_size` samples (a pass's last micro-batch shorter) that
    cover `epochs` passes; where the passes' micro-batches do not fill the last step, it takes the rest from a
    further pass."""
    per_pass = math.ceil(samples / min(batch_size, samples))
    return math.ceil(epochs * per_pass / grad_accumulation)


class Passes:
    """What train_steps draws micro-batches with (its `rng` argument): the next `k` samples of a shuffled pass,
    a new shuffle once a pass is used up. Every process of a learner group draws the same."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.left: list[int] = []

    def sample(self, items: list, k: int) -> list:
        if not self.left:
            self.left = self.rng.sample(range(len(items)), len(items))
        taken, self.left = self.left[:k], self.left[k:]
        return [items[i] for i in taken]
