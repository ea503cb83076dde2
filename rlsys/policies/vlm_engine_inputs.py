"""What a runner sends an inference engine that serves a vision-language policy (`policy.placement: vllm`):
the prompt's token ids exactly as `VLMPolicy` builds them for the learner (the agent prompt, the chat
template, the image placeholder expanded to the image's feature count) and the screenshot. No model
weights are loaded here.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForImageTextToText

from rlsys.config import PolicyConfig
from rlsys.core.types import Observation
from rlsys.policies.grammar_decoding import neutralize_special_tokens
from rlsys.policies.presets import PRESETS
from rlsys.policies.prompts import agent_prompt
from rlsys.policies.resolve import resolve
from rlsys.policies.vlm import language_model_linear_layers
from rlsys.policies.vlm_inputs import VisionTextInputs


def load_vision_inputs(cfg: PolicyConfig) -> VisionTextInputs:
    """The policy's tokenizer and image processor: the base's (`policy.path`), or the tiny preset's."""
    if not cfg.path:
        _, inputs = PRESETS[cfg.arch](cfg, 0)  # builds the tiny model too, which costs little
        return inputs
    base, _ = resolve(cfg)
    return VisionTextInputs.from_pretrained(base.folder)


def vlm_prompt_ids(inputs: VisionTextInputs, obs: Observation, template: str) -> list[int]:
    """The prompt's ids as the learner scores them (VLMPolicy's encoding of `obs`, without padding)."""
    prompt = neutralize_special_tokens(agent_prompt(obs, template), inputs.tokenizer)
    return inputs.encode(inputs.chat(prompt), obs.screenshot_png)["input_ids"][0].tolist()


def vlm_lora_settings(cfg: PolicyConfig, base_folder: str | Path) -> dict:
    """The adapter `policy.lora` puts on the VLM in `base_folder`, in peft's names: by default every linear
    layer of its language model, found on a model built on the meta device (no weights read)."""
    targets = cfg.lora.target_modules
    if not targets:
        with torch.device("meta"):
            model = AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(base_folder))
        targets = language_model_linear_layers(model)
    return {"r": cfg.lora.r, "lora_alpha": cfg.lora.alpha, "target_modules": sorted(targets)}
