"""SPRC-style ordinary baseline (Bai et al., ICLR 2024): no defence against noisy triplets.

Losses, as in the public SPRC code: ``itc`` (cross-entropy of the composed query against
the max-over-tokens target features), ``rtc`` (the same for a query built from learnable
prompt tokens and the text, without the image) and ``align`` (MSE between the mean fused
query tokens and the mean detached prompt tokens), with a learnable temperature from 0.07.

Each step also reports every sample's own ``itc`` loss as its noise score. SPRC does nothing
with it; it is recorded so that every grid measures the premise of the small-loss methods
(TME's GMM, ConeSep's fidelity): how well the ordinary baseline's loss separates noisy from
clean triplets, per epoch and per noise type (``cirbench calibrate``).

Difference from the release: the composed feature is the classification-token output of
one composer pass (queries + text + reference); SPRC runs a second text-only pass with the
fused query outputs as its prompt. The single pass is what TME and ConeSep use, and it
keeps every method on the same encoder, so the comparison isolates the training objective.
The release's readings are switches (``docs/sprc.md``, "Where we differ from the release";
``--set sprc.readings=release`` turns them all on): ``composition=two_pass`` (its second
pass, in training and retrieval), ``temperature_parameter=linear`` (it learns the
temperature itself, not its logarithm), ``min_temperature=0`` (no clamp) and
``prompt_init=normal`` (prompt tokens drawn from N(0, 0.02^2), not copied from the query tokens).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cirbench.backbones.base import ComposerOutput, TextBatch, max_token_similarity
from cirbench.settings.config import late_field
from cirbench.method.losses import per_sample_info_nce
from cirbench.method import Batch, Method, MethodConfig, StepOutput
from cirbench.method.search import Distribution, LogUniform


@dataclass
class SPRCConfig(MethodConfig):
    """SPRC's hyperparameters: the release's CIRR weights (its FashionIQ runs use 1 and 1).
    On ``shapes`` the lighter text-only terms let the composed query learn faster."""

    search_space: ClassVar[dict[str, Distribution]] = {
        **MethodConfig.search_space, "rtc_weight": LogUniform(0.1, 1.0), "align_weight": LogUniform(0.1, 1.0),
        "temperature": LogUniform(0.01, 0.1),
    }

    release_readings: ClassVar[dict[str, object]] = {
        "composition": "two_pass", "temperature_parameter": "linear", "min_temperature": 0.0, "prompt_init": "normal",
    }
    """``chunmeifeng/SPRC``'s ``blip2_qformer_cir_align_prompt.py`` (docs/sprc.md); its CIRR loss
    weights are the defaults already (its FashionIQ script weighs every term 1)."""

    temperature: float = 0.07
    rtc_weight: float = 0.4
    align_weight: float = 0.4
    composition: Literal["one_pass", "two_pass"] = late_field("one_pass")
    """``itc``'s composed feature (and retrieval's): the classification token of the joint pass
    (``one_pass``), or, as released, of a second text-only pass whose queries are the joint
    pass's query outputs (``two_pass``)."""
    temperature_parameter: Literal["log", "linear"] = late_field("log")
    """What the optimiser learns: the temperature's logarithm, or (as released) the temperature."""
    learn_temperature: bool = late_field(True)
    """False: the temperature stays at ``temperature`` (the ``fixed_temperature`` variant, at SSN's
    0.01: does SSN's lead come from its fixed sharp scale? docs/ssn.md)."""
    min_temperature: float = late_field(0.01)
    """The temperature's lower clamp; 0: none (as released)."""
    prompt_init: Literal["query_tokens", "normal"] = late_field("query_tokens")
    """The prompt tokens' start: a copy of the backbone's query tokens, or (as released) a
    draw from N(0, 0.02^2), BERT's ``initializer_range``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"sprc: temperature must be > 0 and finite, got {self.temperature}")
        if not (math.isfinite(self.min_temperature) and self.min_temperature >= 0):
            raise ValueError(f"sprc: min_temperature must be >= 0 and finite (0: no clamp), got {self.min_temperature}")


class SPRC(Method):
    """The ordinary baseline; see the module docstring."""

    name = "sprc"
    version = "2"
    paper = "Bai et al., Sentence-level Prompts Benefit Composed Image Retrieval, ICLR 2024"
    Config = SPRCConfig
    role = "baseline"  # the report compares every robust method with it (cirbench.results.roles)
    ablations = {  # the temperature question of issue 76: sprc held at SSN's fixed temperature (docs/ssn.md)
        "fixed_temperature": {"learn_temperature": False, "temperature": 0.01},
    }
    ablation_noise = (0.5, 0.8)
    scores_noise = True  # its per-sample loss: the small-loss premise, measured (see the module docstring)

    def __init__(self, backbone, config: SPRCConfig, context) -> None:
        super().__init__(backbone, config, context)
        start = backbone.query_tokens.detach().clone()
        if config.prompt_init == "normal":
            start = start.normal_(0.0, 0.02)
        self.prompt_tokens = nn.Parameter(start)
        value = math.log(config.temperature) if config.temperature_parameter == "log" else float(config.temperature)
        name = "log_temperature" if config.temperature_parameter == "log" else "raw_temperature"
        if config.learn_temperature:
            setattr(self, name, nn.Parameter(torch.tensor(value)))
        else:  # held fixed: a buffer, so the optimiser never sees it
            self.register_buffer(name, torch.tensor(value))

    @property
    def temperature(self) -> torch.Tensor:
        """The learnable temperature, clamped at ``min_temperature`` from below (0.01; 0: no clamp)."""
        if self.config.temperature_parameter == "log":
            value = self.log_temperature.exp()
        else:
            value = self.raw_temperature
        return value.clamp_min(self.config.min_temperature) if self.config.min_temperature > 0 else value

    def composed(self, reference: torch.Tensor, text: TextBatch, fused: ComposerOutput | None = None) -> torch.Tensor:
        """The composed query feature (B, E) of ``composition``, from the joint pass ``fused``
        (computed when None)."""
        if fused is None:
            fused = self.backbone.compose(reference, text)
        if self.config.composition == "two_pass":
            return self.backbone.composed_feature(None, text, queries=fused.query)
        return F.normalize(self.backbone.text_proj(fused.text[:, 0]), dim=-1)

    def encode_queries(self, reference: torch.Tensor, text: TextBatch) -> torch.Tensor:
        """The composed query feature of ``composition`` (``one_pass``: the backbone's own)."""
        if self.config.composition == "one_pass":
            return super().encode_queries(reference, text)
        return self.composed(reference, text)

    def per_sample_losses(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The three SPRC loss terms of every sample of a batch (B,), each row contrasted
        against every target of the batch."""
        fused = self.backbone.compose(batch.reference, batch.text)
        composed = self.composed(batch.reference, batch.text, fused)
        targets = self.backbone.target_features(batch.target)
        prompt_query = self.backbone.composed_feature(None, batch.text, queries=self.prompt_tokens)
        return {
            "itc": per_sample_info_nce(max_token_similarity(composed, targets), self.temperature),
            "rtc": per_sample_info_nce(max_token_similarity(prompt_query, targets), self.temperature),
            "align": (fused.query.mean(1) - self.prompt_tokens.detach().mean(1)).pow(2).mean(1),
        }

    def sprc_step(self, batch: Batch, rows: torch.Tensor | None = None) -> StepOutput:
        """SPRC's loss averaged over ``rows`` (a boolean mask; None: every row), with every
        target of the batch as a negative, and each sample's ``itc`` loss as its score."""
        parts = self.per_sample_losses(batch)
        score = parts["itc"].detach()
        if rows is not None:
            parts = {k: v[rows] for k, v in parts.items()}
        mean = {k: v.mean() if len(v) else v.sum() for k, v in parts.items()}  # no row: a zero loss, no update
        loss = mean["itc"] + self.config.rtc_weight * mean["rtc"] + self.config.align_weight * mean["align"]
        return StepOutput(loss, {k: float(v.detach()) for k, v in mean.items()}, noise_score=score)

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        return self.sprc_step(batch)
