"""HUG's math (``methods/hug.py`` is the plugin): the uncertainty heads, the dynamic weighting,
the Gaussian distances, the holistic and fine-grained contrasts and the coordination loss, each
with the release's reading where it differs (docs/hug.md, "Where we differ from the release").
The plugin and the parity adapter (``benchmarks/parity/hug.py``) call the same code."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from cirbench.method.losses import info_nce


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
