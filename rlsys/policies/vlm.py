"""Vision-language policies through transformers: LLaVA-1.5/1.6 (PAE) and any model that loads
with `AutoModelForImageTextToText` and has a chat template (Qwen2-VL and similar).

The agent sees the prompt of its action space (PAE's by default: `Thought: ... Action: ...`)
and the set-of-marks screenshot. LoRA (peft) on the language model's linear layers, optional 4-bit
loading, gradient checkpointing, bf16 on GPU. With LoRA the base is frozen, so only the adapter
is published to runners and written to checkpoints next to a pointer to (or a copy of) the base.
The pointer (`base.json`) names a base from the Hugging Face Hub by id and commit, and a local base by its
absolute path and, when it is near (in the same run folder), its path relative to the checkpoint, so a run
folder can move.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText, LogitsProcessorList

from rlsys.config import PolicyConfig
from rlsys.config.model_source import is_hub_id, model_folder, snapshot_revision
from rlsys.core.types import ActionSample, Observation
from rlsys.policies.base import HFPolicy, torch_dtype
from rlsys.policies.grammar_decoding import (
    GrammarLogitsProcessor,
    neutralize_special_tokens,
)
from rlsys.policies.presets import PRESETS
from rlsys.policies.prompts import agent_prompt
from rlsys.policies.sampling import prompt_texts, samples_from, sampling_kwargs, scored_tokens
from rlsys.policies.vlm_inputs import VisionTextInputs

ADAPTER_DIR = "adapter"
BASE_DIR = "base"
BASE_POINTER = "base.json"
NEAR_LEVELS = 3  # a checkpoint's policy folder is RUN/checkpoints/N/policy: three levels up is the run folder


@dataclass(frozen=True)
class BaseSource:
    """Where a frozen LoRA base came from: a Hugging Face Hub id (and its commit) or a local folder."""

    name: str  # a Hub id, or an absolute local path
    revision: str | None = None

    @classmethod
    def of(cls, value: str | os.PathLike, folder: Path) -> BaseSource:
        if is_hub_id(value):
            return cls(str(value), snapshot_revision(folder))
        return cls(str(Path(value).resolve()))

    def pointer(self, checkpoint: Path) -> dict:
        """The `base.json` of a checkpoint saved at `checkpoint`."""
        if is_hub_id(self.name):
            return {"hub_id": self.name, "revision": self.revision}
        record = {"absolute": self.name}
        relative = os.path.relpath(self.name, checkpoint.resolve())
        common = Path(os.path.commonpath([self.name, checkpoint.resolve()]))
        if Path(relative).parts.count("..") <= NEAR_LEVELS and common != Path(common.anchor):
            record["relative"] = relative
        return record


def lora_base(folder: Path, anchor: Path | None = None) -> tuple[Path, BaseSource | None]:
    """The local folder of a LoRA checkpoint's frozen base, and where it came from (None: the checkpoint's own
    `base/` copy). A local base is looked for at its absolute path, then relative to the checkpoint: `anchor`,
    where `folder` is a copy of, else `folder` itself."""
    anchor = anchor or folder
    pointer = folder / BASE_POINTER
    if not pointer.is_file():
        return folder / BASE_DIR, None
    record = json.loads(pointer.read_text())
    if record.get("hub_id"):
        source = BaseSource(record["hub_id"], record.get("revision"))
        return model_folder(source.name, str(anchor / BASE_POINTER), source.revision), source
    tried = [Path(record[k]) for k in ("absolute", "relative", "path") if record.get(k)]  # "path": older pointers
    for candidate in tried:
        base = candidate if candidate.is_absolute() else anchor / candidate
        if base.is_dir():
            return base, BaseSource(str(base.resolve()))
    raise FileNotFoundError(
        f"{anchor / BASE_POINTER}: the LoRA base folder is not at {' nor '.join(str(p) for p in tried)}; put the "
        f"base back there or edit {BASE_POINTER}"
    )


def base_pointer_for(folder: Path, place: Path) -> None:
    """Make the `base.json` of the LoRA policy saved in `folder` hold where its files will be stored, `place`
    (the learner saves through a temporary folder): its relative path is computed from `place`."""
    pointer = folder / BASE_POINTER
    if pointer.is_file():
        record = json.loads(pointer.read_text())
        if record.get("absolute"):
            _write_pointer(pointer, BaseSource(record["absolute"]).pointer(place))


def base_pointer_from(folder: Path, place: Path) -> None:
    """Make the `base.json` of the LoRA policy in `folder`, a copy of the one stored at `place` (the learner loads
    through a temporary folder), name the base it finds from `place` by its absolute path: a run folder that moved
    is found through the path relative to `place`."""
    pointer = folder / BASE_POINTER
    if pointer.is_file() and not json.loads(pointer.read_text()).get("hub_id"):
        base, _ = lora_base(folder, anchor=place)
        _write_pointer(pointer, {"absolute": str(base.resolve())})


def _write_pointer(pointer: Path, record: dict) -> None:
    pointer.write_text(json.dumps(record, indent=1) + "\n")


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
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.enable_input_require_grads()
        if cfg.lora.enabled and not _is_peft(model):
            model = _with_lora(model, cfg)
        if not cfg.load_in_4bit:
            model = model.to(device=device, dtype=torch_dtype(cfg, device))
        self.model = model
        self.adapter_only = _is_peft(model) and cfg.publish != "full"
        if cfg.publish == "adapter" and not _is_peft(model):
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
        """A model folder or Hub id, or a LoRA checkpoint (`adapter/` and its base)."""
        folder = model_folder(path, key)
        if not folder.is_dir():
            raise FileNotFoundError(f"{key} {str(path)!r} is not a folder")
        adapter = folder / ADAPTER_DIR
        base, source = lora_base(folder) if adapter.is_dir() else (folder, BaseSource.of(path, folder))
        model = AutoModelForImageTextToText.from_pretrained(
            base, dtype=torch_dtype(cfg, device), quantization_config=quantization_config(cfg, device)
        )
        if adapter.is_dir():
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, adapter, is_trainable=True)
        return cls(model, VisionTextInputs.from_pretrained(base), cfg, device, base=source)

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Plain models: the HF layout. LoRA: `adapter/` plus the base, as a pointer when it came from a folder
        or the Hub (it is frozen, so copying 14 GB per checkpoint buys nothing), else a copy."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if not _is_peft(self.model):
            self.model.save_pretrained(path)
            self.inputs.save_pretrained(path)
            return
        self.model.save_pretrained(path / ADAPTER_DIR)
        if self.base is not None:
            _write_pointer(path / BASE_POINTER, self.base.pointer(path))
        else:
            base = self.model.get_base_model()
            base.save_pretrained(path / BASE_DIR, state_dict=_without_lora(base.state_dict()))
            self.inputs.save_pretrained(path / BASE_DIR)

    # -- acting

    def _encoded(self, observations: Sequence[Observation]) -> list[dict]:
        prompts = [neutralize_special_tokens(agent_prompt(o, self.cfg.prompt), self.tokenizer) for o in observations]
        return [self.inputs.encode(self.inputs.chat(p), o.screenshot_png) for p, o in zip(prompts, observations)]

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
        batch, _ = self.inputs.batch(self._encoded(observations), side="left")
        batch = self._to_device(batch)
        processors = []
        if any(g is not None for g in grammars):
            processors.append(GrammarLogitsProcessor(grammars, self.tokens, batch["input_ids"].shape[1]))
        self.model.eval()
        out = self.model.generate(
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
        return samples_from(self.model, out, prompt_len, eos, decode, self.version, limit, prompts)

    # -- learning

    def token_logprobs(
        self, observations: Sequence[Observation], actions: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs of each action (and its EOS) after its prompt, by teacher forcing,
        under the distribution `act` samples from (temperature, and the grammar when decoding is
        constrained). Rows are left-padded so every action ends at the last position, and only
        the action positions go through the output head."""
        eos = self.tokenizer.eos_token_id
        # an action that spells a special token (`<image>`) is that text, not the token
        encode = lambda a: self.tokenizer(a, add_special_tokens=False, split_special_tokens=True).input_ids
        suffixes = [encode(a) + [eos] for a in actions]
        batch, _ = self.inputs.batch(self._encoded(observations), side="left", suffixes=suffixes)
        batch = self._positions(self._to_device(batch))
        width = max(len(s) for s in suffixes)
        logits = self.model(**batch, logits_to_keep=width + 1).logits[:, :-1]
        targets = batch["input_ids"][:, -width:]
        lengths = torch.tensor([len(s) for s in suffixes], device=targets.device)
        mask = torch.arange(width, device=targets.device).unsqueeze(0) >= (width - lengths).unsqueeze(1)
        grammars = self.grammars(observations)
        return scored_tokens(logits, targets, mask, self.cfg.temperature, grammars, self.tokens), mask


def _without_lora(state: dict) -> dict:
    """The base model's own weights from a LoRA-wrapped state dict."""
    return {k.replace(".base_layer.", "."): v for k, v in state.items() if "lora_" not in k}


def _is_peft(model) -> bool:
    return hasattr(model, "peft_config")


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
