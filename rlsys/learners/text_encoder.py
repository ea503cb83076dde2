"""Pooled sentence vectors for the critics of DigiRL and Digi-Q: a Hugging Face encoder or, for tests
and quick starts, a tiny byte-level RoBERTa built offline."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer, RobertaConfig, RobertaModel

from rlsys.policies.hub import model_folder

TEXT_ENCODER_SEED = 1


class TextEncoder(nn.Module):
    """Pooled sentence vectors from a Hugging Face encoder (`path`: a folder or Hub id) or a tiny byte-level
    RoBERTa."""

    def __init__(self, path: str | None, hidden: int, max_tokens: int, seed: int = TEXT_ENCODER_SEED):
        super().__init__()
        if path:
            folder = model_folder(path, "text_encoder_path")
            self.tokenizer = AutoTokenizer.from_pretrained(folder)
            self.model = AutoModel.from_pretrained(folder)
        else:
            from rlsys.policies.presets import byte_tokenizer

            self.tokenizer = byte_tokenizer("llava")
            config = RobertaConfig(
                vocab_size=len(self.tokenizer),
                hidden_size=hidden,
                intermediate_size=2 * hidden,
                num_hidden_layers=2,
                num_attention_heads=2,
                pad_token_id=self.tokenizer.pad_token_id,
                max_position_embeddings=max_tokens + self.tokenizer.pad_token_id + 2,
            )
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                self.model = RobertaModel(config, add_pooling_layer=False)  # mean-pooled: see forward
        self.max_tokens = max_tokens
        self.hidden_size = self.model.config.hidden_size

    def forward(self, texts: Sequence[str]) -> torch.Tensor:
        device = next(self.model.parameters()).device
        batch = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_tokens, return_tensors="pt"
        ).to(device)
        if batch.input_ids.shape[1] == 0:  # only empty texts, which the byte tokenizer gives no token
            return torch.zeros(len(texts), self.hidden_size, device=device)
        out = self.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        if getattr(out, "pooler_output", None) is not None:
            return out.pooler_output
        mask = batch.attention_mask.unsqueeze(-1).to(out.last_hidden_state.dtype)
        return (out.last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1)  # an empty text: zeros
