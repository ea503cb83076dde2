"""Pooled BLIP-2 ViT features of screenshots, the image input of AutoUI and of DigiRL's step critic.

A vector is computed once per observation and cached in `Observation.features[FEATURE_KEY]`, which
is stored with the trajectories (and is what DigiRL's released data carries as `image_features`).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image
from transformers import Blip2VisionConfig, Blip2VisionModel

from rlsys.core.types import Observation
from rlsys.policies.feature_key import FEATURE_KEY
from rlsys.policies.hub import model_folder

CLIP_MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
CLIP_STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)
VISION_SEED = 0  # the tiny vision tower is not saved: every process must build the same one


def tiny_vision(feature_dim: int, image_size: int) -> Blip2VisionModel:
    vision_cfg = Blip2VisionConfig(
        hidden_size=feature_dim,
        intermediate_size=2 * feature_dim,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=image_size,
        patch_size=max(1, image_size // 4),
        initializer_range=0.1,  # small values (the default is 1e-10) make every screenshot look alike
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(VISION_SEED)
        return Blip2VisionModel(vision_cfg)


class PooledImageFeatures:
    """A frozen vision tower: `vision_path` (a Blip2VisionModel folder or Hub id) or a seeded tiny one."""

    def __init__(
        self,
        vision_path: str | None,
        feature_dim: int,
        image_size: int,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
    ):
        if vision_path:
            vision = Blip2VisionModel.from_pretrained(model_folder(vision_path, "vision_path"))
        else:
            vision = tiny_vision(feature_dim, image_size)
        if vision.config.hidden_size != feature_dim:
            raise ValueError(
                f"the vision encoder's hidden size ({vision.config.hidden_size}) must equal the image feature "
                f"size the model expects ({feature_dim}); check the configured vision_path and image_feature_dim"
            )
        self.model = vision.to(device=device, dtype=dtype).eval().requires_grad_(False)
        self.feature_dim = feature_dim
        self.device = device

    def _pixels(self, png: bytes) -> np.ndarray:
        size = self.model.config.image_size
        with Image.open(io.BytesIO(png)) as im:
            rgb = im.convert("RGB").resize((size, size), Image.BICUBIC)
        x = (np.asarray(rgb, dtype=np.float32) / 255.0 - CLIP_MEAN) / CLIP_STD
        return x.transpose(2, 0, 1)

    @torch.no_grad()
    def __call__(self, observations: Sequence[Observation]) -> torch.Tensor:
        """[B, feature_dim] on the tower's device; missing vectors are computed and cached on the observations."""
        missing = [o for o in observations if FEATURE_KEY not in o.features]
        if missing:
            if any(not o.screenshot_png for o in missing):
                raise ValueError(f"an observation has neither a screenshot nor a cached {FEATURE_KEY} feature")
            pixels = torch.from_numpy(np.stack([self._pixels(o.screenshot_png) for o in missing]))
            pooled = self.model(pixel_values=pixels.to(self.device, self.model.dtype)).pooler_output
            for obs, row in zip(missing, pooled.float().cpu().numpy()):
                obs.features[FEATURE_KEY] = row
        features = np.stack([np.asarray(o.features[FEATURE_KEY], dtype=np.float32) for o in observations])
        if features.shape[1] != self.feature_dim:
            raise ValueError(f"cached {FEATURE_KEY} has {features.shape[1]} values, not {self.feature_dim}")
        return torch.from_numpy(features).to(self.device)
