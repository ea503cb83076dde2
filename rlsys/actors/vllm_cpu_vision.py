"""A vLLM plugin that lets vLLM's CPU build serve Qwen2-VL without torchvision.

vLLM loads every `vllm.general_plugins` entry point in each of its processes (the engine, its core,
its workers, the subprocess that inspects a model class) before it touches a model; scripts/setup-vllm.sh
registers `register` below as one. Where torchvision imports (a GPU build), it does nothing.

Without torchvision, two things stop vLLM's Qwen2-VL on transformers 5.19, and neither is about
images as such: vLLM's model file imports `smart_resize` from transformers' torchvision image
processor module (the PIL module has the same function), and `Qwen2VLProcessor` will not load
without a video processor, which transformers builds only with torchvision. So the first module
is given as the PIL processor's, and the processor is one without video (the engines take images
alone: `limit_mm_per_prompt` allows no video). Images then go through `Qwen2VLImageProcessorPil`,
the processor rlsys's learner uses without torchvision (rlsys/policies/vlm_inputs.py).

The patches wait for the first import of vLLM's Qwen2-VL model file, so engines serving other models
import nothing more. This module runs in the vLLM environment only.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import types

TORCHVISION_PROCESSOR_MODULE = "transformers.models.qwen2_vl.image_processing_qwen2_vl"
VLLM_QWEN2_VL = "vllm.model_executor.models.qwen2_vl"  # Qwen2.5-VL's model file imports it too


def register() -> None:
    waiting = any(isinstance(finder, _BeforeQwen2VL) for finder in sys.meta_path)
    if importlib.util.find_spec("torchvision") is None and not waiting:
        sys.meta_path.insert(0, _BeforeQwen2VL())


class _BeforeQwen2VL(importlib.abc.MetaPathFinder):
    """Patches transformers when vLLM's Qwen2-VL model file is first imported, then lets the import go on."""

    def find_spec(self, name, path=None, target=None):
        if name == VLLM_QWEN2_VL:
            sys.meta_path.remove(self)
            _patch_transformers()
        return None


def _patch_transformers() -> None:
    import transformers.models.qwen2_vl as qwen2_vl
    from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as pil

    module = types.ModuleType(TORCHVISION_PROCESSOR_MODULE, "Qwen2-VL's image processor, on PIL")
    module.smart_resize = pil.smart_resize
    module.Qwen2VLImageProcessor = pil.Qwen2VLImageProcessorPil
    sys.modules[TORCHVISION_PROCESSOR_MODULE] = module
    qwen2_vl.Qwen2VLProcessor = _processor_without_video(qwen2_vl.Qwen2VLProcessor)


def _processor_without_video(processor_class: type) -> type:
    """`processor_class` with an image processor and a tokenizer only. vLLM reads the video processor's
    valid keyword arguments and merge size whatever the limits, so it gets an empty stand-in."""
    from typing import TypedDict

    class NoVideoKwargs(TypedDict, total=False):
        pass

    class ImageOnlyProcessor(processor_class):
        # transformers loads the sub-processors that __init__ names: image processor and tokenizer
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
            self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            super(processor_class, self).__init__(image_processor, tokenizer, chat_template=chat_template)
            self.video_processor = types.SimpleNamespace(
                valid_kwargs=NoVideoKwargs, merge_size=image_processor.merge_size
            )

    ImageOnlyProcessor.__name__ = ImageOnlyProcessor.__qualname__ = processor_class.__name__
    return ImageOnlyProcessor
