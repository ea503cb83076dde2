"""DigiRL (docs/algorithms/digirl.md#update): an instruction critic, a step critic and an advantage-filtered actor.

An online iteration trains the instruction critic, then the step critic, then the actor, each with its
own optimizer and its own gradient clip. The offline phase runs the same three stages one after
another, `offline_*_iterations` iterations each. Trajectories are split train / validation by id
(stable across iterations and resumes); critics train on the train part and report on the other.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from rlsys.config import LearnerConfig
from rlsys.core.returns import discounted_returns, success_labels
from rlsys.core.types import Observation, Trajectory
from rlsys.data.history import Summaries
from rlsys.learners.digirl.advantages import curriculum_scores, digirl_compat, doubly_robust, keep_mask, top_quantile
from rlsys.learners.digirl.critics import InstructionCritic, StepCritic, critic_text
from rlsys.learners.history import History
from rlsys.learners.imitation import ActorSample, ActorUpdate
from rlsys.learners.losses import constant_ce, ranking_auc, success_probability, two_class_ce
from rlsys.learners.optim import ModuleOptimizer, train_steps
from rlsys.learners.selection import failed, imitable_steps, is_validation, policy_lag, versions_lag
from rlsys.policies.image_features import FEATURE_KEY, PooledImageFeatures

STAGES = ("instruction_critic", "step_critic", "actor")
TEXT_KEY = "digirl_step_text"  # the frozen step encoder's vector of an observation's text
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


def states_of(transitions: list[Transition], next_state: bool) -> list[tuple[Observation, Observation]]:
    """Each transition's s as the step critic reads it, (s_{t-1}, s_t), or its s', (s_t, s_{t+1})."""
    triples = [tr.observations() for tr in transitions]
    return [(cur, nxt) if next_state else (prev, cur) for prev, cur, nxt in triples]


def _observations(traj: Trajectory) -> list[Observation]:
    return [s.observation for s in traj.steps] + [traj.final_observation] * bool(traj.final_observation)


@dataclass
class Ranked:
    """What the instruction critic and the curriculum rank: the run's history, or the sample in hand."""

    rows: Summaries
    fetch: Callable[[list[str]], list[Trajectory]]  # the trajectories of these ids, whole

    @classmethod
    def of(cls, history: History | None, sample: list[Trajectory]) -> Ranked:
        if history is None:
            by_id = {t.id: t for t in sample}
            return cls(Summaries.of(sample), lambda ids: [by_id[i] for i in ids])
        return cls(history.summaries(), history.fetch)

    def rows_of(self, validation_fraction: float, validation: bool) -> Summaries:
        """The validation share of the rows (by id, as for the sample), or the rest."""
        ids = self.rows.ids
        return self.rows.take([i for i in range(len(ids)) if is_validation(ids[i], validation_fraction) == validation])


