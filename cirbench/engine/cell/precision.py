"""Mixed precision for one cell: the backbone's heavy passes in bfloat16, everything else
in float32.

``bf16`` autocasts the backbone's :meth:`~cirbench.backbones.base.Backbone.compose` and
``encode_image_tokens`` (the transformer layers, where the time and memory go) and hands
their outputs back as float32. A method's projections, similarity matrices, losses, noise
scores and partitions, the parameters, gradients and the optimiser all stay float32:
autocasting a whole training step instead puts similarities in bfloat16, whose 8-bit
mantissa moves a softmax at temperature 0.07 by several percent and ties retrieval scores.
"""

from __future__ import annotations

import torch

from cirbench.backbones.base import Backbone, ComposerOutput, TextBatch

PRECISIONS = ("fp32", "bf16")


def use_precision(backbone: Backbone, device: torch.device, precision: str) -> None:
    """Make ``backbone`` (this instance) run its composer and tower under ``precision``
    (see the module docstring); ``fp32`` leaves it untouched."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if precision == "fp32" or getattr(backbone, "_cirbench_precision", None) == precision:
        return
    compose, encode = backbone.compose, backbone.encode_image_tokens

    def compose_bf16(image_tokens: torch.Tensor | None, text: TextBatch | None, queries: torch.Tensor | None = None) -> ComposerOutput:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = compose(image_tokens, text, queries)
        return ComposerOutput(out.query.float(), None if out.text is None else out.text.float())

    def encode_bf16(pixels: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            return encode(pixels).float()

    backbone.compose = compose_bf16  # type: ignore[method-assign]
    backbone.encode_image_tokens = encode_bf16  # type: ignore[method-assign]
    backbone._cirbench_precision = precision
