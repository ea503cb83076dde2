"""A small T5 encoder–decoder over bytes (the ByT5 tokenizer needs no vocabulary download).

It reads the task, the previous actions and the numbered element list, and writes the action
text. Built from a config when no checkpoint is given; saved and loaded in Hugging Face layout.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from transformers import ByT5Tokenizer, LogitsProcessorList, T5Config, T5ForConditionalGeneration

from rlsys.config import PolicyConfig
from rlsys.core.types import ActionSample, Observation
from rlsys.policies.base import HFPolicy
from rlsys.policies.grammar_decoding import GrammarLogitsProcessor
from rlsys.policies.hub import model_folder
from rlsys.policies.sampling import prompt_texts, samples_from, sampling_kwargs, scored_tokens


def byte_t5_config(cfg: PolicyConfig, tokenizer: ByT5Tokenizer, **extra) -> T5Config:
    """A T5 of the configured size over the ByT5 byte vocabulary, dropout off."""
    return T5Config(
        vocab_size=len(tokenizer),
        d_model=cfg.d_model,
        d_ff=cfg.d_ff,
        d_kv=cfg.d_model // cfg.num_heads,
        num_layers=cfg.num_layers,
        num_decoder_layers=cfg.num_layers,
        num_heads=cfg.num_heads,
        dropout_rate=0.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
        **extra,
    )


def prompt_text(obs: Observation) -> str:
    history = obs.extras.get("previous_actions") or []
    previous = "; ".join(history[-2:]) or "none"
    return f"Task: {obs.task}\nPrevious: {previous}\nElements:\n{obs.ui_text}"


class TinyT5Policy(HFPolicy):
    def __init__(
        self, model: T5ForConditionalGeneration, tokenizer: ByT5Tokenizer, cfg: PolicyConfig, device: str = "cpu"
    ):
        self.model = model.to(device)
        self.tokenizer = tokenizer
        self.tokenizer.truncation_side = "right"  # the task comes first; drop trailing elements
        self.cfg = cfg
        self.device = device
        self.version = 0

    @classmethod
    def create(cls, cfg: PolicyConfig, seed: int = 0, device: str = "cpu") -> TinyT5Policy:
        if cfg.path:
            return cls.from_pretrained(cfg.path, cfg, device)
        torch.manual_seed(seed)
        tokenizer = ByT5Tokenizer()
        return cls(T5ForConditionalGeneration(byte_t5_config(cfg, tokenizer)), tokenizer, cfg, device)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, cfg: PolicyConfig, device: str = "cpu") -> TinyT5Policy:
        folder = model_folder(path, "policy.path")
        model = T5ForConditionalGeneration.from_pretrained(folder)
        tokenizer = ByT5Tokenizer.from_pretrained(folder)
        return cls(model, tokenizer, cfg, device)

    def save_pretrained(self, path: str | os.PathLike) -> None:
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)

    # -- acting

    def _encode(self, prompts: Sequence[str]) -> dict:
        batch = self.tokenizer(
            list(prompts), padding=True, truncation=True, max_length=self.cfg.max_prompt_tokens, return_tensors="pt"
        )
        return {k: v.to(self.device) for k, v in batch.items()}

    @torch.no_grad()
    def act(self, observations: Sequence[Observation], greedy: bool = False) -> list[ActionSample]:
        processor = GrammarLogitsProcessor(
            self.grammars(observations), self.tokens, prompt_len=1
        )  # after the decoder start token
        self.model.eval()
        batch = self._encode([prompt_text(o) for o in observations])
        out = self.model.generate(
            **batch,
            logits_processor=LogitsProcessorList([processor]),
            **sampling_kwargs(self.cfg.temperature, self.cfg.max_new_tokens, greedy),
        )
        prompts = prompt_texts(self.tokenizer, batch["input_ids"], batch["attention_mask"])
        eos, limit = self.tokenizer.eos_token_id, self.cfg.max_new_tokens
        return samples_from(self.model, out, 1, eos, self.tokens.text_of, self.version, limit, prompts)

    # -- learning

    def _labels(self, actions: Sequence[str]) -> torch.Tensor:
        labels = self.tokenizer(list(actions), padding=True, return_tensors="pt").input_ids
        labels[labels == self.tokenizer.pad_token_id] = -100
        return labels.to(self.device)

    def token_logprobs(
        self, observations: Sequence[Observation], actions: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs of `actions` by teacher forcing (under the distribution `act` samples
        from), and the mask of real tokens."""
        labels = self._labels(actions)
        logits = self.model(**self._encode([prompt_text(o) for o in observations]), labels=labels).logits
        mask = labels != -100
        grammars = self.grammars(observations)
        return scored_tokens(logits, labels, mask, self.cfg.temperature, grammars, self.tokens), mask
