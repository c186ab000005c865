"""ConeSep's math (``methods/conesep.py`` is the plugin): GFQ's boundary, fidelity and
partition (Sec. 3.2), NBL's losses (Sec. 3.3) and BTU's cost, plan, labels and unlearning loss
(Sec. 3.4), each with the release's reading where it differs (docs/conesep.md, "Where we differ
from the release"). Pure functions of features, so the parity harness (``benchmarks/parity/``)
and the plugin call the same code."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F

from cirbench.backbones.base import max_token_similarity
from cirbench.method.losses import info_nce, robust_contrastive
from cirbench.method.ot import sinkhorn_log

if TYPE_CHECKING:
    from cirbench_methods.conesep import ConeSepConfig

FidelityVariant = Literal["eq3", "release"]
RankingLoss = Literal["rcl", "infonce"]
TargetMatrix = Literal["paper", "ones", "minus_ones", "zeros"]
BoundarySampling = Literal["gaussian", "uniform", "laplace", "empirical"]
NBLGradient = Literal["prompt", "all"]
NegativeInit = Literal["random", "copy"]
InterLoss = Literal["eq6", "release"]
OTCost = Literal["eq9", "release"]
NegativeColumn = Literal["own", "last"]
ULLoss = Literal["eq12", "release"]
NBLRows = Literal["clean", "all"]
QueryCosine = Literal["vector", "release"]
QueryInterval = Literal["batch", "release"]
BoundaryEstimate = Literal["eq2", "release"]

RELEASE_QUERY_INTERVAL = (0.002, 0.007)
"""The release's fixed (alpha1, alpha2) of Eq. 7: the loss is zero on [-0.007, -0.002]."""


# ----------------------------------------------------------------------------- GFQ


def sample_images(kind: BoundarySampling, count: int, shape: tuple[int, ...], generator: torch.Generator,
                  device: torch.device) -> torch.Tensor:
    """``count`` random images of ``shape`` in the tower's input space, unit variance:
    N(0, 1), uniform on [-sqrt 3, sqrt 3], or Laplace with scale 1/sqrt 2."""
    size = (count, *shape)
    if kind == "gaussian":
        return torch.randn(size, generator=generator, device=device)
    u = torch.rand(size, generator=generator, device=device)
    if kind == "uniform":
        return (2.0 * u - 1.0) * math.sqrt(3.0)
    if kind == "laplace":
        centred = (u - 0.5).clamp(-0.5 + 1e-7, 0.5 - 1e-7)
        return -torch.sign(centred) * torch.log1p(-2.0 * centred.abs()) / math.sqrt(2.0)
    raise ValueError(f"conesep: cannot sample images from {kind!r}")


def fidelity_eq3(sim_diag: torch.Tensor, boundary: float, apply_function: bool = True) -> torch.Tensor:
    """Eq. 3 as printed: ``x^2 (x - 1)`` with ``x = relu(s_ct - B)``; ``x`` itself if
    ``apply_function`` is False (the "w/o Fidelity" ablation)."""
    x = F.relu(sim_diag - boundary)
    return x.pow(2) * (x - 1.0) if apply_function else x


def fidelity_release(sim_diag: torch.Tensor, boundary: float, apply_function: bool = True) -> torch.Tensor:
    """The released code: ``x = relu(s_ct - B) / max``, then ``x^2 (1 - x^2)`` (which is 0 at
    both ``x = 0`` and ``x = 1``); ``x`` itself if ``apply_function`` is False."""
    x = F.relu(sim_diag - boundary)
    x = x / x.max().clamp_min(1e-12)
    return x.pow(2) * (1.0 - x.pow(2)) if apply_function else x


def boundary_similarity(composed: torch.Tensor, targets: torch.Tensor, estimate: BoundaryEstimate = "eq2") -> torch.Tensor:
    """The boundary ``B`` from the composed features (N, E) and target tokens (N, Q, E) of
    the random samples: the mean of the N paired similarities (``eq2``, Eq. 2 as printed), or
    of all N x N pairs (``release``)."""
    sim = max_token_similarity(composed, targets)
    return sim.diagonal().mean() if estimate == "eq2" else sim.mean()


def sample_fidelity(sim_diag: torch.Tensor, boundary: float, config: "ConeSepConfig") -> torch.Tensor:
    """Eq. 3 (or the release's variant, ``fidelity_variant``) for each sample of the batch."""
    fn = fidelity_eq3 if config.fidelity_variant == "eq3" else fidelity_release
    return fn(sim_diag, boundary, config.fidelity)


