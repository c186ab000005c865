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
from cirbench.config import late_field
from cirbench.losses import info_nce
from cirbench.method import Batch, Method, MethodConfig, StepOutput, TrainingContext
from cirbench.search import Distribution, LogUniform

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


class UncertaintyHead(nn.Module):
    """One TransformerEncoderLayer, then Linear-GELU-Dropout-Linear-Softplus: composer
    query-token states (B, K, hidden) -> standard deviations (B, K, out_dim), positive."""

    def __init__(self, hidden: int, out_dim: int, heads: int = 4, dropout: float = 0.1) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"HUG uncertainty head: hidden size {hidden} is not divisible by {heads} attention heads")
        self.encoder = nn.TransformerEncoderLayer(
            hidden, heads, dim_feedforward=4 * hidden, dropout=dropout, activation="gelu", batch_first=True
        )
        self.mlp = nn.Sequential(
            nn.Linear(hidden, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, out_dim), nn.Softplus()
        )

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        """Standard deviations (B, K, out_dim) of the states (B, K, hidden)."""
        return self.mlp(self.encoder(states))


def modality_weights(variances: torch.Tensor, dynamic: bool = True, eps: float = 0.0) -> torch.Tensor:
    """Fusion weights over the leading (modality) axis of ``variances`` (X, ...):
    ``softmax_x(-v_x)`` elementwise if ``dynamic``, else ``1 / X`` everywhere. ``eps`` > 0 is
    the release's ``exp(-v_x) / (sum_y exp(-v_y) + eps)``."""
    if dynamic and eps:
        weights = torch.exp(-variances)
        return weights / (weights.sum(0, keepdim=True) + eps)
    if dynamic:
        return torch.softmax(-variances, dim=0)
    return torch.full_like(variances, 1.0 / variances.shape[0])


def pack_gaussians(means: torch.Tensor, variances: torch.Tensor) -> torch.Tensor:
    """Gaussians (N, K, E) means and variances -> (N, K * E + 1): the flattened means and,
    last, ``||mu||^2 + sum var``, everything the expected distance needs from one side."""
    if means.shape != variances.shape:
        raise ValueError(f"pack_gaussians: means {tuple(means.shape)} and variances {tuple(variances.shape)} differ")
    flat = means.flatten(1)
    return torch.cat([flat, (flat.square().sum(1) + variances.flatten(1).sum(1)).unsqueeze(1)], dim=1)


