"""An example method plugin: small-loss selection inside each batch (co-teaching style).

Each step computes every sample's own contrastive loss, keeps the ``keep`` share of the
batch with the smallest loss as clean, and trains on those rows only. Run it with
``cirbench run --plugin docs/examples/small_loss.py --methods small_loss,sprc``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cirbench.backbones.base import max_token_similarity
from cirbench.losses import per_sample_info_nce
from cirbench.method import Batch, Method, MethodConfig, StepOutput


@dataclass
class SmallLossConfig(MethodConfig):
    """Hyperparameters: ``--set small_loss.keep=0.6`` overrides one."""

    keep: float = 0.7
    temperature: float = 0.07


class SmallLoss(Method):
    """Trains on the smallest-loss share of every batch; reports that share as clean."""

    name = "small_loss"
    version = "1"
    paper = "example plugin (docs/adding-a-method.md)"
    Config = SmallLossConfig
    partitions = True

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        composed = self.backbone.composed_feature(batch.reference, batch.text)
        targets = self.backbone.target_features(batch.target)
        losses = per_sample_info_nce(max_token_similarity(composed, targets), self.config.temperature)
        n_keep = max(1, int(self.config.keep * len(batch)))
        threshold = losses.detach().kthvalue(n_keep).values
        clean = losses.detach() <= threshold
        loss = losses[clean].mean()
        return StepOutput(loss, {"kept_share": float(clean.float().mean())}, noise_score=losses.detach(), selected_clean=clean)
