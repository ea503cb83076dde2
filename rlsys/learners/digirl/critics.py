"""DigiRL's two value networks (docs/algorithms/digirl.md#networks), both success classifiers with 2 logits.

- Instruction critic V(c): a text encoder (RoBERTa-base, fine-tuned) on the task text -> Linear(H, 2).
- Step critic V(s): a frozen text encoder's pooled output on the observation text, concatenated with
  two stacked screenshot features [f_{t-1}, f_t] -> two independent MLP heads (H + 2F -> W -> W -> 2).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from rlsys.config import DigiRLConfig
from rlsys.core.types import Observation
from rlsys.learners.text_encoder import TextEncoder
from rlsys.policies.prompts import autoui_prompt


class InstructionCritic(nn.Module):
    def __init__(self, cfg: DigiRLConfig):
        super().__init__()
        self.encoder = TextEncoder(cfg.text_encoder_path, cfg.text_hidden, cfg.max_text_tokens)
        self.head = nn.Linear(self.encoder.hidden_size, 2)

    def forward(self, instructions: Sequence[str]) -> torch.Tensor:
        return self.head(self.encoder(instructions))


def _mlp(inputs: int, width: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 2))


class StepCritic(nn.Module):
    def __init__(self, cfg: DigiRLConfig):
        super().__init__()
        self.encoder = TextEncoder(cfg.text_encoder_path, cfg.text_hidden, cfg.max_text_tokens)
        self.frozen_encoder = cfg.freeze_step_encoder
        if self.frozen_encoder:
            self.encoder.requires_grad_(False)
        width = cfg.critic_hidden or self.encoder.hidden_size
        inputs = self.encoder.hidden_size + 2 * cfg.image_feature_dim
        self.head1 = _mlp(inputs, width)
        self.head2 = _mlp(inputs, width)

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """Pooled text vectors; a frozen encoder's carry no gradient (and stay the same for an observation)."""
        if not self.frozen_encoder:
            return self.encoder(texts)
        self.encoder.eval()  # no dropout in a network that is not trained
        with torch.no_grad():
            return self.encoder(texts)

    def forward(self, text: torch.Tensor, stacked_images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both heads on [encode(text), f_{t-1}, f_t]."""
        x = torch.cat([text, stacked_images.to(text.dtype)], dim=-1)
        return self.head1(x), self.head2(x)

    def trained_state(self) -> dict:
        """What a checkpoint needs: everything but a frozen encoder (rebuilt from its path or seed)."""
        return {k: v for k, v in self.state_dict().items() if not (self.frozen_encoder and k.startswith("encoder."))}

    def load_trained_state(self, state: dict) -> None:
        missing, unexpected = self.load_state_dict(state, strict=False)
        if unexpected or any(not (self.frozen_encoder and k.startswith("encoder.")) for k in missing):
            raise ValueError(f"step critic checkpoint does not match: missing {missing}, unexpected {unexpected}")


def critic_text(obs: Observation) -> str:
    """The observation as text: DigiRL's prompt (kept by imports) or the AutoUI prompt plus the UI text."""
    if "prompt" in obs.extras:
        return obs.extras["prompt"]
    return f"{autoui_prompt(obs)} {obs.ui_text}".strip()
