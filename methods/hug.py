"""HUG: heterogeneous uncertainty-guided CIR with fine-grained Gaussian embeddings
(Tang et al., AAAI 2026; equations as the release tanghme0w/AAAI26-HUG computes them).

A query and a target are each K Gaussians, one per composer query token; three uncertainty
heads give their variances, weighted per modality; the losses are the holistic sigmoid loss
on the expected distance (Eq. 13), the fine-grained loss (Eq. 16) and the coordination
loss; retrieval is one matrix product plus two rank-one terms. How each part follows the
paper and the release (units, normalisations, where they differ, the Table 3 switches) is
``docs/hug.md``, "How the code maps the paper".
"""

from __future__ import annotations

from typing import ClassVar, Literal

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cirbench.backbones.base import Backbone, TextBatch
from cirbench.settings.config import late_field
from cirbench.method.losses import info_nce
from cirbench.method import Batch, Method, MethodConfig, StepOutput, TrainingContext
from cirbench.method.search import Distribution, LogUniform
from cirbench_methods._hug_math import (  # the math, re-exported: tests and the parity adapter read it here
    UncertaintyHead, modality_weights, pack_gaussians, packed_distance, expected_distance,
    holistic_logits, holistic_contrast, fine_grained_contrast, fine_grained_release_parts, fine_grained_release,
    fine_grained_sigmoid, coordination_uncertainty, coordination_loss, derangement, mismatched_pairs,
)

_ABLATION_SWITCHES = (
    "probabilistic", "fc_component", "fc_instance", "fc_modality",
    "cross_modal", "coordination_loss", "dynamic_weighting",
)


def _row(**on: bool) -> dict[str, bool]:
    return {name: on.get(name, False) for name in _ABLATION_SWITCHES}


TABLE3_ROWS: dict[str, dict[str, bool]] = {
    "point_matching": _row(),
    "probabilistic": _row(probabilistic=True),
    "component": _row(probabilistic=True, fc_component=True),
    "instance": _row(probabilistic=True, fc_component=True, fc_instance=True),
    "modality": _row(probabilistic=True, fc_component=True, fc_instance=True, fc_modality=True),
    "cross_modal": _row(probabilistic=True, fc_component=True, fc_instance=True, fc_modality=True, cross_modal=True),
    "coordination": _row(
        probabilistic=True, fc_component=True, fc_instance=True, fc_modality=True, cross_modal=True,
        coordination_loss=True,
    ),
    "full": {name: True for name in _ABLATION_SWITCHES},
}
"""The rows of the paper's Table 3 (each adds to the one before) as ``HUGConfig`` switches;
``HUG.ablations`` makes them grid variants (``cirbench run --ablate hug``)."""


