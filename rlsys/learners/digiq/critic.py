"""Digi-Q's critic (docs/algorithms/digiq.md): two Q heads on (state, action), two V heads on the state, and a
target copy of all four, initialised equal to the online heads and moved by Polyak averaging.

state  = [text(goal), text(previous action), f(s_{t-1}), f(s_t)]
action = [text(candidate), z(s, a)]

The text encoder is frozen, so its vectors are computed once per distinct string and kept.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from rlsys.config import DigiQConfig
from rlsys.learners.text_encoder import TextEncoder

HEADS = ("q1", "q2", "v1", "v2")


def _head(inputs: int, width: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(
        nn.LayerNorm(inputs),  # z(s, a) from a 7B VLM is far larger in scale than the other parts
        nn.Linear(inputs, width),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(width, 1),
    )


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


class DigiQCritic(nn.Module):
    def __init__(self, cfg: DigiQConfig, text_dim: int, z_dim: int):
        super().__init__()
        self.text_dim, self.z_dim = text_dim, z_dim
        self.state_dim = 2 * text_dim + 2 * cfg.image_feature_dim
        self.action_dim = text_dim + z_dim
        width, p = cfg.critic_hidden, cfg.dropout
        self.online = nn.ModuleDict(
            {
                "q1": _head(self.state_dim + self.action_dim, width, p),
                "q2": _head(self.state_dim + self.action_dim, width, p),
                "v1": _head(self.state_dim, width, p),
                "v2": _head(self.state_dim, width, p),
            }
        )
        self.target = copy.deepcopy(self.online).requires_grad_(False).eval()

    def q(self, state: torch.Tensor, action: torch.Tensor, target: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        heads = self.target if target else self.online
        x = torch.cat([state, action], dim=-1)
        return heads["q1"](x).squeeze(-1), heads["q2"](x).squeeze(-1)

    def v(self, state: torch.Tensor, target: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        heads = self.target if target else self.online
        return heads["v1"](state).squeeze(-1), heads["v2"](state).squeeze(-1)

    @torch.no_grad()
    def polyak(self, tau: float) -> None:
        """target <- (1 - tau) target + tau online, parameter by parameter."""
        for t, o in zip(self.target.parameters(), self.online.parameters()):
            t.lerp_(o, tau)
        for t, o in zip(self.target.buffers(), self.online.buffers()):
            t.copy_(o)

    def train(self, mode: bool = True) -> DigiQCritic:
        super().train(mode)
        self.target.eval()  # targets never drop units
        return self


def aggregate(pair: tuple[torch.Tensor, torch.Tensor], how: str) -> torch.Tensor:
    return torch.minimum(*pair) if how == "min" else torch.maximum(*pair)