class DigiRL:
    def __init__(self, cfg: LearnerConfig, policy, seed: int = 0, device: str = "cpu", correct_off_policy=False):
        self.cfg = cfg
        self.d = d = cfg.digirl
        self.ranks_history = cfg.rank_history  # the learner then hands update() the run's history
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
        self.actor = ActorUpdate(cfg, policy, d.actor_reduction, correct_off_policy, seed)
        self.rng = random.Random(seed)
        self._features: OrderedDict[tuple[str, int], dict[str, np.ndarray]] = OrderedDict()
        cached_floats = d.image_feature_dim + self.step_critic.encoder.hidden_size * d.freeze_step_encoder
        self._max_features = d.feature_cache_mb * 2**20 // (4 * cached_floats)

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

    def update(
        self, trajectories: list[Trajectory], offline_iteration: int | None = None, history: History | None = None
    ) -> dict:
        """`trajectories`: the replay sample (the step critic's transitions); `history`: every trajectory of the
        run, which the instruction critic and the curriculum rank (without it, they rank the sample). The policy
        lag reported is of what the iteration's last stage trained on: the actor's data in an online iteration."""
        usable = [t for t in trajectories if t.trainable and t.steps]
        train, validation = [], []
        for t in usable:
            (validation if is_validation(t, self.d.validation_fraction) else train).append(t)
        ranked = Ranked.of(history, usable)
        self._attach_features(usable)
        metrics = {"digirl/train_trajectories": len(train), "digirl/validation_trajectories": len(validation)}
        for stage, steps in self.stages(offline_iteration):
            metrics["digirl/stage"] = stage
            metrics |= getattr(self, f"_train_{stage}")(train, validation, ranked, steps)
        return metrics

    # ------------------------------------------------------------------ instruction critic

    def task_values(self, instructions: list[str]) -> np.ndarray:
        """p_instr(task) = P(success | instruction) for each text, no gradient."""
        self.instruction_critic.eval()
        with torch.no_grad():
            chunks = [
                success_probability(self.instruction_critic(instructions[i : i + SCORE_BATCH]))
                for i in range(0, len(instructions), SCORE_BATCH)
            ]
        return torch.cat(chunks).cpu().numpy() if chunks else np.zeros(0)

    def instruction_values(self, trajectories: list[Trajectory]) -> np.ndarray:
        return self.task_values([t.task.instruction for t in trajectories])

    def _instruction_loss(self, batch: list[tuple[str, int]]) -> torch.Tensor:
        texts, labels = zip(*batch)
        return two_class_ce(self.instruction_critic(list(texts)), torch.tensor(labels, device=self.device))

    def _train_instruction_critic(self, train, validation, ranked: Ranked, steps: int) -> dict:
        """On every ranked trajectory's (task text, success), the validation share held out."""
        fit_rows = ranked.rows_of(self.d.validation_fraction, validation=False)
        fit = fit_rows.successes()
        if not fit:
            return {}
        self.instruction_critic.train()
        out = self._module_steps("instruction_critic", fit, steps, self._instruction_loss)
        check = ranked.rows_of(self.d.validation_fraction, validation=True).successes()
        if check:
            self.instruction_critic.eval()
            with torch.no_grad():
                out["instruction_critic/validation_loss"] = float(self._instruction_loss(check[:256]))
            labels = [y for _, y in check[:256]]
            out["instruction_critic/validation_loss_constant"] = constant_ce([y for _, y in fit], labels)
            auc = ranking_auc(self.task_values([text for text, _ in check[:256]]), labels)
            out |= {"instruction_critic/validation_auc": auc} if auc is not None else {}
        lag = versions_lag(fit_rows.versions, self.actor.trained_version)
        return out | lag | {"instruction_critic/trajectories": len(fit)}

    # ------------------------------------------------------------------ step critic

    def _attach_features(self, trajectories: list[Trajectory]) -> None:
        """Screenshot features and, with the step encoder frozen, text vectors of every observation, computed once
        per (trajectory, step) while the cache holds them (`feature_cache_mb`, least recently used out first)."""
        seen = [((t.id, i), obs) for t in trajectories for i, obs in enumerate(_observations(t))]
        for key, obs in seen:
            for name, vector in self._features.get(key, {}).items():
                obs.features.setdefault(name, vector)
        observations = [obs for _, obs in seen]
        for i in range(0, len(observations), SCORE_BATCH):
            self.images(observations[i : i + SCORE_BATCH])
            if self.step_critic.frozen_encoder:
                self._text_vectors(observations[i : i + SCORE_BATCH])
        for key, obs in seen:
            self._features[key] = {name: obs.features[name] for name in (FEATURE_KEY, TEXT_KEY) if name in obs.features}
            self._features.move_to_end(key)
        while len(self._features) > self._max_features:
            self._features.popitem(last=False)

    def _text_vectors(self, observations: list[Observation]) -> torch.Tensor:
        """The step critic's text input; a frozen encoder's vectors are computed once and kept on the observation."""
        if not self.step_critic.frozen_encoder:
            return self.step_critic.encode([critic_text(o) for o in observations])
        missing = [o for o in observations if TEXT_KEY not in o.features]
        if missing:
            vectors = self.step_critic.encode([critic_text(o) for o in missing]).float().cpu().numpy()
            for obs, vector in zip(missing, vectors):
                obs.features[TEXT_KEY] = vector
        return torch.from_numpy(np.stack([o.features[TEXT_KEY] for o in observations])).to(self.device)

    def _stacked(self, pairs: list[tuple[Observation, Observation]]) -> torch.Tensor:
        first = self.images([a for a, _ in pairs])
        second = self.images([b for _, b in pairs])
        return torch.cat([first, second], dim=-1)

    def _state_logits(self, states: list[tuple[Observation, Observation]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The step critic's two heads on states (previous, current): the current text, both screenshots."""
        return self.step_critic(self._text_vectors([cur for _, cur in states]), self._stacked(states))

    def step_logits(self, transitions: list[Transition], next_state: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return self._state_logits(states_of(transitions, next_state))

    def _step_loss(self, batch: list[Transition]) -> torch.Tensor:
        """CE(V1(s), y) + CE(V2(s), y) + CE(V1(s'), y) + CE(V2(s'), y), y = 1[G_t > 0]."""
        labels = torch.tensor([tr.label for tr in batch], device=self.device)
        return sum(two_class_ce(logits, labels) for nxt in (False, True) for logits in self.step_logits(batch, nxt))

    def _state_values(self, states: list[tuple[Observation, Observation]]) -> np.ndarray:
        """p(s) = min over the two heads of P(success), no gradient."""
        self.step_critic.eval()
        with torch.no_grad():
            chunks = []
            for i in range(0, len(states), SCORE_BATCH):
                l1, l2 = self._state_logits(states[i : i + SCORE_BATCH])
                chunks.append(torch.minimum(success_probability(l1), success_probability(l2)))
        return torch.cat(chunks).cpu().numpy() if chunks else np.zeros(0)

    def state_values(self, transitions: list[Transition], next_state: bool) -> np.ndarray:
        return self._state_values(states_of(transitions, next_state))

    def trajectory_values(self, per_trajectory: list[list[Transition]]) -> list[np.ndarray]:
        """p(s_0) .. p(s_T) of each trajectory from one critic pass over its T + 1 distinct states: s' of step
        t is s of step t + 1 (the same two screenshots, the same text), so only the last step's s' is extra."""
        states = []
        for transitions in per_trajectory:
            triples = [tr.observations() for tr in transitions]
            states += [(prev, cur) for prev, cur, _ in triples] + [(triples[-1][1], triples[-1][2])] * bool(triples)
        values = self._state_values(states)
        bounds = np.cumsum([len(t) + bool(t) for t in per_trajectory])[:-1]
        return np.split(values, bounds) if per_trajectory else []

    def _train_step_critic(self, train, validation, ranked: Ranked, steps: int) -> dict:
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
            # the loss sums four cross-entropies (two heads, s and s'), and so does the constant predictor's
            labels_fit, labels_held = [tr.label for tr in transitions], [tr.label for tr in held_out]
            out["step_critic/validation_loss_constant"] = 4 * constant_ce(labels_fit, labels_held)
            values = self.state_values(held_out, next_state=False)
            out["step_critic/validation_accuracy"] = float(np.mean((values > 0.5) == np.array(labels_held)))
            auc = ranking_auc(values, labels_held)
            out |= {"step_critic/validation_auc": auc} if auc is not None else {}
        return out | policy_lag(train, self.actor.trained_version)

    # ------------------------------------------------------------------ actor

    def curriculum(self, rows: Summaries) -> tuple[np.ndarray, dict]:
        """Rows whose reward - p_instr(task) is at or above the `curriculum_quantile` of those scores, and per
        task group how many were kept and the critic's mean p_instr (what the curriculum is doing)."""
        if not len(rows):
            return np.zeros(0, dtype=int), {}
        p_task = self.task_values(rows.instructions)
        scores = curriculum_scores(rows.rewards, p_task[rows.instruction_index])
        kept = np.flatnonzero(top_quantile(scores, self.d.curriculum_quantile))
        groups = np.array(rows.groups)
        metrics = {}
        for group in sorted(set(rows.groups)):
            in_group = groups == group
            metrics[f"digirl/curriculum_kept/{group}"] = int(in_group[rows.instruction_index[kept]].sum())
            metrics[f"digirl/p_instr/{group}"] = float(p_task[in_group].mean())
        return kept, metrics

    def actor_samples(self, chosen: list[Trajectory]) -> tuple[list[ActorSample], dict]:
        """Transitions of the curriculum's trajectories whose advantage passes the filter, the policy lag of the
        trajectories they come from, and how many come from failures (an outcome the actor never reads: with noisy
        rewards it says how much of a failure the filter let through)."""
        per_trajectory = [transitions_of(t, self.d.gamma) for t in chosen]
        samples, advantages, imitated, from_failures = [], [], [], 0
        for traj, transitions, values in zip(chosen, per_trajectory, self.trajectory_values(per_trajectory)):
            v, v_next = values[:-1], values[1:]
            rewards = [tr.reward for tr in transitions]
            if self.d.advantage == "digirl_compat":
                returns = [tr.ret for tr in transitions]
                adv = digirl_compat(rewards, returns, v, v_next, self.d.advantage_threshold)
            else:
                adv = doubly_robust(rewards, v, v_next, self.d.lam)
            keep = keep_mask(adv, self.d.advantage, self.d.advantage_threshold)
            imitable = set(imitable_steps(traj))
            advantages.extend(adv)
            kept = [ActorSample.of(tr.step) for tr, k in zip(transitions, keep) if k and tr.index in imitable]
            samples += kept
            imitated += [traj] * bool(kept)
            from_failures += len(kept) * failed(traj)
        return samples, policy_lag(imitated, self.actor.trained_version) | {
            "digirl/actor_transitions": len(samples),
            "digirl/actor_failure_transitions": from_failures,
            "digirl/mean_advantage": float(np.mean(advantages)) if advantages else None,
        }

    def _train_actor(self, train, validation, ranked: Ranked, steps: int) -> dict:
        """The curriculum over every ranked trajectory, the critics' validation share included (it is held out of
        critic training only); at most `learner.sample_trajectories` of those it keeps are drawn whole (from
        memory or the run folder) for the advantage filter."""
        kept, metrics = self.curriculum(ranked.rows)
        ids = [ranked.rows.ids[i] for i in kept]
        if len(ids) > self.cfg.sample_trajectories:
            ids = self.rng.sample(ids, self.cfg.sample_trajectories)
        chosen = ranked.fetch(ids)
        self._attach_features(chosen)
        samples, more = self.actor_samples(chosen)
        metrics |= {"digirl/curriculum_trajectories": len(kept), "digirl/actor_trajectories": len(chosen)}
        return metrics | more | self.actor.run(samples, steps)

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
