"""GRPO for multi-turn agents (docs/algorithms/grpo.md): every trajectory of a group played from one task gets its
group-relative advantage on every action token of every turn, and the policy climbs a clipped surrogate. With
`step_groups` on, each action's advantage adds step_weight x its own among the steps taken from the same state
(GiGPO; steps.py). With `success_replay` on, a group whose members all failed alike gets a stored success of its
task in place of one of them (ARPO; replay.py).

The ratio is AReaL's decoupled one. rlsys records each action's behaviour log-prob as one number per action (and
its sampled token ids), not per token, so the per-token ratio is taken against the proximal policy: the weights
the update starts from, scored before its first step. The policy that acted enters through a detached weight per
action, min(learner.importance_clip, pi_prox(a|s) / mu(a|s)) (1 where mu is unknown); in sync mode at policy lag 0
it is 1 up to rounding. With `kl_coef` > 0, a k3 KL per token to the weights the run started with.
"""

from __future__ import annotations

import numpy as np
import torch

from rlsys.config import LearnerConfig
from rlsys.core.types import Trajectory
from rlsys.learners.grpo.groups import GroupSample, StepGrouping, group_samples
from rlsys.learners.grpo.objective import clipped_surrogate, kl_k3, reduce
from rlsys.learners.grpo.passes import Passes, steps_for
from rlsys.learners.grpo.reference import ReferencePolicy
from rlsys.learners.grpo.replay import SuccessReplay
from rlsys.learners.grpo.scoring import spread, token_logprobs_of
from rlsys.learners.history import History
from rlsys.learners.imitation import ActorUpdate, sampled_ids
from rlsys.learners.losses import LossSum, importance_weights
from rlsys.learners.optim import train_steps
from rlsys.learners.selection import policy_lag