def partition(fidelity: torch.Tensor, omega: float, variant: FidelityVariant) -> torch.Tensor:
    """Kept-clean flags (B,): ``fidelity >= omega`` (``eq3``), or all but the
    ``int(omega * B)`` lowest-fidelity samples (``release``)."""
    if variant == "eq3":
        return fidelity >= omega
    clean = torch.ones_like(fidelity, dtype=torch.bool)
    flagged = int(omega * fidelity.shape[0])
    if flagged > 0:
        clean[torch.topk(fidelity, flagged, largest=False).indices] = False
    return clean


# ----------------------------------------------------------------------------- NBL


def target_matrix(kind: TargetMatrix, size: int, device: torch.device) -> torch.Tensor:
    """The matrix T of Eq. 6: +1 on the diagonal and -1 off it (``paper``), or constant."""
    if kind == "paper":
        return 2.0 * torch.eye(size, device=device) - 1.0
    value = {"ones": 1.0, "minus_ones": -1.0, "zeros": 0.0}[kind]
    return torch.full((size, size), value, device=device)


def target_oriented_loss(neg_sim: torch.Tensor, clean: torch.Tensor, T: torch.Tensor, tau: float,
                         variant: InterLoss = "eq6") -> torch.Tensor:
    """Eq. 6: ``sum_{i clean} sum_j log(1 + exp(T_ij s(F_neg^i, F_t^j) / tau)) / (|clean| B)``,
    with ``neg_sim`` indexed [query i, target j]. Zero when nothing is kept clean.
    ``release``: the release's reading, ``softplus(T_ij p_ij)`` with ``p = softmax(neg_sim /
    tau)`` row-wise, summed over j (divided by the row count, not by B times it)."""
    if variant == "eq6":
        per_row = F.softplus(T * neg_sim / tau).mean(dim=1)
    else:
        per_row = F.softplus(T * torch.softmax(neg_sim / tau, dim=1)).sum(dim=1)
    weights = clean.to(per_row.dtype)
    return (per_row * weights).sum() / weights.sum().clamp_min(1.0)


def query_oriented_loss(composed: torch.Tensor, negative: torch.Tensor, clean: torch.Tensor,
                        cosine: QueryCosine = "vector", interval: QueryInterval = "batch", tau: float = 0.07) -> torch.Tensor:
    """Eq. 7 as printed: ``mean_{i clean} relu(s_n + alpha1) + relu(-alpha2 - s_n)`` with
    ``s_n = cos(F_c^i, F_neg^i)``; ``alpha1`` (``alpha2``) is the mean of the negative
    (positive) cosines between every composed and every negative feature of the batch
    (0 if there are none), taken as constants. The loss is zero inside [-alpha2, -alpha1].

    ``interval = release``: alpha1, alpha2 fixed at 0.002, 0.007 and the hinge divided by
    ``tau`` (the release). ``cosine = release``: the release's broadcasting defect, ``s_n``
    replaced by the per-dimension products ``F_c^i[e] F_neg^j[e]`` of every pair (j, e),
    row i's loss their mean."""
    if cosine == "vector":
        s_n = (composed * negative).sum(dim=-1)
    else:
        s_n = composed.unsqueeze(1) * negative.unsqueeze(0)  # (B, B, E)
    if interval == "batch":
        with torch.no_grad():
            all_pairs = composed @ negative.T
            neg, pos = all_pairs < 0, all_pairs > 0
            alpha1 = (all_pairs * neg).sum() / neg.sum().clamp_min(1)
            alpha2 = (all_pairs * pos).sum() / pos.sum().clamp_min(1)
        per = F.relu(s_n + alpha1) + F.relu(-alpha2 - s_n)
    else:
        alpha1, alpha2 = RELEASE_QUERY_INTERVAL
        per = (F.relu(s_n + alpha1) + F.relu(-alpha2 - s_n)) / tau
    per_row = per.reshape(per.shape[0], -1).mean(dim=1)
    weights = clean.to(per_row.dtype)
    return (per_row * weights).sum() / weights.sum().clamp_min(1.0)


def nbl_rows(clean: torch.Tensor, config: "ConeSepConfig") -> torch.Tensor:
    """The rows Eq. 6-7 average over: the kept-clean ones (``clean``, as printed) or all."""
    return clean if config.nbl_rows == "clean" else torch.ones_like(clean)


def query_term(composed: torch.Tensor, negative: torch.Tensor, clean: torch.Tensor, config: "ConeSepConfig") -> torch.Tensor:
    """L_intra (Eq. 7) under ``config``'s readings."""
    return query_oriented_loss(composed, negative, nbl_rows(clean, config), config.query_cosine,
                               config.query_interval, config.tau)


