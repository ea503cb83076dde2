"""One optimizer per network, each clipping only its own gradients.

DigiRL's released code clips one global norm over every module, including gradients other modules
left behind; here a step zeroes, accumulates, clips and updates exactly one network's parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from rlsys.learners import distributed
from rlsys.learners.losses import LossSum


class ModuleOptimizer:
    def __init__(self, name: str, params: Iterable[torch.nn.Parameter], lr: float, max_norm: float):
        self.name = name
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError(f"{name}: no trainable parameters")
        self.optimizer = torch.optim.Adam(self.params, lr=lr)
        self.max_norm = max_norm
        self.steps = 0

    def step(self, micro_batch_losses: Iterable[Callable[[], LossSum | torch.Tensor]]) -> dict:
        """Accumulate the mean of the micro-batch losses, clip this network's gradient norm, update. In a
        learner group each micro-batch's sum is divided by its count over the whole group, and gradients
        are summed across the group before clipping."""
        losses = list(micro_batch_losses)
        for p in self.params:
            p.grad = None
        total = 0.0
        for compute in losses:
            part = compute()
            if not isinstance(part, LossSum):  # a loss already averaged
                part = LossSum(part, 1.0)
            count = distributed.sum_over_group(part.count)
            if part.total is not None and count > 0:
                loss = part.total / count / len(losses)
                loss.backward()
                total += loss.item()
        distributed.sum_gradients(self.params)
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
        self.optimizer.step()
        self.steps += 1
        return {"loss": distributed.sum_over_group(total), "grad_norm": float(norm)}

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = state["steps"]


def train_steps(
    optimizer: ModuleOptimizer,
    items: list,
    loss_fn: Callable[[list], torch.Tensor],
    steps: int,
    cfg,
    rng,
    after_step: Callable[[], None] | None = None,
    select: Callable[[list], list] | None = None,
) -> dict:
    """`steps` optimizer steps, each over `cfg.grad_accumulation` micro-batches of `cfg.batch_size` items drawn
    without replacement; `after_step` runs after each (e.g. a target network's Polyak update).

    `loss_fn` returns a LossSum, or a tensor that is a mean over the items it was given. `select` turns a
    drawn micro-batch into what the loss sees (Digi-Q's Best-of-N); it runs on the whole micro-batch in
    every process of a learner group, so its random draws agree, and the loss then sees this process's
    shard."""
    if steps < 1 or not items:
        return {f"{optimizer.name}/updates": 0}
    size = min(cfg.batch_size, len(items))
    losses, norms = [], []
    for _ in range(steps):
        micro = [rng.sample(items, size) for _ in range(cfg.grad_accumulation)]
        out = optimizer.step(lambda b=b: _shard_loss(loss_fn, select(b) if select else b) for b in micro)
        if after_step is not None:
            after_step()
        losses.append(out["loss"])
        norms.append(out["grad_norm"])
    name = optimizer.name
    return {f"{name}/updates": steps, f"{name}/loss": sum(losses) / steps, f"{name}/grad_norm": sum(norms) / steps}


def _shard_loss(loss_fn: Callable[[list], torch.Tensor | LossSum], batch: list) -> LossSum:
    part = distributed.shard(batch)
    if not part:
        return LossSum(None, 0.0)
    out = loss_fn(part)
    return out if isinstance(out, LossSum) else LossSum(out * len(part), float(len(part)))