def packed_distance(queries: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Expected squared distance (N, M) between packed Gaussians: one matrix product of the
    flattened means plus the two rank-one norm-and-variance terms."""
    if queries.dim() != 2 or targets.dim() != 2 or queries.shape[1] != targets.shape[1]:
        raise ValueError(
            f"HUG similarity: packed queries {tuple(queries.shape)} and targets {tuple(targets.shape)} must be "
            "(N, D) and (M, D) with the same D (from HUG's encode_queries/encode_targets)"
        )
    cross = queries[:, :-1] @ targets[:, :-1].T
    return queries[:, -1:] + targets[:, -1].unsqueeze(0) - 2.0 * cross


def expected_distance(
    mu_q: torch.Tensor, var_q: torch.Tensor, mu_c: torch.Tensor, var_c: torch.Tensor
) -> torch.Tensor:
    """``E ||z_q - z_c||^2`` for all query/target pairs of diagonal Gaussians (N, K, E) and
    (M, K, E): ``sum (mu_q - mu_c)^2 + sum var_q + sum var_c`` over components and dims."""
    return packed_distance(pack_gaussians(mu_q, var_q), pack_gaussians(mu_c, var_c))


def holistic_logits(distance: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The logits ``a d + b`` of Eq. 13 (low for a match, high for a non-match)."""
    return a * distance + b


def holistic_contrast(distance: torch.Tensor, a: torch.Tensor, b: torch.Tensor, form: str = "paper") -> torch.Tensor:
    """Paper Eq. 13 on a (B, B) distance matrix whose diagonal holds the positives:
    ``-log S(-a d - b)`` per positive and ``-log S(a d + b)`` per negative, the negatives
    counted once per direction (row: query vs other targets, column: target vs other
    queries), the sum divided by the batch size. ``form="release"``: each query's row only
    (the negatives counted once) and ``log(S + 1e-8)``, as the release computes it."""
    n = distance.shape[0]
    off = ~torch.eye(n, dtype=torch.bool, device=distance.device)
    logits = holistic_logits(distance, a, b)
    if form == "release":
        positive = torch.log(torch.sigmoid(-logits.diagonal()) + 1e-8).sum()
        negative = (torch.log(torch.sigmoid(logits) + 1e-8) * off).sum()
        return -(positive + negative) / n
    if form != "paper":
        raise ValueError(f"holistic_contrast: form={form!r} is not one of paper, release")
    positive = F.logsigmoid(-logits.diagonal()).sum()
    negative = (F.logsigmoid(logits) * off).sum()
    return -(positive + 2.0 * negative) / n


def fine_grained_contrast(
    var_q: torch.Tensor,
    var_c: torch.Tensor,
    temperature: float,
    component: bool = True,
    instance: bool = True,
    modality: bool = True,
    centre: bool = True,
) -> torch.Tensor:
    """InfoNCE on variance vectors (B, K, E) of matched queries and targets; every
    component of either side is an anchor whose positive is the same component of its
    partner. Negatives (each group a switch): component-wise, the other components of the
    same query and target; instance-wise, the same component of the other samples on the
    anchor's side; modality-wise, the same component of the other samples on the other
    side. With ``centre`` each side's batch mean is subtracted per component before the
    cosine, so the contrast is between samples' own uncertainty patterns rather than the
    head's shared offset. Batched products only; masked pairs get -inf."""
    s = torch.stack([var_q, var_c])  # (2 sides, B, K, E)
    if centre:
        s = s - s.mean(dim=1, keepdim=True)
    s = F.normalize(s, dim=-1)
    sides, n, k, _ = s.shape
    logits = [(s[0] * s[1]).sum(-1).unsqueeze(0).expand(sides, n, k).unsqueeze(-1)]
    if component:
        sim = torch.einsum("mbkd,nbld->mbknl", s, s)  # anchor (m, b, k) vs (n, b, l)
        same = torch.eye(k, dtype=torch.bool, device=s.device).view(1, 1, k, 1, k)
        logits.append(sim.masked_fill(same, float("-inf")).flatten(-2))
    other = ~torch.eye(n, dtype=torch.bool, device=s.device).view(1, n, 1, n)
    if instance:
        sim = torch.einsum("mikd,mjkd->mikj", s, s)
        logits.append(sim.masked_fill(~other, float("-inf")))
    if modality:
        sim = torch.einsum("mikd,mjkd->mikj", s, s.flip(0))
        logits.append(sim.masked_fill(~other, float("-inf")))
    rows = torch.cat(logits, dim=-1).flatten(0, 2) / temperature
    return F.cross_entropy(rows, torch.zeros(rows.shape[0], dtype=torch.long, device=rows.device))


def fine_grained_release_parts(
    std_q: torch.Tensor, std_c: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The release's two InfoNCE parts of its fine-grained loss, on standard-deviation vectors
    (B, K, E), every vector L2-normalised; only query components are anchors. Component-wise
    (B, K): anchor ``q_ik``, positive ``c_ik``, negatives the other K - 1 components of
    ``q_i`` and of ``c_i``. In-batch (K,): for component k, the mean over i of the
    cross-entropy of ``q_ik`` against ``c_jk`` for every j (positive j = i)."""
    q, c = F.normalize(std_q, dim=-1), F.normalize(std_c, dim=-1)
    _, k, _ = q.shape
    positive = (q * c).sum(-1, keepdim=True)  # (B, K, 1)
    same = torch.eye(k, dtype=torch.bool, device=q.device)
    to_q = torch.einsum("bkd,bld->bkl", q, q).masked_fill(same, float("-inf"))
    to_c = torch.einsum("bkd,bld->bkl", q, c).masked_fill(same, float("-inf"))
    logits = torch.cat([positive, to_q, to_c], dim=-1) / temperature
    component = -torch.log_softmax(logits, dim=-1)[..., 0]
    batch = torch.einsum("ikd,jkd->kij", q, c) / temperature  # (K, B, B)
    instance = -torch.log_softmax(batch, dim=-1).diagonal(dim1=1, dim2=2).mean(-1)
    return component, instance


def fine_grained_release(
    std_q: torch.Tensor, std_c: torch.Tensor, temperature: float, component: bool = True, instance: bool = True
) -> torch.Tensor:
    """The release's fine-grained loss (``fc_form=release``): the sum of its component-wise
    cross-entropies (one per query component of each sample) and of its in-batch ones (one per
    component) divided by their count, B K + K (:func:`fine_grained_release_parts`)."""
    parts = fine_grained_release_parts(std_q, std_c, temperature)
    kept = [p for p, on in zip(parts, (component, instance)) if on]
    if not kept:
        raise ValueError("fine_grained_release: neither part is on")
    return sum(p.sum() for p in kept) / sum(p.numel() for p in kept)


def fine_grained_sigmoid(
    std_q: torch.Tensor,
    std_c: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    component: bool = True,
    instance: bool = True,
    modality: bool = True,
    negatives: str = "mean",
) -> torch.Tensor:
    """Paper Eq. 16 on standard-deviation vectors (B, K, E) of matched queries and targets:
    every component of either side is an anchor; its partner (the same component of the
    other side of the same sample) is the positive, ``-log S(-(a d + b))``, and each
    negative group (as in :func:`fine_grained_contrast`) gives ``-log S(a d + b)``, with
    ``d`` the squared distance between the two vectors. ``negatives="mean"`` is Eq. 16 as
    printed, ``sum_{M in {q, c}} sum_k E[.]``: per anchor the positive plus the *mean* over
    its negatives (an expectation: Eq. 13 writes ``B * E`` where it sums its negatives,
    Eq. 16 does not), averaged over the samples and summed over sides and components, so
    the loss does not grow with the batch. ``"sum"`` (hug v4): per anchor the positive plus
    the sum over its negatives, averaged over anchors. Batched products only."""
    if negatives not in ("mean", "sum"):
        raise ValueError(f"fine_grained_sigmoid: negatives={negatives!r} is not one of mean, sum")
    s = torch.stack([std_q, std_c])  # (2 sides, B, K, E)
    sides, n, k, _ = s.shape
    squared = s.square().sum(-1)  # (2, B, K)

    def distance(x_sq: torch.Tensor, y_sq: torch.Tensor, product: torch.Tensor) -> torch.Tensor:
        return (x_sq + y_sq - 2.0 * product).clamp_min(0.0)

    positive_d = (s[0] - s[1]).square().sum(-1)  # (B, K), the same for both anchor sides
    positive = -F.logsigmoid(-(a * positive_d + b)).sum() * sides
    negative, per_anchor = s.new_zeros(()), 0  # summed over all anchors; negatives of one anchor
    if component:
        gram = torch.einsum("mbkd,nbld->mbknl", s, s)
        d = distance(squared[:, :, :, None, None], squared.permute(1, 0, 2)[None, :, None], gram)
        skip = torch.eye(k, dtype=torch.bool, device=s.device).view(1, 1, k, 1, k)
        negative = negative - F.logsigmoid(a * d + b).masked_fill(skip, 0.0).sum()
        per_anchor += sides * (k - 1)
    other = ~torch.eye(n, dtype=torch.bool, device=s.device).view(1, n, 1, n)
    for enabled, partner in ((instance, s), (modality, s.flip(0))):
        if enabled:
            gram = torch.einsum("mikd,mjkd->mikj", s, partner)
            partner_sq = partner.square().sum(-1).permute(0, 2, 1)[:, None]  # (2, 1, K, B)
            d = distance(squared[..., None], partner_sq, gram)
            negative = negative - (F.logsigmoid(a * d + b) * other).sum()
            per_anchor += n - 1
    if negatives == "sum":
        return (positive + negative) / (sides * n * k)
    return (positive + negative / max(per_anchor, 1)) / n


def coordination_uncertainty(variances: torch.Tensor, reduce: str = "mean") -> torch.Tensor:
    """Per-sample coordination uncertainty (B,) from the coordination head's variances
    (B, K, E): each component's summed variance ``||sigma_m^k||^2``, then ``"mean"`` over the
    components, the paper's ``sigma-bar_m^2`` in L_Cord (the bar is the component mean, as
    its overall uncertainty ``||sigma-bar||^2 = 1/K sum_k ||sigma^k||^2``), or ``"sum"``, the
    release's sum over components and dimensions (hug v4)."""
    if reduce not in ("mean", "sum"):
        raise ValueError(f"coordination_uncertainty: reduce={reduce!r} is not one of mean, sum")
    per_component = variances.sum(-1)
    return per_component.mean(-1) if reduce == "mean" else per_component.sum(-1)


def coordination_loss(matched: torch.Tensor, mismatched: torch.Tensor, margin: float) -> torch.Tensor:
    """Ranking loss on per-sample coordination uncertainty (B,): a matched (reference, text)
    pair should be at least ``margin`` less uncertain than the same reference with a
    mismatched text."""
    return F.relu(margin + matched - mismatched).mean()


def derangement(n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """A random n-cycle over ``range(n)`` from torch's RNG, hence a permutation with no fixed
    point: ``perm[i] != i`` for every i, so every sample gets another sample's text."""
    if n < 2:
        raise ValueError(f"HUG's coordination loss needs at least 2 samples per batch, got {n}")
    order = torch.randperm(n, device=device)
    perm = torch.empty_like(order)
    perm[order] = order.roll(-1)
    return perm


def mismatched_pairs(
    n: int, pairs: int, device: torch.device | str = "cpu", permutation: str = "derangement"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of a batch of ``n`` and, for each, another row whose text it gets: ``pairs``
    distinct rows drawn at random (all ``n`` when ``pairs`` is 0 or at least ``n``), texts
    by a :func:`derangement`, so no row keeps its own text (``permutation="randperm"``: the
    release's ``torch.randperm``, fixed points allowed)."""
    if permutation == "randperm":
        perm = torch.randperm(n, device=device)
    elif permutation == "derangement":
        perm = derangement(n, device)
    else:
        raise ValueError(f"mismatched_pairs: permutation={permutation!r} is not one of derangement, randperm")
    if pairs <= 0 or pairs >= n:
        return torch.arange(n, device=device), perm
    rows = torch.randperm(n, device=device)[:pairs]
    return rows, perm[rows]


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
