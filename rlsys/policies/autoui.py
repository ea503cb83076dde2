"""AutoUI (the DigiRL actor): a T5 encoder–decoder whose text encoding is fused with one image token.

The screenshot's pooled BLIP-2 ViT feature is projected to one token E; the text states H attend to
it (A = MHA(H, E, E)), and a gate mixes the two: H' = (1 - g)·H + g·A, g = sigmoid(W[H; A]). The
decoder cross-attends to H'. The released checkpoint is a T5ForConditionalGeneration state dict plus
top-level `image_dense`, `mha_layer` and `gate_dense`, which is exactly `AutoUIModel`'s.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image
from torch import nn
from transformers import (
    AutoTokenizer,
    Blip2VisionConfig,
    Blip2VisionModel,
    ByT5Tokenizer,
    LogitsProcessorList,
    T5Config,
    T5ForConditionalGeneration,
)
from transformers.modeling_outputs import BaseModelOutput

from rlsys.config import PolicyConfig
from rlsys.policies.base import HFPolicy, torch_dtype
from rlsys.policies.grammar_decoding import GrammarLogitsProcessor
from rlsys.policies.prompts import autoui_prompt
from rlsys.policies.sampling import samples_from, sampling_kwargs, scored_tokens
from rlsys.policies.tiny_t5 import byte_t5_config
from rlsys.types import ActionSample, Observation

FEATURE_KEY = "blip2_pooled"
CLIP_MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
CLIP_STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)
VISION_SEED = 0  # the tiny vision tower is not saved: every process must build the same one


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


def _tiny_vision(cfg: PolicyConfig) -> Blip2VisionModel:
    vision_cfg = Blip2VisionConfig(
        hidden_size=cfg.image_feature_dim,
        intermediate_size=2 * cfg.image_feature_dim,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=cfg.image_size,
        patch_size=max(1, cfg.image_size // 4),
        initializer_range=0.02,  # the default (1e-10) makes every screenshot look the same
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(VISION_SEED)
        return Blip2VisionModel(vision_cfg)


class AutoUIPolicy(HFPolicy):
    def __init__(self, model: AutoUIModel, tokenizer, cfg: PolicyConfig, device: str = "cpu"):
        dtype = torch_dtype(cfg, device)
        self.model = model.to(device=device, dtype=dtype)
        if cfg.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.tokenizer = tokenizer
        self.tokenizer.truncation_side = "left"  # the goal comes last; drop the oldest text
        vision = Blip2VisionModel.from_pretrained(cfg.vision_path) if cfg.vision_path else _tiny_vision(cfg)
        if vision.config.hidden_size != model.image_dense.in_features:
            raise ValueError(
                f"the vision encoder's hidden size ({vision.config.hidden_size}) must equal the policy's "
                f"image feature size ({model.image_dense.in_features}); check policy.vision_path and "
                f"policy.image_feature_dim"
            )
        self.vision = vision.to(device=device, dtype=dtype).eval().requires_grad_(False)
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
        return cls(AutoUIModel.from_pretrained(path), AutoTokenizer.from_pretrained(path), cfg, device)

    def save_pretrained(self, path: str | os.PathLike) -> None:
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)

    # -- inputs

    def _pixels(self, png: bytes) -> np.ndarray:
        size = self.vision.config.image_size
        with Image.open(io.BytesIO(png)) as im:
            rgb = im.convert("RGB").resize((size, size), Image.BICUBIC)
        x = (np.asarray(rgb, dtype=np.float32) / 255.0 - CLIP_MEAN) / CLIP_STD
        return x.transpose(2, 0, 1)

    @torch.no_grad()
    def image_features(self, observations: Sequence[Observation]) -> torch.Tensor:
        """Pooled screenshot features [B, image_feature_dim], computed once per observation and cached on it."""
        missing = [o for o in observations if FEATURE_KEY not in o.features]
        if missing:
            pixels = torch.from_numpy(np.stack([self._pixels(o.screenshot_png) for o in missing]))
            pooled = self.vision(pixel_values=pixels.to(self.device, self.vision.dtype)).pooler_output
            for obs, row in zip(missing, pooled.float().cpu().numpy()):
                obs.features[FEATURE_KEY] = row
        features = np.stack([np.asarray(o.features[FEATURE_KEY], dtype=np.float32) for o in observations])
        if features.shape[1] != self.model.image_dense.in_features:
            raise ValueError(
                f"cached {FEATURE_KEY} has {features.shape[1]} values, not {self.model.image_dense.in_features}"
            )
        return torch.from_numpy(features).to(self.device)

    def prompt_inputs(self, observations: Sequence[Observation]):
        """The tokenized prompts (input_ids, attention_mask), padded on the right, truncated on the left."""
        return self.tokenizer(
            [autoui_prompt(o) for o in observations],
            padding=True,
            truncation=True,
            max_length=self.cfg.max_prompt_tokens,
            return_tensors="pt",
        ).to(self.device)

    def _encode(self, observations: Sequence[Observation]) -> tuple[BaseModelOutput, torch.Tensor]:
        batch = self.prompt_inputs(observations)
        fused = self.model.encode(batch.input_ids, batch.attention_mask, self.image_features(observations))
        return fused, batch.attention_mask

    # -- acting

    @torch.no_grad()
    def act(self, observations: Sequence[Observation], greedy: bool = False) -> list[ActionSample]:
        self.model.eval()
        encoder_outputs, attention_mask = self._encode(observations)
        grammars = self.grammars(observations)
        constrained = any(g is not None for g in grammars)
        processors = [GrammarLogitsProcessor(grammars, self.tokens, prompt_len=1)] if constrained else []
        out = self.model.generate(
            encoder_outputs=encoder_outputs,
            attention_mask=attention_mask,
            logits_processor=LogitsProcessorList(processors),
            **sampling_kwargs(self.cfg.temperature, self.cfg.max_new_tokens, greedy),
        )
        decode = self.decoder(constrained)
        eos = self.tokenizer.eos_token_id
        return samples_from(self.model, out, 1, eos, decode, self.version, self.cfg.max_new_tokens)

    # -- learning

    def token_logprobs(
        self, observations: Sequence[Observation], actions: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs of `actions` by teacher forcing (under the distribution `act` samples
        from), and the mask of real tokens."""
        labels = self.tokenizer(list(actions), padding=True, return_tensors="pt").to(self.device)
        mask = labels.attention_mask.bool()
        ids = labels.input_ids.masked_fill(~mask, -100)
        encoder_outputs, attention_mask = self._encode(observations)
        logits = self.model(encoder_outputs=encoder_outputs, attention_mask=attention_mask, labels=ids).logits
        grammars = self.grammars(observations)
        suppressed = self.model.generation_config.suppress_tokens
        return scored_tokens(logits, ids, mask, self.cfg.temperature, grammars, self.tokens, suppressed), mask
