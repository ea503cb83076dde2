"""Digi-Q's critic (docs/algorithms/digiq.md): two Q heads on (state, action), two V heads on the state, and a
target copy of all four, initialised equal to the online heads and moved by Polyak averaging. What the heads read
of a step is `rlsys.learners.digiq.inputs`'s.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from rlsys.config import DigiQConfig

HEADS = ("q1", "q2", "v1", "v2")


def mlp_head(inputs: int, width: int, dropout: float) -> nn.Sequential:
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


class DigiQCritic(nn.Module):
    def __init__(self, cfg: DigiQConfig, text_dim: int, z_dim: int):
        super().__init__()
        self.text_dim, self.z_dim = text_dim, z_dim
        self.state_dim = 2 * text_dim + 2 * cfg.image_feature_dim
        self.action_dim = text_dim + z_dim
        width, p = cfg.critic_hidden, cfg.dropout
        self.online = nn.ModuleDict(
            {
                "q1": mlp_head(self.state_dim + self.action_dim, width, p),
                "q2": mlp_head(self.state_dim + self.action_dim, width, p),
                "v1": mlp_head(self.state_dim, width, p),
                "v2": mlp_head(self.state_dim, width, p),
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
