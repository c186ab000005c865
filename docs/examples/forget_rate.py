"""An example method that reads the configured noise rate: small-loss selection with
Co-teaching's forget rate (Han et al., NeurIPS 2018), which assumes the noise rate known.

Each step forgets the ``forget_rate`` share of the batch with the largest loss and trains on
the rest, the forget rate being the cell's configured noise rate (``--noise``) times
``scale``. The rate is privileged information real data does not come with: the method
declares ``reads_noise_rate = True``, so the harness gives it ``context.noise_rate``, records
``reads_noise_rate`` in the runs table and marks the method "told the noise rate" in the
report. Run it with ``cirbench run --plugin docs/examples/forget_rate.py --methods
forget_rate,sprc``.
"""

from __future__ import annotations

from dataclasses import dataclass

from cirbench.backbones.base import max_token_similarity
from cirbench.method.losses import per_sample_info_nce
from cirbench.method import Batch, Method, MethodConfig, StepOutput


@dataclass
class ForgetRateConfig(MethodConfig):
    """``scale``: the forget rate as a share of the noise rate (Co-teaching: 1)."""

    scale: float = 1.0
    temperature: float = 0.07

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.scale <= 1.0:
            raise ValueError(f"scale={self.scale!r} is out of range: must be in [0, 1]")


class ForgetRate(Method):
    """Trains on the batch less its ``noise rate x scale`` share of largest losses."""

    name = "forget_rate"
    version = "1"
    paper = "example plugin: Co-teaching's forget rate, told the noise rate (docs/adding-a-method.md)"
    Config = ForgetRateConfig
    partitions = True
    reads_noise_rate = True  # the harness gives it context.noise_rate, and marks its results

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        forget = self.context.noise_rate * self.config.scale  # this cell's configured rate, e.g. 0.5
        composed = self.backbone.composed_feature(batch.reference, batch.text)
        targets = self.backbone.target_features(batch.target)
        losses = per_sample_info_nce(max_token_similarity(composed, targets), self.config.temperature)
        n_keep = max(1, round((1.0 - forget) * len(batch)))
        clean = losses.detach() <= losses.detach().kthvalue(n_keep).values
        loss = losses[clean].mean()
        return StepOutput(loss, {"forget_rate": forget}, noise_score=losses.detach(), selected_clean=clean)
