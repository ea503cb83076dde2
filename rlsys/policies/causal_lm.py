"""A decoder-only text policy (a causal language model) that an inference engine such as vLLM can serve.

It reads the same text prompt as `tiny_t5` (task, previous actions, numbered elements) followed by
`Action: `, and writes the action text. A checkpoint (`policy.path`) loads with `AutoModelForCausalLM`;
without one, a tiny Qwen2 is built from config over a byte-level tokenizer built offline.

That tokenizer has the 256 byte symbols as its vocabulary and no merges, so every text has exactly one
tokenization: the ids an engine samples are the ids the learner gets back by re-tokenizing the action
text. Where the tokenizer has merges (a pretrained checkpoint), `token_logprobs` takes the sampled ids
instead (`act_with_token_ids` returns them).

Batches are left-padded, with position ids counted from each row's first real token, so padding changes
no number. With LoRA the base is frozen: `state_dict` is the adapter alone (unless `policy.publish` is
`full`), and `save_pretrained` writes `adapter/` next to a copy of the base in `base/`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LogitsProcessorList,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from rlsys.config import PolicyConfig
from rlsys.core.types import ActionSample, Observation
from rlsys.policies.base import HFPolicy, torch_dtype
from rlsys.policies.grammar_decoding import GrammarLogitsProcessor
from rlsys.policies.lora_checkpoint import ADAPTER_DIR, BASE_DIR, is_peft, without_lora
from rlsys.policies.lora_merge import merged_lora_for
from rlsys.policies.packing import action_positions, apply_attention, packed_positions, right_aligned, use_packing
from rlsys.policies.resolve import resolve, resolve_path
from rlsys.policies.sampling import prompt_texts, samples_from, sampling_kwargs, scored_tokens
from rlsys.policies.tiny_t5 import prompt_text

END_OF_TEXT = "<|endoftext|>"
ACTION_CUE = "\nAction: "
HEAD_DIM = 64  # vLLM's CPU attention refuses narrow heads (16), so heads built from config are 64 wide
POSITION_MARGIN = 1024  # room past prompt + action in models built from config
DEFAULT_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def byte_symbols() -> list[str]:
    """GPT-2's printable stand-in for each byte value, in byte order (what the ByteLevel pre-tokenizer writes)."""
    kept = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    symbols, extra = {}, 0
    for byte in range(256):
        if byte in kept:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """Token id b is byte b and `<|endoftext|>` (256) is EOS and padding. No merges: one tokenization per text."""
    vocab = {symbol: byte for byte, symbol in enumerate(byte_symbols())}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([END_OF_TEXT])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=END_OF_TEXT,
        pad_token=END_OF_TEXT,
        clean_up_tokenization_spaces=False,  # decoding gives back the bytes as they were
        model_max_length=1 << 30,
    )


def tiny_qwen2_config(cfg: PolicyConfig, tokenizer) -> Qwen2Config:
    if cfg.d_model % HEAD_DIM:
        raise ValueError(
            f"policy.d_model must be a multiple of {HEAD_DIM} for policy.kind 'causal_lm' (its attention heads are "
            f"{HEAD_DIM} wide), got {cfg.d_model}"
        )
    heads = max(1, cfg.d_model // HEAD_DIM)
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=cfg.max_prompt_tokens + cfg.max_new_tokens + POSITION_MARGIN,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def left_padded(rows: Sequence[list[int]], pad_id: int) -> dict:
    """Rows padded on the left to one width, with the attention mask and position ids that make
    each row's numbers what they would be alone."""
    width = max(len(r) for r in rows)
    input_ids = torch.tensor([[pad_id] * (width - len(r)) + list(r) for r in rows], dtype=torch.long)
    attention_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}


def text_ids(tokenizer, text: str) -> list[int]:
    # page text that spells a special token (`<|endoftext|>`) is that text, not the token
    return tokenizer(text, add_special_tokens=False, split_special_tokens=True).input_ids


def prompt_ids(tokenizer, obs: Observation, max_prompt_tokens: int) -> list[int]:
    """The prompt's token ids: the task first, trailing elements dropped to fit `policy.max_prompt_tokens`,
    then the action cue. The learner and an engine serving the policy (placement vllm) both use it."""
    cue = text_ids(tokenizer, ACTION_CUE)
    room = max(0, max_prompt_tokens - len(cue))
    return text_ids(tokenizer, prompt_text(obs))[:room] + cue


