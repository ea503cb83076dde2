"""Digi-Q (docs/algorithms/digiq.md): offline value-based RL on frozen VLM representations.

Phase 1 trains the critic to completion on the dataset's own actions (SARSA-style, in-sample):
    Q_j(s, a) -> r + gamma (1 - d) V̄_j(s'),    V_j(s) -> Q̄_j(s, a_data),    j = 1, 2
with V̄, Q̄ the target heads, Polyak-averaged after every critic step. Phase 2 freezes it and trains
the actor by Best-of-N: for each drawn state, N of its stored candidates are drawn afresh, scored with
A = Q - V (heads aggregated by min or max), and the best is imitated when its clipped advantage
exceeds the threshold.

Each step of the dataset carries `info["digiq"]["candidates"]` (index 0 the dataset action) and
`observation.features[Z_KEY]`, one representation row per candidate (`rlsys-digiq`).
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path

import numpy as np
import safetensors.torch
import torch
import torch.nn.functional as F

from rlsys.config import LearnerConfig
from rlsys.core.types import Trajectory
from rlsys.learners.digiq import schedule
from rlsys.learners.digiq.critic import DigiQCritic, aggregate
from rlsys.learners.digiq.inputs import BATCH as SCORE_BATCH
from rlsys.learners.digiq.inputs import CriticInputs, StepRef, step_refs
from rlsys.learners.digiq.representations import RepresentationMismatch, check_representations, expected_model_id
from rlsys.learners.imitation import ActorSample, ActorUpdate
from rlsys.learners.optim import ModuleOptimizer, train_steps
from rlsys.learners.selection import is_validation, policy_lag

CRITIC_FILES = ("critic.safetensors", "critic.json")


class DigiQ:
    def __init__(self, cfg: LearnerConfig, policy, seed: int = 0, device: str = "cpu", correct_off_policy=False):
        self.cfg = cfg
        self.d = d = cfg.digiq
        self.device = device
        self.seed = seed
        self.inputs = CriticInputs(d, device)
        self.expected_model = expected_model_id(d.representation.model)
        self.critic: DigiQCritic | None = None  # built once the dataset's representation width is known
        self.critic_optimizer: ModuleOptimizer | None = None
        self.record: dict | None = None  # the dataset's representation record
        self.actor = ActorUpdate(cfg, policy, "sequence_mean", correct_off_policy, seed)
        self.rng = random.Random(seed)
        self._choices: Counter = Counter()  # what Best-of-N chose in this actor phase
        self._states: dict[tuple[str, int, bool], torch.Tensor] = {}
        if d.critic_path:
            self.load_critic(Path(d.critic_path))

    # ------------------------------------------------------------------ schedule

    @property
    def critic_iterations(self) -> int:
        return schedule.critic_iterations(self.d)

    def stage(self, offline_iteration: int | None) -> str:
        if offline_iteration is None:
            raise ValueError("Digi-Q is offline only: run.training must be 'offline'")
        return "critic" if offline_iteration < self.critic_iterations else "actor"

    def update(self, trajectories: list[Trajectory], offline_iteration: int | None = None) -> dict:
        usable = [t for t in trajectories if t.trainable and t.steps]
        if not usable:
            return {"digiq/train_trajectories": 0}
        self._build(usable)
        train, validation = [], []
        for t in usable:
            (validation if is_validation(t, self.d.validation_fraction) else train).append(t)
        stage = self.stage(offline_iteration)
        metrics = {"digiq/stage": stage, "digiq/train_trajectories": len(train)}
        if stage == "critic":
            return metrics | self._train_critic(train, validation)
        return metrics | self._train_actor(train)

    def _build(self, trajectories: list[Trajectory]) -> None:
        z_dim = check_representations(trajectories, self.expected_model, self.d.representation.method)
        if self.critic is not None:
            if self.critic.z_dim != z_dim:
                raise RepresentationMismatch(
                    f"the dataset's representations have {z_dim} values, the critic was built for {self.critic.z_dim}"
                )
            return
        self.record = trajectories[0].steps[0].info["digiq"]["representation"]
        self._new_critic(z_dim)

    def _new_critic(self, z_dim: int) -> None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.critic = DigiQCritic(self.d, self.inputs.text_dim, z_dim).to(self.device)
        self.critic_optimizer = ModuleOptimizer(
            "critic", self.critic.online.parameters(), self.d.critic_lr, self.cfg.grad_clip
        )

    # ------------------------------------------------------------------ critic

    def critic_loss(self, batch: list[StepRef]) -> torch.Tensor:
        """Sum over heads j of MSE(Q_j(s, a_data), r + gamma (1 - d) V̄_j(s')) + MSE(V_j(s), Q̄_j(s, a_data))."""
        critic, gamma = self.critic, self.d.gamma
        s, s_next = self.inputs.states(batch), self.inputs.states(batch, next_state=True)
        a = self.inputs.actions([(r, 0) for r in batch])
        rewards = torch.tensor([r.step.reward for r in batch], device=self.device, dtype=torch.float32)
        live = torch.tensor([r.bootstraps() for r in batch], device=self.device, dtype=torch.float32)
        with torch.no_grad():
            v_next = critic.v(s_next, target=True)
            q_data = critic.q(s, a, target=True)
        q, v = critic.q(s, a), critic.v(s)
        return sum(F.mse_loss(q[j], rewards + gamma * live * v_next[j]) + F.mse_loss(v[j], q_data[j]) for j in range(2))

    def _train_critic(self, train: list[Trajectory], validation: list[Trajectory]) -> dict:
        refs = step_refs(train)
        if not refs:
            return {}
        self.critic.train()
        out = train_steps(
            self.critic_optimizer,
            refs,
            self.critic_loss,
            self.d.critic_steps,
            self.cfg,
            self.rng,
            after_step=lambda: self.critic.polyak(self.d.tau),
        )
        held_out = step_refs(validation)[:SCORE_BATCH]
        if held_out:
            self.critic.eval()
            with torch.no_grad():
                out["critic/validation_loss"] = float(self.critic_loss(held_out))
        return out | policy_lag(train, self.actor.trained_version)

    @torch.no_grad()
    def score(self, refs: list[StepRef]) -> list[tuple[np.ndarray, float]]:
        """(Q of every candidate, V) per step, heads aggregated, with dropout off."""
        self.critic.eval()
        pairs = [(r, k) for r in refs for k in range(len(r.candidates))]
        q_all = []
        for i in range(0, len(pairs), SCORE_BATCH):
            chunk = pairs[i : i + SCORE_BATCH]
            s = self.inputs.states([r for r, _ in chunk])
            q_all.append(aggregate(self.critic.q(s, self.inputs.actions(chunk)), self.d.aggregate))
        q_flat = torch.cat(q_all).cpu().numpy() if q_all else np.zeros(0)
        values = []
        for i in range(0, len(refs), SCORE_BATCH):
            values.append(aggregate(self.critic.v(self.inputs.states(refs[i : i + SCORE_BATCH])), self.d.aggregate))
        v = torch.cat(values).cpu().numpy() if values else np.zeros(0)
        out, start = [], 0
        for r, value in zip(refs, v):
            k = len(r.candidates)
            out.append((q_flat[start : start + k], float(value)))
            start += k
        return out

    def annotations(self, trajectories: list[Trajectory]) -> dict[str, list[dict]]:
        """Per step of each trajectory: Q, V and advantage of every candidate, and the best candidate."""
        trajectories = [t for t in trajectories if t.steps]
        self._build(trajectories)
        refs = step_refs(trajectories)
        out: dict[str, list[dict]] = {}
        for ref, (q, v) in zip(refs, self.score(refs)):
            adv = q - v
            out.setdefault(ref.traj.id, []).append(
                {"q": q.tolist(), "v": v, "advantage": adv.tolist(), "best": int(np.argmax(adv))}
            )
        return out

    # ------------------------------------------------------------------ actor

    def weight(self, best_advantage: float) -> float:
        if self.d.weighting == "pg":
            return best_advantage * self.d.pg_scale
        if self.d.weighting == "awr":
            return math.exp(best_advantage / self.d.awr_beta)
        return 1.0

    def best_of_n(self, batch: list[tuple[StepRef, np.ndarray, float]]) -> list[ActorSample]:
        """For each state, N candidates drawn afresh; the best by Q - V is imitated when its advantage,
        clipped to [0, 1], exceeds the threshold."""
        chosen = []
        for ref, q, v in batch:
            drawn = self.rng.sample(range(len(q)), min(self.d.best_of_n, len(q)))
            advantages = q[drawn] - v
            best = int(np.argmax(advantages))
            a_star = float(np.clip(advantages[best], 0.0, 1.0))
            self._choices["drawn"] += 1
            if a_star > self.d.advantage_threshold:
                k = drawn[best]
                self._choices["kept"] += 1
                self._choices["kept_dataset_action"] += k == 0
                self._choices["advantage_sum"] += a_star
                chosen.append(ActorSample(ref.step.observation, ref.candidates[k], None, self.weight(a_star)))
        return chosen

    def _train_actor(self, train: list[Trajectory]) -> dict:
        refs = step_refs(train)
        scored = [(r, q, v) for r, (q, v) in zip(refs, self.score(refs))]
        # a state none of whose candidates clears the threshold can never be chosen: leave it out of the batches
        promising = [(r, q, v) for r, q, v in scored if np.clip(q - v, 0, 1).max() > self.d.advantage_threshold]
        self._choices.clear()
        metrics = self.actor.run(promising, self.d.actor_steps if promising else 0, choose=self.best_of_n)
        c = self._choices
        states_of = {r.traj.id: r.traj for r, _, _ in promising}
        metrics |= policy_lag(list(states_of.values()), self.actor.trained_version)
        return metrics | {
            "digiq/actor_states": len(refs),
            "digiq/promising_states": len(promising),
            "digiq/kept_fraction": c["kept"] / c["drawn"] if c["drawn"] else None,
            "digiq/best_is_dataset_action": c["kept_dataset_action"] / c["kept"] if c["kept"] else None,
            "digiq/best_advantage": c["advantage_sum"] / c["kept"] if c["kept"] else None,
        }

    # ------------------------------------------------------------------ the critic stage

    def critic_files(self) -> dict[str, bytes]:
        """The finished critic as files (`learner.digiq.critic_path` reads them back)."""
        meta = {"z_dim": self.critic.z_dim, "text_dim": self.critic.text_dim, "representation": self.record}
        return {
            "critic.safetensors": safetensors.torch.save(
                {k: v.contiguous().cpu() for k, v in self.critic.state_dict().items()}
            ),
            "critic.json": json.dumps(meta, indent=2).encode(),
        }

    def load_critic(self, folder: Path) -> None:
        missing = [name for name in CRITIC_FILES if not (folder / name).is_file()]
        if missing:
            raise FileNotFoundError(f"learner.digiq.critic_path {folder}: no {', '.join(missing)} (a run's critic/)")
        meta = json.loads((folder / "critic.json").read_text())
        record = meta["representation"]
        wanted = (self.expected_model, self.d.representation.method)
        if (record["model"], record["method"]) != wanted:
            raise RepresentationMismatch(
                f"learner.digiq.critic_path {folder} was trained on representations from {record['model']} "
                f"({record['method']}); learner.digiq.representation asks for {wanted[0]} ({wanted[1]})"
            )
        self.record = record
        self._new_critic(meta["z_dim"])
        self.critic.load_state_dict(safetensors.torch.load((folder / "critic.safetensors").read_bytes()))

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        critic = None
        if self.critic is not None:
            critic = {
                "z_dim": self.critic.z_dim,
                "record": self.record,
                "weights": self.critic.state_dict(),
                "optimizer": self.critic_optimizer.state_dict(),
            }
        return {"critic": critic, "actor": self.actor.state_dict(), "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        if state["critic"] is not None:
            self.record = state["critic"]["record"]
            self._new_critic(state["critic"]["z_dim"])
            self.critic.load_state_dict(state["critic"]["weights"])
            self.critic_optimizer.load_state_dict(state["critic"]["optimizer"])
        self.actor.load_state_dict(state["actor"])
        self.rng.setstate(state["rng"])
