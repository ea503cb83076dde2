"""AutoUI (the DigiRL actor): a T5 encoder–decoder whose text encoding is fused with one image token.

The screenshot's pooled BLIP-2 ViT feature is projected to one token E; the text states H attend to
it (A = MHA(H, E, E)), and a gate mixes the two: H' = (1 - g)·H + g·A, g = sigmoid(W[H; A]). The
decoder cross-attends to H'. The released checkpoint is a T5ForConditionalGeneration state dict plus
top-level `image_dense`, `mha_layer` and `gate_dense`, which is exactly `AutoUIModel`'s.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from torch import nn
from transformers import (
    AutoTokenizer,
    ByT5Tokenizer,
    LogitsProcessorList,
    T5Config,
    T5ForConditionalGeneration,
)
from transformers.modeling_outputs import BaseModelOutput

from rlsys.config import PolicyConfig
from rlsys.core.types import ActionSample, Observation
from rlsys.policies.base import HFPolicy, torch_dtype
from rlsys.policies.grammar_decoding import GrammarLogitsProcessor
from rlsys.policies.hub import model_folder
from rlsys.policies.image_features import PooledImageFeatures
from rlsys.policies.prompts import autoui_prompt
from rlsys.policies.sampling import prompt_texts, samples_from, sampling_kwargs, scored_tokens
from rlsys.policies.tiny_t5 import byte_t5_config


class AutoUIModel(T5ForConditionalGeneration):
    def __init__(self, config: T5Config):
        super().__init__(config)
        config.image_feature_dim = getattr(config, "image_feature_dim", 1408)  # released configs lack it
        d = config.d_model
        self.image_dense = nn.Linear(config.image_feature_dim, d)
        self.mha_layer = nn.MultiheadAttention(embed_dim=d, num_heads=1, batch_first=True)
        self.gate_dense = nn.Linear(2 * d, d)
        self.post_init()

    def _init_weights(self, module):
        super()._init_weights(module)
        # T5's generic Linear std (initializer_factor = 1.0) is far too large for the fusion layers
        if any(module is getattr(self, name, None) for name in ("image_dense", "gate_dense")):
            nn.init.normal_(module.weight, std=self.config.initializer_factor * module.in_features**-0.5)
            nn.init.zeros_(module.bias)

    def encode(self, input_ids, attention_mask, image_features) -> BaseModelOutput:
        """The fused encoder states the decoder attends to."""
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        image = self.image_dense(image_features.to(hidden.dtype)).unsqueeze(1)  # [B, 1, d]
        attended, _ = self.mha_layer(hidden, image, image, need_weights=False)
        gate = torch.sigmoid(self.gate_dense(torch.cat([hidden, attended], dim=-1)))
        return BaseModelOutput(last_hidden_state=(1 - gate) * hidden + gate * attended)


class AutoUIPolicy(HFPolicy):
    def __init__(self, model: AutoUIModel, tokenizer, cfg: PolicyConfig, device: str = "cpu"):
        dtype = torch_dtype(cfg, device)
        self.model = model.to(device=device, dtype=dtype)
        if cfg.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.tokenizer = tokenizer
        self.tokenizer.truncation_side = "left"  # the goal comes last; drop the oldest text
        if cfg.image_feature_dim != model.image_dense.in_features:
            raise ValueError(
                f"policy.image_feature_dim ({cfg.image_feature_dim}) is not the hidden size of the checkpoint's "
                f"image_dense input ({model.image_dense.in_features})"
            )
        self.image_features = PooledImageFeatures(cfg.vision_path, cfg.image_feature_dim, cfg.image_size, device, dtype)
        self.vision = self.image_features.model
        self.cfg = cfg
        self.device = device
        self.version = 0

    @classmethod
    def create(cls, cfg: PolicyConfig, seed: int = 0, device: str = "cpu") -> AutoUIPolicy:
        if cfg.path:
            return cls.from_pretrained(cfg.path, cfg, device)
        torch.manual_seed(seed)
        tokenizer = ByT5Tokenizer()
        model = AutoUIModel(byte_t5_config(cfg, tokenizer, image_feature_dim=cfg.image_feature_dim))
        # A byte model can emit bytes that are not UTF-8 (or special tokens); their text would not tokenize back
        # to the same ids. Such tokens are out of the policy's distribution, in sampling and in `token_logprobs`.
        model.generation_config.suppress_tokens = [
            i
            for i in range(len(tokenizer))
            if i != tokenizer.eos_token_id
            and tokenizer.encode(tokenizer.decode([i], skip_special_tokens=True), add_special_tokens=False) != [i]
        ]
        return cls(model, tokenizer, cfg, device)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, cfg: PolicyConfig, device: str = "cpu") -> AutoUIPolicy:
        folder = model_folder(path, "policy.path")
        return cls(AutoUIModel.from_pretrained(folder), AutoTokenizer.from_pretrained(folder), cfg, device)

    def save_pretrained(self, path: str | os.PathLike) -> None:
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)

    # -- inputs

    def prompt_inputs(self, observations: Sequence[Observation]):
        """The tokenized prompts (input_ids, attention_mask), padded on the right, truncated on the left."""
        return self.tokenizer(
            [autoui_prompt(o) for o in observations],
            padding=True,
            truncation=True,
            max_length=self.cfg.max_prompt_tokens,
            return_tensors="pt",
        ).to(self.device)

    def _encode(self, observations: Sequence[Observation]) -> tuple[BaseModelOutput, dict]:
        """The encoder's outputs (text fused with the screenshot's features) and the tokenized prompts."""
        batch = self.prompt_inputs(observations)
        fused = self.model.encode(batch.input_ids, batch.attention_mask, self.image_features(observations))
        return fused, batch

    # -- acting

    @torch.no_grad()
    def act(self, observations: Sequence[Observation], greedy: bool = False) -> list[ActionSample]:
        self.model.eval()
        encoder_outputs, batch = self._encode(observations)
        grammars = self.grammars(observations)
        constrained = any(g is not None for g in grammars)
        processors = [GrammarLogitsProcessor(grammars, self.tokens, prompt_len=1)] if constrained else []
        out = self.model.generate(
            encoder_outputs=encoder_outputs,
            attention_mask=batch.attention_mask,
            logits_processor=LogitsProcessorList(processors),
            **sampling_kwargs(self.cfg.temperature, self.cfg.max_new_tokens, greedy),
        )
        decode = self.decoder(constrained)
        eos = self.tokenizer.eos_token_id
        prompts = prompt_texts(self.tokenizer, batch.input_ids, batch.attention_mask)
        return samples_from(self.model, out, 1, eos, decode, self.version, self.cfg.max_new_tokens, prompts)

    # -- learning

    def token_logprobs(
        self, observations: Sequence[Observation], actions: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs of `actions` by teacher forcing (under the distribution `act` samples
        from), and the mask of real tokens."""
        labels = self.tokenizer(list(actions), padding=True, return_tensors="pt").to(self.device)
        mask = labels.attention_mask.bool()
        ids = labels.input_ids.masked_fill(~mask, -100)
        encoder_outputs, batch = self._encode(observations)
        logits = self.model(encoder_outputs=encoder_outputs, attention_mask=batch.attention_mask, labels=ids).logits
        grammars = self.grammars(observations)
        suppressed = self.model.generation_config.suppress_tokens
        return scored_tokens(logits, ids, mask, self.cfg.temperature, grammars, self.tokens, suppressed), mask