def load_tokenizer(cfg: PolicyConfig):
    """The policy's tokenizer without its model (what a runner needs to write prompts for an engine)."""
    if not cfg.path:
        return byte_tokenizer()
    base, _ = resolve(cfg)
    return AutoTokenizer.from_pretrained(base.folder)


class CausalLMPolicy(HFPolicy):
    SAVED_AS = ("config.json", ADAPTER_DIR)  # a plain model, or a LoRA adapter with its base

    def __init__(self, model, tokenizer, cfg: PolicyConfig, device: str = "cpu"):
        self.cfg = cfg
        self.device = device
        self.tokenizer = tokenizer
        self.version = 0
        apply_attention(model, cfg.attn_implementation, device)
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if cfg.lora.enabled and not is_peft(model):
            model = _with_lora(model, cfg)
        self.model = model.to(device=device, dtype=torch_dtype(cfg, device))
        self.merged_lora = merged_lora_for(self.model, cfg)
        self.adapter_only = is_peft(self.model) and cfg.publish != "full"
        if cfg.publish == "adapter" and not is_peft(self.model):
            raise ValueError("policy.publish = 'adapter' needs policy.lora.enabled = true")

    # -- building and saving

    @classmethod
    def create(cls, cfg: PolicyConfig, seed: int = 0, device: str = "cpu") -> CausalLMPolicy:
        if cfg.path:
            return cls.from_pretrained(cfg.path, cfg, device)
        tokenizer = byte_tokenizer()
        config = tiny_qwen2_config(cfg, tokenizer)
        torch.manual_seed(seed)
        return cls(Qwen2ForCausalLM(config), tokenizer, cfg, device)

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike, cfg: PolicyConfig, device: str = "cpu", key: str = "policy.path"
    ) -> CausalLMPolicy:
        """A model folder or Hub id, a LoRA checkpoint or a peft adapter folder (rlsys/policies/resolve.py)."""
        base, adapter = resolve_path(path, key)
        model = AutoModelForCausalLM.from_pretrained(base.folder, dtype=torch_dtype(cfg, device))
        if adapter is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, adapter.folder, is_trainable=True)
        return cls(model, AutoTokenizer.from_pretrained(base.folder), cfg, device)

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Plain models: the HF layout (model and tokenizer). LoRA: `adapter/` and the frozen base in `base/`."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if not is_peft(self.model):
            self.model.save_pretrained(path)
            self.tokenizer.save_pretrained(path)
            return
        self.model.save_pretrained(path / ADAPTER_DIR)
        base = self.model.get_base_model()
        base.save_pretrained(path / BASE_DIR, state_dict=without_lora(base.state_dict()))
        self.tokenizer.save_pretrained(path / BASE_DIR)

    def adapter_config(self) -> dict | None:
        """What an inference engine needs to write the adapter's `adapter_config.json`; None without LoRA."""
        if not is_peft(self.model):
            return None
        lora = self.model.peft_config["default"]
        return {"r": lora.r, "lora_alpha": lora.lora_alpha, "target_modules": sorted(lora.target_modules)}

    # -- prompts

    def prompt_ids(self, obs: Observation) -> list[int]:
        return prompt_ids(self.tokenizer, obs, self.cfg.max_prompt_tokens)

    # -- acting

    @torch.no_grad()
    def act(self, observations: Sequence[Observation], greedy: bool = False) -> list[ActionSample]:
        """Samples with the token ids each action was sampled as (without EOS), for `token_logprobs`."""
        grammars = self.grammars(observations)
        eos = self.tokenizer.eos_token_id
        batch = left_padded([self.prompt_ids(o) for o in observations], self.tokenizer.pad_token_id)
        batch = {k: v.to(self.device) for k, v in batch.items()}
        prompt_len = batch["input_ids"].shape[1]  # decoder-only: the prompt is part of the sequence
        processors = []
        if any(g is not None for g in grammars):
            processors.append(GrammarLogitsProcessor(grammars, self.tokens, prompt_len))
        with self.acting() as model:
            model.eval()
            out = model.generate(
                **batch,
                logits_processor=LogitsProcessorList(processors),
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=eos,
                **sampling_kwargs(self.cfg.temperature, self.cfg.max_new_tokens, greedy),
            )
            limit = self.cfg.max_new_tokens
            decode = self.decoder(constrained=bool(processors))
            prompts = prompt_texts(self.tokenizer, batch["input_ids"], batch["attention_mask"])
            samples = samples_from(model, out, prompt_len, eos, decode, self.version, limit, prompts)
        for sample, seq in zip(samples, out.sequences[:, prompt_len:].tolist()):
            sample.token_ids = seq[: seq.index(eos)] if eos in seq[:limit] else seq[:limit]
        return samples

    # -- learning

    def token_logprobs(
        self,
        observations: Sequence[Observation],
        actions: Sequence[str],
        token_ids: Sequence[list[int] | None] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs [B, T] of each action and its EOS after its prompt, by teacher forcing under
        the distribution `act` samples from (temperature, and the grammar when decoding is constrained), and
        the mask of real tokens. `token_ids`: per row, the ids the action was sampled as (None: tokenize its
        text). Rows are left-padded so every action ends at the last position, and only the action
        positions go through the output head."""
        eos = self.tokenizer.eos_token_id
        token_ids = token_ids or [None] * len(actions)
        sampled = [list(ids) if ids is not None else text_ids(self.tokenizer, a) for a, ids in zip(actions, token_ids)]
        suffixes = [ids + [eos] for ids in sampled]
        rows = [self.prompt_ids(o) + s for o, s in zip(observations, suffixes)]
        width = max(len(s) for s in suffixes)
        targets = right_aligned(suffixes, width).to(self.device)
        lengths = torch.tensor([len(s) for s in suffixes], device=self.device)
        mask = torch.arange(width, device=self.device).unsqueeze(0) >= (width - lengths).unsqueeze(1)
        logits = self._packed_logits(rows, suffixes) if self.packing else self._padded_logits(rows, width)
        grammars = self.grammars(observations)
        return scored_tokens(logits, targets, mask, self.cfg.temperature, grammars, self.tokens), mask

    def sequence_lengths(
        self, observations: Sequence[Observation], actions: Sequence[str], token_ids=None
    ) -> list[int]:
        """Each row's tokens when scored (prompt, action, EOS): what a learner's token budget counts."""
        token_ids = token_ids or [None] * len(actions)
        return [len(self.prompt_ids(o)) + (len(i) if i is not None else len(text_ids(self.tokenizer, a))) + 1
                for o, a, i in zip(observations, actions, token_ids)]  # fmt: skip

    @property
    def packing(self) -> bool:
        return use_packing(self.cfg.packing, self.model)

    def _padded_logits(self, rows: list[list[int]], width: int) -> torch.Tensor:
        """Rows left-padded so every action ends at the last position: [B, width, V]."""
        batch = {k: v.to(self.device) for k, v in left_padded(rows, self.tokenizer.pad_token_id).items()}
        return self.model(**batch, logits_to_keep=width + 1).logits[:, :-1]

    def _packed_logits(self, rows: list[list[int]], suffixes: list[list[int]]) -> torch.Tensor:
        """All rows in one sequence without padding (packing.py), laid out as `_padded_logits`'."""
        keep, layout = action_positions([len(r) for r in rows], [len(s) for s in suffixes])
        input_ids = torch.tensor([sum(rows, [])], device=self.device)
        positions = packed_positions([len(r) for r in rows]).to(self.device)
        out = self.model(
            input_ids=input_ids, position_ids=positions, use_cache=False, logits_to_keep=keep.to(self.device)
        )
        return out.logits[0][layout.to(self.device)]


def lora_settings(cfg: PolicyConfig) -> dict:
    """The adapter `policy.lora` asks for, in peft's names: what the learner wraps the model with and what an
    inference engine needs to load the adapters it publishes."""
    return {
        "r": cfg.lora.r,
        "lora_alpha": cfg.lora.alpha,
        "target_modules": cfg.lora.target_modules or DEFAULT_LORA_TARGETS,
    }


def _with_lora(model, cfg: PolicyConfig):
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(**lora_settings(cfg), lora_dropout=cfg.lora.dropout, bias="none"))
