"""DigiRL (docs/algorithms/digirl.md#update): an instruction critic, a step critic and an advantage-filtered actor.

An online iteration trains the instruction critic, then the step critic, then the actor, each with its
own optimizer and its own gradient clip. The offline phase runs the same three stages one after
another, `offline_*_iterations` iterations each. Trajectories are split train / validation by id
(stable across iterations and resumes); critics train on the train part and report on the other.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from rlsys.config import LearnerConfig
from rlsys.core.returns import discounted_returns, success_labels
from rlsys.core.types import Observation, Trajectory
from rlsys.learners.digirl.advantages import curriculum_scores, digirl_compat, doubly_robust, keep_mask, top_quantile
from rlsys.learners.digirl.critics import InstructionCritic, StepCritic, critic_text
from rlsys.learners.imitation import ActorSample, ActorUpdate
from rlsys.learners.losses import success_probability, two_class_ce
from rlsys.learners.optim import ModuleOptimizer, train_steps
from rlsys.learners.selection import imitable_steps, is_validation
from rlsys.policies.image_features import FEATURE_KEY, PooledImageFeatures

STAGES = ("instruction_critic", "step_critic", "actor")
SCORE_BATCH = 64


@dataclass
class Transition:
    """One step with what the step critic reads: s = (text, [f_{t-1}, f_t]), s' likewise."""

    traj: Trajectory
    index: int
    reward: float
    ret: float
    label: int

    @property
    def step(self):
        return self.traj.steps[self.index]

    def observations(self) -> tuple[Observation, Observation, Observation]:
        """(s_{t-1}, s_t, s_{t+1}); s_{-1} = s_0, and s_{T} = s_{T-1} when the final one was not recorded."""
        steps = self.traj.steps
        current = steps[self.index].observation
        previous = steps[self.index - 1].observation if self.index else current
        return previous, current, self.traj.next_observation(self.index) or current


def transitions_of(traj: Trajectory, gamma: float) -> list[Transition]:
    rewards = [s.reward for s in traj.steps]
    returns = discounted_returns(rewards, gamma)
    labels = success_labels(returns)
    return [Transition(traj, i, rewards[i], float(returns[i]), int(labels[i])) for i in range(len(traj.steps))]


