"""Reference rows: what the starting model does with no fine-tuning, and with half its input.

Like the image-only and text-only baselines of the CIRR paper, three rankings of the
validation gallery with the backbone a cell starts from, before any training:

- ``zero_shot``: the composed query (reference image + text), as fine-tuning starts;
- ``text_blind``: the reference image alone (its image-only embedding, the mean of its
  query-token features), so the best a model that ignores the text could do at the start;
- ``text_only``: the text alone (a composer pass without the image).

They need no training and no noise, so they are computed once per setting and seed, stored
as runs flagged ``is_reference`` (noise rate NaN), drawn as reference lines and never ranked.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cirbench.backbones.base import TextBatch
from cirbench.method import Batch, Method, StepOutput
from cirbench.results.labels import TEXT_BLIND_ROW, TEXT_ONLY_ROW, ZERO_SHOT_ROW


class _Untrained(Method):
    """A ranking from the starting backbone; it cannot be trained."""

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        raise TypeError(f"{self.name} is a reference row: it is evaluated, never trained")


class ZeroShot(_Untrained):
    """The starting model's composed query."""

    name = ZERO_SHOT_ROW
    paper = "reference row: the starting model, not fine-tuned"


class TextBlind(_Untrained):
    """The reference image's own embedding as the query."""

    name = TEXT_BLIND_ROW
    paper = "reference row: the reference image alone (starting model)"

    def encode_queries(self, reference: torch.Tensor, text: TextBatch) -> torch.Tensor:
        return F.normalize(self.backbone.target_features(reference).mean(1), dim=-1)


class TextOnly(_Untrained):
    """The modification text alone as the query."""

    name = TEXT_ONLY_ROW
    paper = "reference row: the modification text alone (starting model)"

    def encode_queries(self, reference: torch.Tensor, text: TextBatch) -> torch.Tensor:
        return self.backbone.composed_feature(None, text)


REFERENCE_ROWS: dict[str, type[Method]] = {cls.name: cls for cls in (ZeroShot, TextBlind, TextOnly)}