@dataclass
class HUGConfig(MethodConfig):
    """HUG's hyperparameters. Optimiser defaults follow the release where the harness has
    the knob (AdamW betas (0.9, 0.999), weight decay 0.01, gradient clipping 1.0; the
    paper's eps 1e-7); ``lr`` None is the backbone's default. ``head_dropout`` is 0, not the
    release's 0.1 (``docs/hug.md``)."""

    search_space: ClassVar[dict[str, Distribution]] = {
        **MethodConfig.search_space, "fc_weight": LogUniform(0.2, 1.0), "cord_weight": LogUniform(0.03, 0.3),
        "point_temperature": LogUniform(0.01, 0.1), "fc_temperature": LogUniform(0.01, 0.1),
    }
    release_readings: ClassVar[dict[str, object]] = {
        "gaussian_space": "states", "hc_form": "release", "init_b": 0.0, "learn_scale": False,
        "freeze_means": True, "fc_form": "release", "weighting_eps": 1e-6, "cord_reduce": "sum",
        "cord_pairs": 0, "cord_permutation": "randperm", "head_dropout": 0.1, "exact_query_variance": True,
        "eps": 1e-8,
    }
    """Where the port's defaults are not the release's code, its defects included (only the
    heads learn: ``freeze_means``, ``learn_scale``); ``docs/hug.md``, "Where we differ from the
    release"; ``benchmarks/parity/hug.py`` checks every comparable term under them."""

    beta2: float = 0.999
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    fc_weight: float = 0.5
    cord_weight: float = 0.1
    fc_temperature: float = 0.07
    cord_margin: float = 0.2
    cord_pairs: int = 16
    cord_reduce: str = "mean"
    init_a: float = 1.0
    init_b: float = -10.0
    fc_form: str = "sigmoid"
    fc_init_b: float = 0.0
    fc_negatives: str = "mean"
    head_heads: int = 4
    head_dropout: float = 0.0
    freeze_means: bool = False
    exact_query_variance: bool = False
    probabilistic: bool = True
    point_loss: str = "infonce"
    point_temperature: float = 0.07
    fc_component: bool = True
    fc_instance: bool = True
    fc_modality: bool = True
    fc_centre: bool = True
    cross_modal: bool = True
    coordination_loss: bool = True
    dynamic_weighting: bool = True
    heads_train_composer: bool = True
    gaussian_space: Literal["projected", "states"] = late_field("projected")
    """The Gaussians' space: ``projected``, unit-norm ``vision_proj`` means with the heads'
    variances in units of ``1 / embed_dim``; ``states``, the release's raw composer states as
    means (``hidden_size`` dimensions) and the heads' variances as they come."""
    hc_form: Literal["paper", "release"] = late_field("paper")
    """Eq. 13: ``paper``, negatives in both directions, ``log S``; ``release``, the query rows
    only (each query against the other targets) and ``log(S + 1e-8)``."""
    learn_scale: bool = late_field(True)
    """Whether Eq. 13's ``a`` and ``b`` learn (the release never gives them to its optimiser)."""
    weighting_eps: float = late_field(0.0)
    """The release's 1e-6 in the dynamic weighting's denominator and under the combined
    standard deviation's square root (``sqrt(v_q + eps)``); 0 is the paper's Eq. 10-11."""
    cord_permutation: Literal["derangement", "randperm"] = late_field("derangement")
    """How mismatched texts are drawn: a permutation without fixed points, or the release's
    ``torch.randperm``, which gives some samples their own text back."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.init_a <= 0:
            raise ValueError(f"hug: init_a must be > 0 (the scale is learnt as exp(log a)), got {self.init_a}")
        if self.fc_form not in ("sigmoid", "infonce", "release"):
            raise ValueError(f"hug: fc_form={self.fc_form!r} is not one of sigmoid, infonce, release")
        for name, allowed in (("gaussian_space", ("projected", "states")), ("hc_form", ("paper", "release")),
                              ("cord_permutation", ("derangement", "randperm"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"hug: {name}={getattr(self, name)!r} is not one of {', '.join(allowed)}")
        if not (math.isfinite(self.weighting_eps) and self.weighting_eps >= 0):
            raise ValueError(f"hug: weighting_eps must be >= 0, got {self.weighting_eps}")
        if self.fc_negatives not in ("mean", "sum"):
            raise ValueError(f"hug: fc_negatives={self.fc_negatives!r} is not one of mean, sum")
        if self.cord_reduce not in ("mean", "sum"):
            raise ValueError(f"hug: cord_reduce={self.cord_reduce!r} is not one of mean, sum")
        if self.point_loss not in ("infonce", "sigmoid"):
            raise ValueError(f"hug: point_loss={self.point_loss!r} is not one of infonce, sigmoid")
        if not self.point_temperature > 0:
            raise ValueError(f"hug: point_temperature must be > 0, got {self.point_temperature}")


class HUG(Method):
    """Heterogeneous uncertainty-guided Gaussian matching; see ``docs/hug.md``."""

    name = "hug"
    version = "5"
    paper = (
        "Tang et al., Heterogeneous Uncertainty-Guided Composed Image Retrieval with Fine-Grained "
        "Probabilistic Learning, AAAI 2026"
    )
    Config = HUGConfig
    scores_noise = True
    ablations = {row: dict(switches) for row, switches in TABLE3_ROWS.items() if row != "full"}
    ablation_noise = (0.0,)  # the paper's Table 3 is on the original (uninjected) Fashion-IQ

    def __init__(self, backbone: Backbone, config: HUGConfig, context: TrainingContext) -> None:
        super().__init__(backbone, config, context)
        hidden, self.embed_dim = backbone.hidden_size, backbone.embed_dim
        states = config.gaussian_space == "states"
        self.gaussian_dim = hidden if states else self.embed_dim
        self.variance_scale = 1.0 if states else 1.0 / self.embed_dim
        """The Gaussians' variance per head unit (``gaussian_space``)."""

        def head() -> UncertaintyHead:
            return UncertaintyHead(hidden, self.gaussian_dim, config.head_heads, config.head_dropout)

        self.visual_head, self.text_head, self.multimodal_head = head(), head(), head()
        self.log_a = nn.Parameter(torch.tensor(math.log(config.init_a)))
        self.b = nn.Parameter(torch.tensor(float(config.init_b)))
        self.fc_log_a = nn.Parameter(torch.tensor(0.0))
        self.fc_b = nn.Parameter(torch.tensor(float(config.fc_init_b)))
        if not config.learn_scale:
            self.log_a.requires_grad_(False)
            self.b.requires_grad_(False)

    @property
    def a(self) -> torch.Tensor:
        """The holistic contrast's scale ``exp(log_a)``, positive by construction."""
        return self.log_a.exp()

    def means(self, states: torch.Tensor) -> torch.Tensor:
        """Component means: ``vision_proj`` of query-token states, unit norm per component
        (``gaussian_space=states``: the states themselves)."""
        if self.config.gaussian_space == "states":
            return states
        return F.normalize(self.backbone.vision_proj(states), dim=-1)

    def _compose(self, image: torch.Tensor | None, text: TextBatch | None, grad: bool) -> torch.Tensor:
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            return self.backbone.compose(image, text).query

    def variances(
        self,
        reference: torch.Tensor,
        text: TextBatch,
        fused: torch.Tensor,
        mismatched: torch.Tensor | None = None,
        target: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Head-unit variances ``v = s**2`` (B, K, E): ``r`` (visual head on the reference's
        image-only pass), ``t`` (text head on a text-only pass), ``m`` (coordination head on
        the fused states ``fused``), their fusion ``q``, and, if given, ``m_mis`` (coordination
        head on ``mismatched`` fused states) and ``c`` (visual head on ``target`` states).
        Each head runs once, on all of its inputs together."""
        config = self.config
        live = config.heads_train_composer and not config.freeze_means  # the paper's end-to-end reading
        ref_states = self._compose(reference, None, grad=live)
        text_states = self._compose(None, text, grad=live)
        visual = self.visual_head(ref_states if target is None else torch.cat([ref_states, target])).square()
        out = {"r": visual[: len(ref_states)], "t": self.text_head(text_states).square()}
        if target is not None:
            out["c"] = visual[len(ref_states):]
        parts = [out["r"], out["t"]]
        if config.cross_modal:
            states = fused if mismatched is None else torch.cat([fused, mismatched])
            v_m = self.multimodal_head(states).square()
            out["m"] = v_m[: len(fused)]
            if mismatched is not None:
                out["m_mis"] = v_m[len(fused):]
            parts.append(out["m"])
        stacked = torch.stack(parts)
        out["q"] = (modality_weights(stacked, config.dynamic_weighting, config.weighting_eps) * stacked).sum(0)
        if config.weighting_eps:
            out["q"] = out["q"] + config.weighting_eps
        return out

    def losses(self, batch: Batch) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The unweighted loss terms of a batch (``hc``, and ``fc``, ``cord`` where enabled)
        and the per-sample scores by name: ``noise_score`` (``docs/hug.md``) and
        ``overall_uncertainty``, the mean variance of the query's combined components (the
        paper's ``||sigma||^2`` averaged over components, Fig. 4); none for point matching."""
        config = self.config
        train_means = not config.freeze_means
        fused = self._compose(batch.reference, batch.text, grad=train_means)
        target = self._compose(batch.target, None, grad=train_means)
        with torch.set_grad_enabled(train_means and torch.is_grad_enabled()):
            mu_q, mu_c = self.means(fused), self.means(target)
        if not config.probabilistic:
            return {"hc": self.point_matching_loss(mu_q, mu_c)}, {}
        mismatched, rows = None, None
        if config.cross_modal and config.coordination_loss:
            rows, texts = mismatched_pairs(len(batch), config.cord_pairs, batch.index.device, config.cord_permutation)
            mismatched = self._compose(
                batch.reference[rows], batch.text.select(texts), grad=train_means and config.heads_train_composer
            )
        if not config.heads_train_composer:
            fused, target = fused.detach(), target.detach()
        v = self.variances(batch.reference, batch.text, fused, mismatched, target)
        v_c = v["c"]
        scale = self.variance_scale
        distance = expected_distance(mu_q, v["q"] * scale, mu_c, v_c * scale)
        parts = {"hc": holistic_contrast(distance, self.a, self.b, config.hc_form)}
        if config.fc_component or config.fc_instance or config.fc_modality:
            groups = (config.fc_component, config.fc_instance, config.fc_modality)
            if config.fc_form == "release":
                parts["fc"] = fine_grained_release(
                    v["q"].sqrt(), v_c.sqrt(), config.fc_temperature, config.fc_component,
                    config.fc_instance or config.fc_modality,
                )
            elif config.fc_form == "sigmoid":
                parts["fc"] = fine_grained_sigmoid(
                    v["q"].sqrt(), v_c.sqrt(), self.fc_log_a.exp(), self.fc_b, *groups, negatives=config.fc_negatives
                )
            else:
                parts["fc"] = fine_grained_contrast(v["q"], v_c, config.fc_temperature, *groups, config.fc_centre)
        if mismatched is not None:
            matched = coordination_uncertainty(v["m"][rows], config.cord_reduce)
            parts["cord"] = coordination_loss(
                matched, coordination_uncertainty(v["m_mis"], config.cord_reduce), config.cord_margin
            )
        scores = {
            "noise_score": (v["m"] if config.cross_modal else v["q"]).detach().mean((1, 2)),
            "overall_uncertainty": v["q"].detach().mean((1, 2)),
        }
        return parts, scores

    def point_matching_loss(self, mu_q: torch.Tensor, mu_c: torch.Tensor) -> torch.Tensor:
        """Table 3 row 0 (``probabilistic`` off) on component means (B, K, E): InfoNCE on
        ``-d / (2K)`` at ``point_temperature`` (the paper), or Eq. 13 without variances
        (``point_loss=sigmoid``); see ``docs/hug.md``."""
        zeros = torch.zeros_like(mu_q)
        distance = expected_distance(mu_q, zeros, mu_c, zeros)
        if self.config.point_loss == "sigmoid":
            return holistic_contrast(distance, self.a, self.b)
        return info_nce(-distance / (2 * mu_q.shape[1]), self.config.point_temperature)

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        parts, scores = self.losses(batch)
        config = self.config
        loss = parts["hc"] + config.fc_weight * parts.get("fc", 0.0) + config.cord_weight * parts.get("cord", 0.0)
        components = {k: float(t.detach()) for k, t in parts.items()}
        components.update(a=float(self.a.detach()), b=float(self.b.detach()))
        noise_score = scores.pop("noise_score", None)
        return StepOutput(loss, components, noise_score=noise_score, extra_scores=scores)

    def gaussian_variance(self, variances: torch.Tensor) -> torch.Tensor:
        """Head-unit variances in the Gaussians' space (``gaussian_space``)."""
        return variances if self.config.gaussian_space == "states" else variances / self.embed_dim

    def encode_queries(self, reference: torch.Tensor, text: TextBatch) -> torch.Tensor:
        """Packed query Gaussians (N, K * E + 1); the query's own variance only with
        ``exact_query_variance`` (it shifts all of a query's scores equally)."""
        fused = self.backbone.compose(reference, text).query
        mu = self.means(fused)
        if self.config.probabilistic and self.config.exact_query_variance:
            var = self.gaussian_variance(self.variances(reference, text, fused)["q"])
        else:
            var = torch.zeros_like(mu)
        return pack_gaussians(mu, var)

    def encode_targets(self, images: torch.Tensor) -> torch.Tensor:
        """Packed target Gaussians (M, K * E + 1): image-only means, visual-head variances."""
        states = self.backbone.compose(images, None).query
        mu = self.means(states)
        if self.config.probabilistic:
            var = self.gaussian_variance(self.visual_head(states).square())
        else:
            var = torch.zeros_like(mu)
        return pack_gaussians(mu, var)

    def similarity(self, queries: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Minus the expected squared distance (N, M): higher is better."""
        return -packed_distance(queries, targets)
