"""Prompt + screenshot -> model inputs for the VLM families, one sample at a time, then padded.

Encoding each sample alone and padding ourselves gives one code path for generation (left
padding) and teacher forcing (prompt + action, right padding), whatever the processor.
Qwen2-VL's processor also wants a video processor, which transformers can only build when
torchvision is installed; without it the image processor and tokenizer are used directly, with
the same placeholder expansion the processor does.
"""

from __future__ import annotations

import io
import os

import torch
from PIL import Image

QWEN_IMAGE_PAD = "<|image_pad|>"


def qwen2_vl_image_processor(**kwargs):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(**kwargs)


class VisionTextInputs:
    def __init__(self, processor=None, image_processor=None, tokenizer=None):
        self.processor = processor
        self.image_processor = image_processor if processor is None else processor.image_processor
        self.tokenizer = tokenizer if processor is None else processor.tokenizer
        self.image_token_id = (
            self.tokenizer.convert_tokens_to_ids(QWEN_IMAGE_PAD)
            if QWEN_IMAGE_PAD in self.tokenizer.get_vocab()
            else None
        )

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> VisionTextInputs:
        from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

        try:
            return cls(processor=AutoProcessor.from_pretrained(path))
        except (AttributeError, ImportError, TypeError, ValueError):  # Qwen2-VL without torchvision
            image_processor = AutoImageProcessor.from_pretrained(path)
            if not hasattr(image_processor, "merge_size"):
                raise
            return cls(image_processor=image_processor, tokenizer=AutoTokenizer.from_pretrained(path))

    def save_pretrained(self, path: str | os.PathLike) -> None:
        for part in (self.processor,) if self.processor is not None else (self.image_processor, self.tokenizer):
            part.save_pretrained(path)

    def chat(self, prompt: str) -> str:
        """The chat-formatted text of a user turn (image, then prompt), ready for the answer."""
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def encode(self, text: str, png: bytes) -> dict[str, torch.Tensor]:
        """Model inputs for one sample, each with a batch dimension of 1."""
        with Image.open(io.BytesIO(png)) as im:
            image = im.convert("RGB")
        if self.processor is not None:
            inputs = dict(self.processor(text=[text], images=[image], return_tensors="pt"))
        else:
            inputs = dict(self.image_processor(images=[image], return_tensors="pt"))
            merge = self.image_processor.merge_size**2
            count = int(inputs["image_grid_thw"][0].prod()) // merge
            text = text.replace(QWEN_IMAGE_PAD, QWEN_IMAGE_PAD * count, 1)
            inputs.update(self.tokenizer([text], return_tensors="pt", add_special_tokens=False))
            inputs["mm_token_type_ids"] = (inputs["input_ids"] == self.image_token_id).int()
        inputs.pop("token_type_ids", None)
        return inputs

    def batch(
        self, samples: list[dict[str, torch.Tensor]], side: str, suffixes: list[list[int]] | None = None
    ) -> tuple[dict[str, torch.Tensor], list[int]]:
        """Pad encoded samples (each optionally followed by suffix token ids) into one batch.
        Returns the batch and each row's prompt length."""
        suffixes = suffixes or [[] for _ in samples]
        pad_id = self.tokenizer.pad_token_id
        per_token = [k for k, v in samples[0].items() if v.dim() == 2 and v.shape[:2] == samples[0]["input_ids"].shape]
        lengths = [s["input_ids"].shape[1] + len(x) for s, x in zip(samples, suffixes)]
        width = max(lengths)
        out: dict[str, list] = {k: [] for k in samples[0]}
        out["attention_mask"] = []
        for sample, suffix, length in zip(samples, suffixes, lengths):
            pad = width - length
            for key, value in sample.items():
                if key == "attention_mask":
                    continue
                if key in per_token:
                    row = value[0]
                    tail = torch.tensor(suffix, dtype=row.dtype)
                    if key != "input_ids":
                        tail = torch.zeros(len(suffix), dtype=row.dtype)
                    filler = torch.full((pad,), pad_id if key == "input_ids" else 0, dtype=row.dtype)
                    row = torch.cat([filler, row, tail] if side == "left" else [row, tail, filler])
                    out[key].append(row)
                else:
                    out[key].append(value)
            ones, zeros = torch.ones(length, dtype=torch.long), torch.zeros(pad, dtype=torch.long)
            out["attention_mask"].append(torch.cat([zeros, ones] if side == "left" else [ones, zeros]))
        batch = {k: torch.stack(v) if k in per_token or k == "attention_mask" else torch.cat(v) for k, v in out.items()}
        return batch, [s["input_ids"].shape[1] for s in samples]

    def packed(
        self, samples: list[dict[str, torch.Tensor]], suffixes: list[list[int]]
    ) -> tuple[dict[str, torch.Tensor], list[int]]:
        """Encoded samples, each followed by its suffix token ids, as one row without padding or attention
        mask (the caller gives position ids that restart at each sample). Returns it and each sample's length."""
        per_token = [k for k, v in samples[0].items() if v.dim() == 2 and v.shape[:2] == samples[0]["input_ids"].shape]
        out: dict[str, list] = {k: [] for k in samples[0] if k != "attention_mask"}
        for sample, suffix in zip(samples, suffixes):
            for key in out:
                value = sample[key]
                if key in per_token:
                    tail = torch.tensor(suffix) if key == "input_ids" else torch.zeros(len(suffix))
                    out[key].append(torch.cat([value[0], tail.to(value.dtype)]))
                else:
                    out[key].append(value)
        batch = {k: torch.cat(v).unsqueeze(0) if k in per_token else torch.cat(v) for k, v in out.items()}
        return batch, [s["input_ids"].shape[1] + len(x) for s, x in zip(samples, suffixes)]
