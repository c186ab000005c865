"""A template for a per-batch method: copy this file, rename the class, ``name`` and
``Config``, and replace the body of ``training_step`` with your method's math.

What it does (a small-loss filter with a learnable temperature): each step scores every
row of the batch by its own InfoNCE loss, keeps the ``keep`` share with the smallest loss
as clean, and trains on InfoNCE over the clean rows (every target of the batch stays a
negative) plus ``rcl_weight`` times the robust contrastive loss over all rows. Check it and
run it with::

    cirbench check-plugin docs/examples/template_per_batch.py
    cirbench run --plugin docs/examples/template_per_batch.py --methods template_per_batch,sprc --noise 0.5
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from cirbench.backbones.base import max_token_similarity
from cirbench.method.losses import per_sample_info_nce, robust_contrastive
from cirbench.method import Batch, Method, MethodConfig, StepOutput, TrainingContext
from cirbench.method.search import Distribution, Uniform


@dataclass
class TemplatePerBatchConfig(MethodConfig):
    """The method's hyperparameters (``--set template_per_batch.keep=0.6``); the optimiser's
    (``lr``, ``weight_decay``, ...) come from :class:`MethodConfig`."""

    search_space: ClassVar[dict[str, Distribution]] = {**MethodConfig.search_space, "keep": Uniform(0.5, 0.9)}

    keep: float = 0.7
    temperature: float = 0.07
    rcl_weight: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()  # checks the optimiser's fields
        if not 0.0 < self.keep <= 1.0:
            raise ValueError(f"keep={self.keep!r} is out of range: must be in (0, 1]")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature={self.temperature!r} is out of range: must be > 0 and finite")


class TemplatePerBatch(Method):
    """Small-loss selection in every batch with a learnable temperature (see the module docstring)."""

    name = "template_per_batch"
    version = "1"  # bump it whenever the numbers would change
    paper = "template (docs/adding-a-method.md)"
    Config = TemplatePerBatchConfig
    partitions = True  # it decides clean/noisy per sample: the harness records purity

    def __init__(self, backbone, config: TemplatePerBatchConfig, context: TrainingContext) -> None:
        super().__init__(backbone, config, context)  # first: it registers the backbone and keeps config and context
        # A parameter or module made here is trained with the backbone's composer (AdamW, same lr).
        self.log_temperature = nn.Parameter(torch.tensor(math.log(config.temperature)))

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        temperature = self.log_temperature.exp().clamp_min(0.01)
        queries = self.backbone.composed_feature(batch.reference, batch.text)  # (B, E)
        targets = self.backbone.target_features(batch.target)  # (B, Q, E)
        sim = max_token_similarity(queries, targets)  # (B, B): row i's own target on the diagonal
        per_row = per_sample_info_nce(sim, temperature)
        score = per_row.detach()  # higher = more likely noisy
        n_keep = max(1, round(self.config.keep * len(batch)))
        clean = score <= score.kthvalue(n_keep).values
        itc = per_row[clean].mean()
        rcl = robust_contrastive(sim, temperature)
        loss = itc + self.config.rcl_weight * rcl
        components = {"itc": float(itc.detach()), "rcl": float(rcl.detach()), "temperature": float(temperature.detach())}
        return StepOutput(loss, components, noise_score=score, selected_clean=clean)
