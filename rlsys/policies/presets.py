"""Tiny models of each VLM family built from configs, with a tokenizer that needs no download.

Each returns the model and its `VisionTextInputs`. They load and save exactly like the released
models (`AutoModelForImageTextToText`, `AutoProcessor`), so tests and CPU runs go through the same
code as a 7B checkpoint.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rlsys.config import PolicyConfig
from rlsys.policies.vlm_inputs import VisionTextInputs, qwen2_vl_image_processor

IMAGE_TOKENS = {"llava": "<image>", "qwen2_vl": "<|vision_start|><|image_pad|><|vision_end|>"}
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>", "<image>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"]
SPECIAL_TOKENS += ["<|video_pad|>"]


def chat_template(arch: str) -> str:
    image = IMAGE_TOKENS[arch]
    return (
        "{% for m in messages %}{% if m['role'] == 'user' %}USER: "
        "{% for c in m['content'] %}{% if c['type'] == 'image' %}" + image + "\n"
        "{% else %}{{ c['text'] }}{% endif %}{% endfor %}\n"
        "{% else %}ASSISTANT: {{ m['content'][0]['text'] }}</s>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
    )


def byte_tokenizer(arch: str) -> PreTrainedTokenizerFast:
    """One token per byte plus the special tokens both families need."""
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for char in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[char] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    tokenizer.chat_template = chat_template(arch)
    return tokenizer


def _text_config(cfg: PolicyConfig, tokenizer) -> dict:
    return dict(
        vocab_size=len(tokenizer),
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=max(1, cfg.num_heads // 2),
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def tiny_llava(cfg: PolicyConfig, seed: int):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    tokenizer = byte_tokenizer("llava")
    patch = max(1, cfg.image_size // 4)
    vision = CLIPVisionConfig(
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ff,
        num_hidden_layers=1,
        num_attention_heads=cfg.num_heads,
        image_size=cfg.image_size,
        patch_size=patch,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=LlamaConfig(**_text_config(cfg, tokenizer)),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_layer=-1,
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config)
    size = {"height": cfg.image_size, "width": cfg.image_size}
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessorPil(size=size, crop_size=size, do_center_crop=False),
        tokenizer=tokenizer,
        patch_size=patch,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=tokenizer.chat_template,
    )
    return model, VisionTextInputs(processor)


def tiny_qwen2_vl(cfg: PolicyConfig, seed: int):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    tokenizer = byte_tokenizer("qwen2_vl")
    head_dim = cfg.d_model // cfg.num_heads
    section = [head_dim // 8, head_dim // 8 * 3 // 2]
    section.append(head_dim // 2 - sum(section))  # t, h, w rotary sections add up to head_dim / 2
    ids = tokenizer.convert_tokens_to_ids
    config = Qwen2VLConfig(
        text_config=_text_config(cfg, tokenizer) | {"rope_scaling": {"type": "mrope", "mrope_section": section}},
        vision_config=dict(
            depth=1, embed_dim=cfg.d_model // 2, hidden_size=cfg.d_model, num_heads=cfg.num_heads, mlp_ratio=2
        ),
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        **{k: v for k, v in _text_config(cfg, tokenizer).items() if k.endswith("token_id")},
    )
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config)
    pixels = max(cfg.image_size, 56) ** 2
    image_processor = qwen2_vl_image_processor(min_pixels=pixels, max_pixels=pixels)
    return model, VisionTextInputs(image_processor=image_processor, tokenizer=tokenizer)


PRESETS = {"llava": tiny_llava, "qwen2_vl": tiny_qwen2_vl}
