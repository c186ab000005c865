"""Image preprocessing for pretrained towers, in torch: resize, rescale to [0, 1], normalise.

The real backbones read their settings from the checkpoint (BLIP-2's
``preprocessor_config.json``, open_clip's ``preprocess_cfg``) and apply them here, batched,
instead of through the libraries' per-image PIL pipelines. Resizing is antialiased, as
PIL's is when it shrinks an image, and the result is clamped to [0, 1] as 8-bit images are.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class ImagePrep:
    """One tower's preprocessing. ``resize_mode`` ``squash`` resizes to ``size`` exactly
    (BLIP's image processor); ``shortest`` resizes the shorter side to the crop size and
    centre-crops (open_clip's default)."""

    size: tuple[int, int]
    mean: tuple[float, float, float] = OPENAI_CLIP_MEAN
    std: tuple[float, float, float] = OPENAI_CLIP_STD
    resize_mode: Literal["squash", "shortest"] = "squash"
    interpolation: Literal["bicubic", "bilinear"] = "bicubic"

    def __post_init__(self) -> None:
        if self.resize_mode not in ("squash", "shortest"):
            raise ValueError(f"image preprocessing: unknown resize mode {self.resize_mode!r}; use squash or shortest")
        if self.interpolation not in ("bicubic", "bilinear"):
            raise ValueError(f"image preprocessing: unknown interpolation {self.interpolation!r}; use bicubic or bilinear")

    def describe(self) -> str:
        """A stable text form (part of a feature-cache key)."""
        return json.dumps(asdict(self), sort_keys=True)

    def _resize(self, pixels: torch.Tensor) -> torch.Tensor:
        height, width = pixels.shape[-2:]
        target_h, target_w = self.size
        if self.resize_mode == "squash":
            size = (target_h, target_w)
        else:
            scale = max(target_h / height, target_w / width)
            size = (max(target_h, round(height * scale)), max(target_w, round(width * scale)))
        if size != (height, width):
            pixels = F.interpolate(pixels, size=size, mode=self.interpolation, antialias=True, align_corners=False)
        if self.resize_mode == "shortest":
            top, left = (size[0] - target_h) // 2, (size[1] - target_w) // 2
            pixels = pixels[..., top : top + target_h, left : left + target_w]
        return pixels.clamp(0.0, 1.0)

    def __call__(self, images: list[np.ndarray]) -> torch.Tensor:
        """uint8 RGB arrays (H, W, 3), of one size or several -> (B, 3, H', W') float32."""
        if not images:
            raise ValueError("image preprocessing: no images given")
        for image in images:
            if image.ndim != 3 or image.shape[2] != 3:
                raise ValueError(f"image preprocessing: expected (H, W, 3) RGB arrays, got shape {image.shape}")
        to_float = lambda a: torch.from_numpy(np.ascontiguousarray(a)).permute(0, 3, 1, 2).float() / 255.0  # noqa: E731
        if len({image.shape for image in images}) == 1:
            pixels = self._resize(to_float(np.stack(images)))
        else:
            pixels = torch.cat([self._resize(to_float(image[None])) for image in images])
        mean = torch.tensor(self.mean).view(1, 3, 1, 1)
        std = torch.tensor(self.std).view(1, 3, 1, 1)
        return (pixels - mean) / std