def target_term(neg_sim: torch.Tensor, clean: torch.Tensor, config: "ConeSepConfig") -> torch.Tensor:
    """L_inter (Eq. 6) under ``config``'s readings (``target_matrix``, ``inter_loss``, ``nbl_rows``)."""
    T = target_matrix(config.target_matrix, neg_sim.shape[0], neg_sim.device)
    return target_oriented_loss(neg_sim, nbl_rows(clean, config), T, config.tau, config.inter_loss)


# ----------------------------------------------------------------------------- BTU


def unlearning_mask(clean: torch.Tensor, column: NegativeColumn = "own") -> torch.Tensor:
    """The blocked paths M of Eq. 9-10, (B, 2B) bool: a noisy row cannot reach its own
    target (column i), a clean row cannot reach its own negative boundary (column i + B;
    ``last``: the release's column 2B - 1, for every clean row)."""
    size = clean.shape[0]
    eye = torch.eye(size, dtype=torch.bool, device=clean.device)
    if column == "own":
        return torch.cat([eye & ~clean.unsqueeze(1), eye & clean.unsqueeze(1)], dim=1)
    blocked = torch.cat([eye & ~clean.unsqueeze(1), torch.zeros_like(eye)], dim=1)
    blocked[:, -1] = clean
    return blocked


def hard_label(clean: torch.Tensor, column: NegativeColumn = "own") -> torch.Tensor:
    """The hard label L (B, 2B): a one at column i for a clean row, at column i + B for a
    noisy row (the noisy sample is sent to its negative boundary; ``last``: the release's
    column 2B - 1, for every noisy row)."""
    size = clean.shape[0]
    eye = torch.eye(size, device=clean.device)
    keep = clean.to(eye.dtype).unsqueeze(1)
    if column == "own":
        return torch.cat([eye * keep, eye * (1.0 - keep)], dim=1)
    label = torch.cat([eye * keep, torch.zeros_like(eye)], dim=1)
    label[:, -1] += 1.0 - keep.squeeze(1)
    return label


def unlearning_cost(sim: torch.Tensor, composed: torch.Tensor, negative: torch.Tensor, use_negative: bool,
                    variant: OTCost = "eq9", neg_sim: torch.Tensor | None = None, tau: float = 0.07) -> torch.Tensor:
    """Eq. 9: ``[C+ | C-]`` with ``C+ = 1 - s(F_c^i, F_t^j)`` and ``C- = 1 - cos(F_c^i,
    F_neg^j)``; with ``use_negative`` False, C- is the constant 1 (an orthogonal anchor).
    ``release``: ``C+ = 1 - softmax(sim / tau)`` row-wise, ``C-_ij = 1 - neg_sim[j, i] =
    1 - s(F_neg^j, F_t^i)`` (``neg_sim`` indexed [query, target], so transposed), and the
    whole matrix divided by its maximum."""
    if variant == "eq9":
        negative_cost = 1.0 - composed @ negative.T if use_negative else torch.ones_like(sim)
        return torch.cat([1.0 - sim, negative_cost], dim=1)
    negative_cost = 1.0 - neg_sim.T if use_negative else torch.ones_like(sim)
    cost = torch.cat([1.0 - torch.softmax(sim / tau, dim=1), negative_cost], dim=1)
    return cost / cost.max()


def transport_plan(cost: torch.Tensor, blocked: torch.Tensor, epsilon: float, iterations: int,
                   tol: float = 0.0) -> torch.Tensor:
    """Eq. 10: the entropic OT plan of ``cost`` with uniform marginals and the ``blocked``
    paths cut (:func:`cirbench.method.ot.sinkhorn_log`). A row or column blocked everywhere (the
    release's last column when no row is noisy) carries nothing and is left out of the
    problem."""
    dead_rows, dead_cols = blocked.all(dim=1), blocked.all(dim=0)
    if not (dead_rows.any() or dead_cols.any()):
        return sinkhorn_log(cost, epsilon, iterations, blocked=blocked, tol=tol)
    rows, cols = (~dead_rows).nonzero().squeeze(1), (~dead_cols).nonzero().squeeze(1)
    plan = torch.zeros(cost.shape, dtype=torch.float32 if cost.dtype in (torch.float16, torch.bfloat16) else cost.dtype,
                       device=cost.device)
    inner = sinkhorn_log(cost[rows][:, cols], epsilon, iterations, blocked=blocked[rows][:, cols], tol=tol)
    plan[rows.unsqueeze(1), cols.unsqueeze(0)] = inner.to(plan.dtype)
    return plan


