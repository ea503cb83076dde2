"""What Digi-Q's critic reads of a dataset step (docs/algorithms/digiq.md):

state  = [text(goal), text(previous action), f(s_{t-1}), f(s_t)]
action = [text(candidate), z(s, a)]

The text and image encoders are frozen, so each state's row is computed once and kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from rlsys.config import DigiQConfig
from rlsys.core.types import Trajectory
from rlsys.learners.digiq.representations import Z_KEY
from rlsys.learners.text_encoder import TextEncoder
from rlsys.policies.image_features import PooledImageFeatures

BATCH = 256  # steps encoded, and scored by the critic, at a time


@dataclass
class StepRef:
    """One step of a trajectory, as the critic and the actor read it."""

    traj: Trajectory
    index: int

    @property
    def key(self) -> tuple[str, int]:
        return self.traj.id, self.index

    @property
    def step(self):
        return self.traj.steps[self.index]

    @property
    def candidates(self) -> list[str]:
        return self.step.info["digiq"]["candidates"]

    def z(self, k: int) -> np.ndarray:
        return self.step.observation.features[Z_KEY][k]

    def bootstraps(self) -> bool:
        """Whether the target looks past this step: not done, and s' was recorded."""
        return not self.step.done and self.traj.next_observation(self.index) is not None


def step_refs(trajectories: list[Trajectory]) -> list[StepRef]:
    return [StepRef(t, i) for t in trajectories for i in range(len(t.steps))]


class CachedTextEncoder:
    """A frozen TextEncoder with one vector per distinct text, computed on first use."""

    def __init__(self, encoder: TextEncoder, batch: int = 64):
        self.encoder = encoder.requires_grad_(False).eval()
        self.batch = batch
        self._vectors: dict[str, torch.Tensor] = {}

    @property
    def dim(self) -> int:
        return self.encoder.hidden_size

    @torch.no_grad()
    def __call__(self, texts: Sequence[str]) -> torch.Tensor:
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        for i in range(0, len(missing), self.batch):
            chunk = missing[i : i + self.batch]
            for text, row in zip(chunk, self.encoder(chunk).float()):
                self._vectors[text] = row
        return torch.stack([self._vectors[t] for t in texts])


class CriticInputs:
    """The critic's state and action vectors, from `learner.digiq`'s frozen encoders."""

    def __init__(self, d: DigiQConfig, device: str = "cpu"):
        self.device = device
        self.texts = CachedTextEncoder(TextEncoder(d.text_encoder_path, d.text_hidden, d.max_text_tokens).to(device))
        self.images = PooledImageFeatures(d.vision_path, d.image_feature_dim, d.image_size, device)
        self._states: dict[tuple[str, int, bool], torch.Tensor] = {}

    @property
    def text_dim(self) -> int:
        return self.texts.dim

    def states(self, refs: list[StepRef], next_state: bool = False) -> torch.Tensor:
        """[goal, previous action, f(s_{t-1}), f(s_t)] of each step (of s' when `next_state`)."""
        missing = [r for r in refs if (*r.key, next_state) not in self._states]
        for i in range(0, len(missing), BATCH):
            chunk = missing[i : i + BATCH]
            goals, previous, before, after = [], [], [], []
            for r in chunk:
                steps, t = r.traj.steps, r.index
                current = steps[t].observation
                goals.append(r.traj.task.instruction)
                if next_state:
                    previous.append(steps[t].action_text)
                    before.append(current)
                    after.append(r.traj.next_observation(t) or current)
                else:
                    previous.append(steps[t - 1].action_text if t else "")
                    before.append(steps[t - 1].observation if t else current)
                    after.append(current)
            rows = torch.cat([self.texts(goals), self.texts(previous), self.images(before), self.images(after)], dim=-1)
            for r, row in zip(chunk, rows.to(self.device)):
                self._states[(*r.key, next_state)] = row
        return torch.stack([self._states[(*r.key, next_state)] for r in refs])

    def actions(self, pairs: list[tuple[StepRef, int]]) -> torch.Tensor:
        """[text(candidate), z(s, candidate)] for (step, candidate index) pairs."""
        text = self.texts([ref.candidates[k] for ref, k in pairs]).to(self.device)
        z = torch.from_numpy(np.stack([ref.z(k) for ref, k in pairs]).astype(np.float32)).to(self.device)
        return torch.cat([text, z], dim=-1)