class DigiRL:
    def __init__(self, cfg: LearnerConfig, policy, seed: int = 0, device: str = "cpu", correct_off_policy=False):
        self.cfg = cfg
        self.d = d = cfg.digirl
        self.device = device
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.instruction_critic = InstructionCritic(d).to(device)
            self.step_critic = StepCritic(d).to(device)
        self.images = PooledImageFeatures(d.vision_path, d.image_feature_dim, d.image_size, device)
        self.optimizers = {
            "instruction_critic": ModuleOptimizer(
                "instruction_critic", self.instruction_critic.parameters(), d.critic_lr, cfg.grad_clip
            ),
            "step_critic": ModuleOptimizer("step_critic", self.step_critic.parameters(), d.critic_lr, cfg.grad_clip),
        }
        self.actor = ActorUpdate(cfg, policy, "sequence_mean", correct_off_policy, seed)
        self.rng = random.Random(seed)
        self._features: dict[tuple[str, int], np.ndarray] = {}

    # ------------------------------------------------------------------ schedule

    def stages(self, offline_iteration: int | None) -> list[tuple[str, int]]:
        d = self.d
        steps = {
            "instruction_critic": d.instruction_critic_steps,
            "step_critic": d.step_critic_steps,
            "actor": d.actor_steps,
        }
        if offline_iteration is None:
            return [(name, steps[name]) for name in STAGES]
        bounds = np.cumsum(
            [d.offline_instruction_critic_iterations, d.offline_step_critic_iterations, d.offline_actor_iterations]
        )
        stage = STAGES[min(int(np.searchsorted(bounds, offline_iteration, side="right")), 2)]
        return [(stage, steps[stage])]

    def update(self, trajectories: list[Trajectory], offline_iteration: int | None = None) -> dict:
        usable = [t for t in trajectories if t.trainable and t.steps]
        train, validation = [], []
        for t in usable:
            (validation if is_validation(t, self.d.validation_fraction) else train).append(t)
        self._cache_features(usable)
        metrics = {"digirl/train_trajectories": len(train), "digirl/validation_trajectories": len(validation)}
        for stage, steps in self.stages(offline_iteration):
            metrics["digirl/stage"] = stage
            metrics |= getattr(self, f"_train_{stage}")(train, validation, steps)
        return metrics

    # ------------------------------------------------------------------ instruction critic

    def instruction_values(self, trajectories: list[Trajectory]) -> np.ndarray:
        """p_instr(task) = P(success | instruction), no gradient."""
        self.instruction_critic.eval()
        with torch.no_grad():
            texts = [t.task.instruction for t in trajectories]
            chunks = [
                success_probability(self.instruction_critic(texts[i : i + SCORE_BATCH]))
                for i in range(0, len(texts), SCORE_BATCH)
            ]
        return torch.cat(chunks).cpu().numpy() if chunks else np.zeros(0)

    def _instruction_loss(self, batch: list[Trajectory]) -> torch.Tensor:
        labels = torch.tensor([int(t.reward > 0) for t in batch], device=self.device)
        return two_class_ce(self.instruction_critic([t.task.instruction for t in batch]), labels)

    def _train_instruction_critic(self, train, validation, steps: int) -> dict:
        if not train:
            return {}
        self.instruction_critic.train()
        out = self._module_steps("instruction_critic", train, steps, self._instruction_loss)
        if validation:
            self.instruction_critic.eval()
            with torch.no_grad():
                out["instruction_critic/validation_loss"] = float(self._instruction_loss(validation[:256]))
        return out

    # ------------------------------------------------------------------ step critic

    def _cache_features(self, trajectories: list[Trajectory]) -> None:
        """Screenshot features for every observation, computed once per (trajectory, step) across updates."""
        wanted, missing = {}, []
        for t in trajectories:
            observations = [s.observation for s in t.steps] + [t.final_observation] * bool(t.final_observation)
            for i, obs in enumerate(observations):
                key = (t.id, i)
                wanted[key] = obs
                if key in self._features:
                    obs.features.setdefault(FEATURE_KEY, self._features[key])
                else:
                    missing.append((key, obs))
        for i in range(0, len(missing), SCORE_BATCH):
            chunk = missing[i : i + SCORE_BATCH]
            self.images([obs for _, obs in chunk])
        self._features = {key: obs.features[FEATURE_KEY] for key, obs in wanted.items()}

    def _stacked(self, pairs: list[tuple[Observation, Observation]]) -> torch.Tensor:
        first = self.images([a for a, _ in pairs])
        second = self.images([b for _, b in pairs])
        return torch.cat([first, second], dim=-1)

    def step_logits(self, transitions: list[Transition], next_state: bool) -> tuple[torch.Tensor, torch.Tensor]:
        triples = [tr.observations() for tr in transitions]
        if next_state:
            texts, pairs = [critic_text(nxt) for _, _, nxt in triples], [(cur, nxt) for _, cur, nxt in triples]
        else:
            texts, pairs = [critic_text(cur) for _, cur, _ in triples], [(prev, cur) for prev, cur, _ in triples]
        return self.step_critic(texts, self._stacked(pairs))

    def _step_loss(self, batch: list[Transition]) -> torch.Tensor:
        """CE(V1(s), y) + CE(V2(s), y) + CE(V1(s'), y) + CE(V2(s'), y), y = 1[G_t > 0]."""
        labels = torch.tensor([tr.label for tr in batch], device=self.device)
        return sum(two_class_ce(logits, labels) for nxt in (False, True) for logits in self.step_logits(batch, nxt))

    def state_values(self, transitions: list[Transition], next_state: bool) -> np.ndarray:
        """p(s) = min over the two heads of P(success), no gradient."""
        self.step_critic.eval()
        with torch.no_grad():
            chunks = []
            for i in range(0, len(transitions), SCORE_BATCH):
                l1, l2 = self.step_logits(transitions[i : i + SCORE_BATCH], next_state)
                chunks.append(torch.minimum(success_probability(l1), success_probability(l2)))
        return torch.cat(chunks).cpu().numpy() if chunks else np.zeros(0)

    def _train_step_critic(self, train, validation, steps: int) -> dict:
        transitions = [tr for t in train for tr in transitions_of(t, self.d.gamma)]
        if not transitions:
            return {}
        self.step_critic.train()
        out = self._module_steps("step_critic", transitions, steps, self._step_loss)
        held_out = [tr for t in validation for tr in transitions_of(t, self.d.gamma)][:256]
        if held_out:
            self.step_critic.eval()
            with torch.no_grad():
                out["step_critic/validation_loss"] = float(self._step_loss(held_out))
            predicted = self.state_values(held_out, next_state=False) > 0.5
            labels = np.array([tr.label for tr in held_out])
            out["step_critic/validation_accuracy"] = float(np.mean(predicted == labels))
        return out

    # ------------------------------------------------------------------ actor

    def curriculum(self, train: list[Trajectory]) -> list[Trajectory]:
        """Trajectories whose reward - p_instr(task) is at or above the `curriculum_quantile` of those scores."""
        if not train:
            return []
        scores = curriculum_scores([t.reward for t in train], self.instruction_values(train))
        return [t for t, keep in zip(train, top_quantile(scores, self.d.curriculum_quantile)) if keep]

    def actor_samples(self, train: list[Trajectory]) -> tuple[list[ActorSample], dict]:
        """Curriculum (top quantile of reward - p_instr), then transitions whose advantage passes the filter."""
        chosen = self.curriculum(train)
        per_trajectory = [transitions_of(t, self.d.gamma) for t in chosen]
        flat = [tr for transitions in per_trajectory for tr in transitions]
        # one batched critic pass over every chosen transition, then the advantages per trajectory
        values = iter(self.state_values(flat, next_state=False))
        next_values = iter(self.state_values(flat, next_state=True))
        samples, advantages = [], []
        for traj, transitions in zip(chosen, per_trajectory):
            v = [next(values) for _ in transitions]
            v_next = [next(next_values) for _ in transitions]
            rewards = [tr.reward for tr in transitions]
            if self.d.advantage == "digirl_compat":
                returns = [tr.ret for tr in transitions]
                adv = digirl_compat(rewards, returns, v, v_next, self.d.advantage_threshold)
            else:
                adv = doubly_robust(rewards, v, v_next, self.d.lam)
            keep = keep_mask(adv, self.d.advantage, self.d.advantage_threshold)
            imitable = set(imitable_steps(traj))
            advantages.extend(adv)
            samples += [ActorSample.of(tr.step) for tr, k in zip(transitions, keep) if k and tr.index in imitable]
        return samples, {
            "digirl/curriculum_trajectories": len(chosen),
            "digirl/actor_transitions": len(samples),
            "digirl/mean_advantage": float(np.mean(advantages)) if advantages else None,
        }

    def _train_actor(self, train, validation, steps: int) -> dict:
        samples, metrics = self.actor_samples(train)
        return metrics | self.actor.run(samples, steps)

    # ------------------------------------------------------------------ shared

    def _module_steps(self, name: str, items: list, steps: int, loss_fn) -> dict:
        return train_steps(self.optimizers[name], items, loss_fn, steps, self.cfg, self.rng)

    def state_dict(self) -> dict:
        return {
            "instruction_critic": self.instruction_critic.state_dict(),
            "step_critic": self.step_critic.trained_state(),
            "optimizers": {name: opt.state_dict() for name, opt in self.optimizers.items()},
            "actor": self.actor.state_dict(),
            "rng": self.rng.getstate(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.instruction_critic.load_state_dict(state["instruction_critic"])
        self.step_critic.load_trained_state(state["step_critic"])
        for name, opt in self.optimizers.items():
            opt.load_state_dict(state["optimizers"][name])
        self.actor.load_state_dict(state["actor"])
        self.rng.setstate(state["rng"])