class GRPO:
    def __init__(self, cfg: LearnerConfig, policy, seed: int = 0):
        self.cfg, self.g = cfg, cfg.grpo
        g = self.g
        self.policy = policy
        # the actor's optimizer, draws and token budget (its own loss is not used)
        self.actor = ActorUpdate(cfg, policy, "token_mean", correct_off_policy=False, seed=seed)
        self.reference = ReferencePolicy(policy) if g.kl_coef > 0 else None
        self.steps = StepGrouping(g.step_weight, g.step_gamma) if g.step_groups else None
        self.replay = None
        if g.success_replay:
            self.replay = SuccessReplay(g.replay_per_task, g.replay_tasks, g.replay_max_bytes, seed)
        self._tokens = np.zeros(4)  # per update: action tokens, clipped low, clipped high, summed k3

    def update(
        self, trajectories: list[Trajectory], offline_iteration: int | None = None, history: History | None = None
    ) -> dict:
        trajectories, replayed, metrics = self._replay_successes(trajectories)
        groups = group_samples(trajectories, self.g.scale_by_std, self.steps)
        samples = groups.samples
        played = [t for t in groups.trained if all(t is not r for r in replayed)]  # the lag of the runs' own episodes
        metrics |= groups.metrics() | policy_lag(played, self.actor.trained_version)
        if not samples:
            return metrics | {"actor/updates": 0}
        metrics |= self._score_before_update(samples)
        self._tokens = np.zeros(4)
        c = self.cfg
        steps = steps_for(len(samples), self.g.epochs, c.batch_size, c.grad_accumulation)
        draws = Passes(self.actor.rng)
        metrics |= train_steps(self.actor.optimizer, samples, self.loss_sum, steps, c, draws, split=self.actor.split)
        return metrics | self.token_metrics()

    def _replay_successes(self, trajectories: list[Trajectory]) -> tuple[list[Trajectory], list[Trajectory], dict]:
        """With success_replay: the sample with stored successes in groups that failed whole, the successes put in,
        and the store's counts; the sample's own successes are then stored, for later updates only."""
        if self.replay is None:
            return trajectories, [], {}
        filled, replayed = self.replay.fill(trajectories)
        self.replay.add(trajectories)
        return filled, replayed, self.replay.metrics() | {"grpo/replayed_successes": len(replayed)}

    def loss_sum(self, batch: list[GroupSample]) -> LossSum:
        """-(min(rho A, clip(rho, 1 - clip_low, 1 + clip_high) A) x w - kl_coef x k3) per action token, rho =
        pi_theta / pi_prox per token, w the action's behaviour weight; summed and counted as `reduction` says."""
        logp, mask = self.policy.token_logprobs([s.observation for s in batch], [s.action for s in batch],
                                                **sampled_ids(batch))  # fmt: skip
        proximal = spread([s.proximal for s in batch], mask)
        advantages = torch.tensor([s.advantage for s in batch], device=logp.device)
        weights = torch.tensor([s.weight for s in batch], device=logp.device).unsqueeze(-1)
        objective = clipped_surrogate(logp, proximal, advantages, self.g.clip_low, self.g.clip_high) * weights
        kl = None
        if self.reference is not None:
            kl = kl_k3(logp, spread([s.reference for s in batch], mask))
            objective = objective - self.g.kl_coef * kl
        self._count_tokens(logp, proximal, advantages, mask, kl)
        return LossSum(*reduce(-objective, mask, self.g.reduction))

    def _score_before_update(self, samples: list[GroupSample]) -> dict:
        """pi_prox per token, and from it each action's behaviour weight; the reference's per token when the KL is
        on. Reports the weights as ActorUpdate does."""
        size = self.cfg.batch_size
        for s, row in zip(samples, token_logprobs_of(self.policy, self.policy.token_logprobs, samples, size)):
            s.proximal = row
        if self.reference is not None:
            for s, row in zip(samples, token_logprobs_of(self.policy, self.reference.token_logprobs, samples, size)):
                s.reference = row
        behaviour = [s.behaviour_logprob for s in samples]
        proximal = torch.stack([s.proximal.sum() for s in samples])
        ratios, unknown = importance_weights(proximal, behaviour, float("inf"))
        weights = ratios.clamp(max=self.cfg.importance_clip)
        for s, w in zip(samples, weights.tolist()):
            s.weight = w
        return {
            "actor/importance_weight": float(weights.mean()),
            "actor/importance_clipped": int((ratios > self.cfg.importance_clip).sum()),
            "actor/no_behaviour_logprob": unknown,
        }

    def token_metrics(self) -> dict:
        """Over every action token the update's steps saw: the share the clip held at each end, and the mean k3."""
        tokens, low, high, kl = (float(x) for x in self._tokens)
        shares = {"grpo/clip_fraction_low": low / max(tokens, 1), "grpo/clip_fraction_high": high / max(tokens, 1)}
        return shares | ({"grpo/kl": kl / max(tokens, 1)} if self.reference else {})

    @torch.no_grad()
    def _count_tokens(self, logp, proximal, advantages, mask, kl) -> None:
        """Tokens whose ratio the clip holds (their gradient is cut): below 1 - clip_low with A < 0, above
        1 + clip_high with A > 0."""
        ratio, a = torch.exp(logp - proximal), advantages.unsqueeze(-1)
        low = (ratio < 1 - self.g.clip_low) & (a < 0) & mask
        high = (ratio > 1 + self.g.clip_high) & (a > 0) & mask
        summed_kl = float(kl.masked_fill(~mask, 0).sum()) if kl is not None else 0.0
        self._tokens += [float(mask.sum()), float(low.sum()), float(high.sum()), summed_kl]

    def state_dict(self) -> dict:
        return {"actor": self.actor.state_dict()} | ({"replay": self.replay.state_dict()} if self.replay else {})

    def load_state_dict(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        if self.replay is not None and "replay" in state:
            self.replay.load_state_dict(state["replay"])
