"""A template for an epoch-level method (a partition of the whole training split, like
TME's): copy this file, rename the class, ``name`` and ``Config``, and replace the
partition in ``on_epoch_start`` and the loss in ``training_step``.

What it does: before every epoch from ``warmup_epochs`` on, one pass over the training
split (``context.iterate``, no gradient, eval mode) gives every sample its InfoNCE loss
against the targets of its batch; the ``keep`` share with the smallest loss is the clean
set (TME fits a two-component GMM here instead). Each step then trains on the robust
contrastive loss of the clean rows of its batch, every target staying a negative. Check it
and run it with::

    cirbench check-plugin docs/examples/template_epoch.py
    cirbench run --plugin docs/examples/template_epoch.py --methods template_epoch,sprc --noise 0.5
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from cirbench.backbones.base import max_token_similarity
from cirbench.method.losses import per_sample_info_nce, per_sample_robust_contrastive
from cirbench.method import Batch, Method, MethodConfig, Partition, StepOutput, TrainingContext


@dataclass
class TemplateEpochConfig(MethodConfig):
    """The method's hyperparameters (``--set template_epoch.keep=0.6``)."""

    keep: float = 0.7
    temperature: float = 0.07
    warmup_epochs: int = 0  # epochs on every sample before the first partition (0: the start already ranks)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.keep <= 1.0 or self.warmup_epochs < 0:
            raise ValueError(f"keep={self.keep!r} must be in (0, 1] and warmup_epochs={self.warmup_epochs!r} >= 0")


class TemplateEpoch(Method):
    """A small-loss partition of the training split before every epoch (see the module docstring)."""

    name = "template_epoch"
    version = "1"
    paper = "template (docs/adding-a-method.md)"
    Config = TemplateEpochConfig
    partitions = True

    def __init__(self, backbone, config: TemplateEpochConfig, context: TrainingContext) -> None:
        super().__init__(backbone, config, context)
        # Per-sample state is indexed by a sample's position in the training split (Batch.index).
        self.clean = np.ones(context.num_train, dtype=bool)

    def on_epoch_start(self, epoch: int) -> Partition | None:
        if epoch < self.config.warmup_epochs:
            self.clean[:] = True
            return None  # no partition this epoch: every sample is trained on, no purity rows
        loss = np.full(self.context.num_train, np.nan)
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                for batch in self.context.iterate(True):
                    sim = max_token_similarity(self.backbone.composed_feature(batch.reference, batch.text),
                                               self.backbone.target_features(batch.target))
                    loss[batch.index.cpu().numpy()] = per_sample_info_nce(sim, self.config.temperature).cpu().numpy()
        finally:
            self.train(was_training)
        self.clean = loss <= np.quantile(loss, self.config.keep)
        score = (loss - loss.min()) / max(float(np.ptp(loss)), 1e-12)  # higher = more likely noisy
        return Partition(noise_score=score, selected_clean=self.clean.copy())

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        clean = torch.as_tensor(self.clean[batch.index.cpu().numpy()], device=batch.index.device)
        sim = max_token_similarity(self.backbone.composed_feature(batch.reference, batch.text),
                                   self.backbone.target_features(batch.target))
        per_row = per_sample_robust_contrastive(sim, self.config.temperature)
        loss = per_row[clean].sum() / clean.sum().clamp_min(1)
        return StepOutput(loss, {"rcl": float(loss.detach()), "kept_share": float(clean.float().mean())})
