"""Vision-language policies through transformers: LLaVA-1.5/1.6 (PAE) and any model that loads
with `AutoModelForImageTextToText` and has a chat template (Qwen2-VL and similar).

The agent sees the prompt of its action space (PAE's by default: `Thought: ... Action: ...`)
and the set-of-marks screenshot. LoRA (peft) on the language model's linear layers, optional 4-bit
loading, gradient checkpointing, bf16 on GPU. With LoRA the base is frozen, so only the adapter
is published to runners and written to checkpoints next to a pointer to (or a copy of) the base
(lora_checkpoint.py).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText, LogitsProcessorList

from rlsys.config import PolicyConfig
from rlsys.core.types import ActionSample, Observation
from rlsys.policies.base import HFPolicy, torch_dtype
from rlsys.policies.grammar_decoding import (
    GrammarLogitsProcessor,
    neutralize_special_tokens,
)
from rlsys.policies.lora_checkpoint import ADAPTER_DIR, BASE_DIR, BaseSource, is_peft, without_lora, write_pointer
from rlsys.policies.lora_merge import merged_lora_for
from rlsys.policies.packing import action_positions, apply_attention, packed_positions, right_aligned, use_packing
from rlsys.policies.presets import PRESETS
from rlsys.policies.prompts import agent_prompt
from rlsys.policies.resolve import resolve_path
from rlsys.policies.sampling import prompt_texts, samples_from, sampling_kwargs, scored_tokens
from rlsys.policies.vlm_inputs import VisionTextInputs


def language_model_linear_layers(model: torch.nn.Module) -> list[str]:
    """Full names of the language model's linear layers (LoRA's default targets); not the vision
    tower, the projector or the output head."""
    names = [
        name
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and ".language_model." in f".{name}."
    ]
    if not names:
        raise ValueError("found no linear layers under a `language_model` module; set policy.lora.target_modules")
    return names


def quantization_config(cfg: PolicyConfig, device: str):
    if not cfg.load_in_4bit:
        return None
    if importlib.util.find_spec("bitsandbytes") is None:
        raise RuntimeError("policy.load_in_4bit needs the bitsandbytes package: pip install bitsandbytes")
    if not device.startswith("cuda"):
        raise RuntimeError("policy.load_in_4bit needs a CUDA device; set policy.load_in_4bit=false on CPU")
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch_dtype(cfg, device)
    )


ENCODINGS_KEPT = 64


class VLMPolicy(HFPolicy):
    SAVED_AS = ("config.json", ADAPTER_DIR)  # a plain model, or a LoRA adapter with its base (or base.json)

    def __init__(
        self, model, inputs: VisionTextInputs, cfg: PolicyConfig, device: str = "cpu", base: BaseSource | None = None
    ):
        self.cfg = cfg
        self.device = device
        self.inputs = inputs
        self.tokenizer = inputs.tokenizer
        self.base = base  # where the frozen base came from; None when built from config
        self.version = 0
        self._encodings: dict[int, tuple[Observation, dict]] = {}  # id -> (observation, inputs)
        apply_attention(model, cfg.attn_implementation, device)
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.enable_input_require_grads()
        if cfg.lora.enabled and not is_peft(model):
            model = _with_lora(model, cfg)
        if not cfg.load_in_4bit:
            model = model.to(device=device, dtype=torch_dtype(cfg, device))
        self.model = model
        self.merged_lora = merged_lora_for(model, cfg)
        self.adapter_only = is_peft(model) and cfg.publish != "full"
        if cfg.publish == "adapter" and not is_peft(model):
            raise ValueError("policy.publish = 'adapter' needs policy.lora.enabled = true")

    # -- building and saving

    @classmethod
    def create(cls, cfg: PolicyConfig, seed: int = 0, device: str = "cpu") -> VLMPolicy:
        if cfg.path:
            return cls.from_pretrained(cfg.path, cfg, device)
        if cfg.load_in_4bit:
            raise ValueError("policy.load_in_4bit quantises a checkpoint; set policy.path")
        model, inputs = PRESETS[cfg.arch](cfg, seed)
        return cls(model, inputs, cfg, device)

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike, cfg: PolicyConfig, device: str = "cpu", key: str = "policy.path"
    ) -> VLMPolicy:
        """A model folder or Hub id, a LoRA checkpoint or a peft adapter folder (rlsys/policies/resolve.py)."""
        base, adapter = resolve_path(path, key)
        model = AutoModelForImageTextToText.from_pretrained(
            base.folder, dtype=torch_dtype(cfg, device), quantization_config=quantization_config(cfg, device)
        )
        if adapter is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, adapter.folder, is_trainable=True)
        return cls(model, VisionTextInputs.from_pretrained(base.folder), cfg, device, base=base.source)

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Plain models: the HF layout. LoRA: `adapter/` plus the base, as a pointer when it came from a folder
        or the Hub (it is frozen, so copying 14 GB per checkpoint buys nothing), else a copy."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if not is_peft(self.model):
            self.model.save_pretrained(path)
            self.inputs.save_pretrained(path)
            return
        self.model.save_pretrained(path / ADAPTER_DIR)
        if self.base is not None:
            write_pointer(path, self.base)
        else:
            base = self.model.get_base_model()
            base.save_pretrained(path / BASE_DIR, state_dict=without_lora(base.state_dict()))
            self.inputs.save_pretrained(path / BASE_DIR)

    # -- acting

    def _encoded(self, observations: Sequence[Observation], keep: bool = True) -> list[dict]:
        """Each observation's model inputs. With `keep`, the last ENCODINGS_KEPT are kept: a learner's step reads
        a sample's up to three times (its length for the token budget, the importance ratio, the loss), and
        processing a 448-pixel screenshot costs ~20 ms of CPU, as much as the step's GPU work at 1.5B. Acting
        sees each observation once, so it keeps none."""
        out = []
        for o in observations:
            kept = self._encodings.pop(id(o), None)
            if kept is None:  # (an entry holds its observation, so no other object can have its id)
                prompt = neutralize_special_tokens(agent_prompt(o, self.cfg.prompt), self.tokenizer)
                kept = (o, self.inputs.encode(self.inputs.chat(prompt), o.screenshot_png))
            if keep:
                self._encodings[id(o)] = kept  # the newest last
            out.append(kept[1])
        while len(self._encodings) > ENCODINGS_KEPT:
            self._encodings.pop(next(iter(self._encodings)))
        return out

    def _to_device(self, batch: dict) -> dict:
        dtype = torch_dtype(self.cfg, self.device)
        return {k: v.to(self.device, dtype=dtype if v.is_floating_point() else v.dtype) for k, v in batch.items()}

    def _positions(self, batch: dict) -> dict:
        """Left padding must not shift positions. Models with their own 3-D rope index (Qwen2-VL)
        derive positions from the attention mask themselves."""
        if "mm_token_type_ids" in batch:
            return batch
        return batch | {"position_ids": (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)}

    @torch.no_grad()
    def act(self, observations: Sequence[Observation], greedy: bool = False) -> list[ActionSample]:
        grammars = self.grammars(observations)
        batch, _ = self.inputs.batch(self._encoded(observations, keep=False), side="left")
        batch = self._to_device(batch)
        processors = []
        if any(g is not None for g in grammars):
            processors.append(GrammarLogitsProcessor(grammars, self.tokens, batch["input_ids"].shape[1]))
        with self.acting() as model:
            model.eval()
            out = model.generate(
                **batch,
                logits_processor=LogitsProcessorList(processors),
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
                **sampling_kwargs(self.cfg.temperature, self.cfg.max_new_tokens, greedy),
            )
            decode = self.decoder(constrained=bool(processors))
            prompt_len = batch["input_ids"].shape[1]
            eos, limit = self.tokenizer.eos_token_id, self.cfg.max_new_tokens
            prompts = prompt_texts(self.tokenizer, batch["input_ids"], batch["attention_mask"])
            return samples_from(model, out, prompt_len, eos, decode, self.version, limit, prompts)

    # -- learning

    def token_logprobs(
        self,
        observations: Sequence[Observation],
        actions: Sequence[str],
        token_ids: Sequence[list[int] | None] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs of each action (and its EOS) after its prompt, by teacher forcing,
        under the distribution `act` samples from (temperature, and the grammar when decoding is
        constrained). Rows are left-padded so every action ends at the last position (or packed, packing.py),
        and only the action positions go through the output head. `token_ids`: per row, the ids the action was
        sampled as (an engine's; None: tokenize its text), which a tokenizer with merges may spell otherwise."""
        suffixes = self._action_ids(actions, token_ids)
        encoded = self._encoded(observations)
        width = max(len(s) for s in suffixes)
        targets = right_aligned(suffixes, width).to(self.device)
        lengths = torch.tensor([len(s) for s in suffixes], device=self.device)
        mask = torch.arange(width, device=self.device).unsqueeze(0) >= (width - lengths).unsqueeze(1)
        if self.packing:
            logits = self._packed_logits(encoded, suffixes)
        else:
            batch, _ = self.inputs.batch(encoded, side="left", suffixes=suffixes)
            batch = self._positions(self._to_device(batch))
            logits = self.model(**batch, logits_to_keep=width + 1).logits[:, :-1]
        grammars = self.grammars(observations)
        return scored_tokens(logits, targets, mask, self.cfg.temperature, grammars, self.tokens), mask

    def sequence_lengths(
        self, observations: Sequence[Observation], actions: Sequence[str], token_ids=None
    ) -> list[int]:
        """Each row's tokens when scored (prompt with its image's tokens, action, EOS), for a token budget."""
        encoded = self._encoded(observations)
        return [e["input_ids"].shape[1] + len(s) for e, s in zip(encoded, self._action_ids(actions, token_ids))]

    @property
    def packing(self) -> bool:
        return use_packing(self.cfg.packing, self.model)

    def _action_ids(self, actions: Sequence[str], token_ids=None) -> list[list[int]]:
        # an action that spells a special token (`<image>`) is that text, not the token
        encode = lambda a: self.tokenizer(a, add_special_tokens=False, split_special_tokens=True).input_ids
        token_ids = token_ids or [None] * len(actions)
        return [(list(i) if i is not None else encode(a)) + [self.tokenizer.eos_token_id]
                for a, i in zip(actions, token_ids)]  # fmt: skip

    def _packed_logits(self, encoded: list[dict], suffixes: list[list[int]]) -> torch.Tensor:
        """All rows in one sequence without padding, laid out as the padded path's logits [B, width, V]. Models
        with a 3-D rope index (Qwen2-VL) get each row's index computed alone, after the text positions that
        tell transformers where rows restart."""
        batch, lengths = self.inputs.packed(encoded, suffixes)
        batch = self._to_device(batch)
        text_positions = packed_positions(lengths).to(self.device)
        if "mm_token_type_ids" in batch:
            rope, start = [], 0
            for i, n in enumerate(lengths):
                rows = slice(start, start + n)
                rope.append(self._rope_index(batch, i, rows))
                start += n
            positions = torch.cat([text_positions.unsqueeze(0), torch.cat(rope, dim=-1)], dim=0)
        else:
            positions = text_positions
        keep, layout = action_positions(lengths, [len(s) for s in suffixes])
        out = self.model(**batch, position_ids=positions, use_cache=False, logits_to_keep=keep.to(self.device))
        return out.logits[0][layout.to(self.device)]

    def _rope_index(self, batch: dict, row: int, tokens: slice) -> torch.Tensor:
        """Qwen2-VL's [3, 1, n] rope positions of one packed row, as the model computes them for a row alone."""
        model = self.model.get_base_model() if is_peft(self.model) else self.model
        ids = batch["input_ids"][:, tokens]
        positions, _ = model.model.get_rope_index(
            ids,
            batch["mm_token_type_ids"][:, tokens],
            image_grid_thw=batch["image_grid_thw"][row : row + 1],
            attention_mask=torch.ones_like(ids),
        )
        return positions


def _with_lora(model, cfg: PolicyConfig):
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if cfg.load_in_4bit:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=cfg.gradient_checkpointing)
    lora = LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=cfg.lora.target_modules or language_model_linear_layers(model),
        bias="none",
    )
    return get_peft_model(model, lora)
