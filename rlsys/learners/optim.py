"""One optimizer per network, each clipping only its own gradients.

DigiRL's released code clips one global norm over every module, including gradients other modules
left behind; here a step zeroes, accumulates, clips and updates exactly one network's parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import torch

from rlsys.learners import distributed, sharding
from rlsys.learners.losses import LossSum


class ModuleOptimizer:
    def __init__(self, name: str, params: Iterable[torch.nn.Parameter], lr: float, max_norm: float):
        self.name = name
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError(f"{name}: no trainable parameters")
        # one fused kernel per step on GPUs (the default foreach path launches several per tensor group)
        self.optimizer = torch.optim.Adam(self.params, lr=lr, fused=all(p.is_cuda for p in self.params) or None)
        self.max_norm = max_norm
        self.steps = 0

    def step(self, parts: Iterable[Callable[[], LossSum | torch.Tensor]]) -> dict:
        """One update over the step's whole batch: every part (a micro-batch, or a token-budget chunk of one)
        is backpropagated as its sum, then the gradient is divided by the count over all parts and, in a
        learner group, over all processes. Splitting a batch into parts changes no number: the step's loss is
        the batch's sum over its count, the mean one batch of `batch_size` x `grad_accumulation` would give."""
        for p in self.params:
            p.grad = None
        total, count = 0.0, 0.0
        for compute in parts:
            part = compute()
            if not isinstance(part, LossSum):  # a loss already averaged
                part = LossSum(part, 1.0)
            if part.total is not None:  # a pass that adds nothing (count 0) still runs: sharded passes are collective
                part.total.backward()
                total += part.total.item()
                count += part.count
        count = distributed.sum_over_group(count)
        distributed.sum_gradients(self.params)
        if count > 0:
            for p in self.params:
                if p.grad is not None:
                    p.grad.div_(count)
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
        self.optimizer.step()
        self.steps += 1
        return {"loss": distributed.sum_over_group(total) / max(count, 1.0), "grad_norm": float(norm)}

    def state_dict(self) -> dict:
        return {"optimizer": sharding.optimizer_state(self.optimizer), "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        sharding.load_optimizer_state(self.optimizer, state["optimizer"])
        self.steps = state["steps"]


def train_steps(
    optimizer: ModuleOptimizer,
    items: list,
    loss_fn: Callable[[list], torch.Tensor | LossSum],
    steps: int,
    cfg,
    rng,
    after_step: Callable[[], None] | None = None,
    select: Callable[[list], list] | None = None,
    split: Callable[[list], list[list]] | None = None,
) -> dict:
    """`steps` optimizer steps, each over `cfg.grad_accumulation` micro-batches of `cfg.batch_size` items drawn
    without replacement; `after_step` runs after each (e.g. a target network's Polyak update).

    `loss_fn` returns a LossSum, or a tensor that is a mean over the items it was given. `select` turns a
    drawn micro-batch into what the loss sees (Digi-Q's Best-of-N); it runs on the whole micro-batch in
    every process of a learner group, so its random draws agree, and the loss then sees this process's
    shard. `split` cuts a shard into chunks that go through forward and backward one at a time (a token
    budget), which bounds memory and changes no number (ModuleOptimizer.step)."""
    if steps < 1 or not items:
        return {f"{optimizer.name}/updates": 0}
    size = min(cfg.batch_size, len(items))
    losses, norms = [], []
    for _ in range(steps):
        micro = [rng.sample(items, size) for _ in range(cfg.grad_accumulation)]
        out = optimizer.step(_parts(micro, loss_fn, select, split, optimizer.params))
        if after_step is not None:
            after_step()
        losses.append(out["loss"])
        norms.append(out["grad_norm"])
    name = optimizer.name
    return {f"{name}/updates": steps, f"{name}/loss": sum(losses) / steps, f"{name}/grad_norm": sum(norms) / steps}


def _parts(micro: list[list], loss_fn, select, split, params) -> Iterator[Callable[[], LossSum]]:
    """Each micro-batch's loss thunks, made as the step reaches them (so `select` draws in order). Where `params`
    are sharded, a process with fewer chunks than another (or none) adds passes that change nothing."""
    for batch in micro:
        chosen = select(batch) if select else batch
        shard = distributed.shard(chosen)
        chunks = (split(shard) if split else [shard]) if shard else []
        passes = distributed.agreed_passes(len(chunks), params)  # before any pass: it is a collective too
        for chunk in chunks:
            yield lambda chunk=chunk: _loss_sum(loss_fn, chunk)
        for _ in range(passes - len(chunks)):
            yield lambda stand_in=chosen[:1]: _nothing(_loss_sum(loss_fn, stand_in))


def _nothing(part: LossSum) -> LossSum:
    """A pass that gathers and reduces what the group's other passes do and adds nothing: its loss times zero."""
    return LossSum(part.total * 0.0, 0.0)


def _loss_sum(loss_fn: Callable[[list], torch.Tensor | LossSum], part: list) -> LossSum:
    if not part:
        return LossSum(None, 0.0)
    out = loss_fn(part)
    return out if isinstance(out, LossSum) else LossSum(out * len(part), float(len(part)))