def mixed_label(plan: torch.Tensor, label: torch.Tensor, gamma: float) -> torch.Tensor:
    """Eq. 11: ``gamma P + (1 - gamma) L`` with the plan's rows rescaled to sum to 1."""
    plan = plan / plan.sum(dim=1, keepdim=True).clamp_min(1e-30)
    return gamma * plan + (1.0 - gamma) * label


def soft_label(cost: torch.Tensor, clean: torch.Tensor, gamma: float, epsilon: float, iterations: int,
               use_ot: bool = True, tol: float = 0.0, column: NegativeColumn = "own") -> torch.Tensor:
    """Eq. 11: ``Y = gamma P + (1 - gamma) L`` with ``P`` the masked entropic OT plan
    (uniform marginals), row-normalised so each row of ``Y`` sums to 1; ``Y = L`` if not
    ``use_ot``; ``tol`` is the solver's early stop."""
    label = hard_label(clean, column)
    if not use_ot:
        return label
    plan = transport_plan(cost, unlearning_mask(clean, column), epsilon, iterations, tol)
    return mixed_label(plan, label, gamma)


def unlearning_loss(logits: torch.Tensor, label: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Eq. 12: ``KL(Y || softmax([s(F_c, F_t), s(F_neg, F_t)] / temperature))``, mean over
    rows (temperature 1: the similarities as printed)."""
    return F.kl_div(F.log_softmax(logits / temperature, dim=1), label, reduction="batchmean")


def unlearning_terms(sim: torch.Tensor, neg_sim: torch.Tensor, composed: torch.Tensor, negative: torch.Tensor,
                     clean: torch.Tensor, config: "ConeSepConfig") -> dict[str, torch.Tensor]:
    """BTU under ``config``'s readings: the cost (Eq. 9), blocked paths, plan (Eq. 10),
    label (Eq. 11) and KL (Eq. 12) of the B x 2B problem (``ot_cost``, ``ot_blocked``,
    ``ot_plan``, ``label``, ``ul_forward``) and ``ul``, the loss. With ``ul_loss = release``
    also the transposed 2B x B problem (``..._t``, ``ul_transposed``; its cost, paths and
    hard label transposed, its own plan) and ``ul`` the mean of the two KLs. ``sim`` and
    ``neg_sim`` are indexed [query, target]; everything but the KLs is computed without
    gradient. ``ot_plan`` is absent when ``ot`` is off (Y = L)."""
    cfg = config
    with torch.no_grad():
        cost = unlearning_cost(sim, composed, negative, cfg.ot_negative, cfg.ot_cost, neg_sim, cfg.tau)
        blocked = unlearning_mask(clean, cfg.negative_column)
        hard = hard_label(clean, cfg.negative_column)
        problems = {"": (cost, blocked, hard)}
        if cfg.ul_loss == "release":
            problems["_t"] = (cost.T, blocked.T, hard.T)
        terms: dict[str, torch.Tensor] = {}
        for suffix, (c, m, h) in problems.items():
            terms["ot_cost" + suffix], terms["ot_blocked" + suffix] = c, m
            if cfg.ot:
                plan = transport_plan(c, m, cfg.epsilon, cfg.sinkhorn_iterations, cfg.sinkhorn_tol)
                terms["ot_plan" + suffix], label = plan, mixed_label(plan, h, cfg.gamma)
            else:
                label = h
            terms["label" + suffix] = torch.softmax(label, dim=1) if cfg.label_softmax else label
    if cfg.ul_loss == "eq12":
        logits = torch.cat([sim, neg_sim], dim=1)
    else:
        logits = torch.cat([torch.softmax(sim / cfg.tau, dim=1), neg_sim.T], dim=1)
    temperature = cfg.tau if cfg.ul_temperature else 1.0
    terms["ul_forward"] = terms["ul"] = unlearning_loss(logits, terms["label"], temperature)
    if cfg.ul_loss == "release":
        terms["ul_transposed"] = unlearning_loss(logits.T, terms["label_t"], temperature)
        terms["ul"] = (terms["ul_forward"] + terms["ul_transposed"]) / 2
    return terms


def ranking_term(sim: torch.Tensor, config: "ConeSepConfig") -> torch.Tensor:
    """L_robust (Eq. 4), or InfoNCE in its place (``ranking_loss``)."""
    return robust_contrastive(sim, config.tau) if config.ranking_loss == "rcl" else info_nce(sim, config.tau)
