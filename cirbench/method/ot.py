"""Entropic optimal transport with blocked paths: a batched log-domain Sinkhorn solver.

ConeSep's targeted unlearning (Eq. 10 and Appendix A of the paper) solves a small entropic
OT problem per training step in which some transport paths are forbidden ("an infinite
cost"). POT's solvers return NaN for +inf costs, and a large finite cost only approximates
the cut, so this module works on the log-kernel directly: a blocked path has log-kernel
``-inf`` and carries exactly zero mass. Everything is vectorised over leading batch
dimensions; there is no Python loop except the Sinkhorn iterations themselves.
"""

from __future__ import annotations

import torch


def _uniform(size: int, like: torch.Tensor) -> torch.Tensor:
    return torch.full(like.shape[:-2] + (size,), 1.0 / size, dtype=like.dtype, device=like.device)


def _check(cost: torch.Tensor, a: torch.Tensor, b: torch.Tensor, blocked: torch.Tensor | None, epsilon: float) -> None:
    if cost.dim() < 2:
        raise ValueError(f"sinkhorn: cost must have at least 2 dimensions (..., n, m), got shape {tuple(cost.shape)}")
    if not torch.isfinite(cost).all():
        raise ValueError("sinkhorn: cost has non-finite entries; mark forbidden paths with `blocked` instead of inf")
    if epsilon <= 0:
        raise ValueError(f"sinkhorn: epsilon must be > 0, got {epsilon}")
    n, m = cost.shape[-2:]
    if a.shape[-1] != n or b.shape[-1] != m:
        raise ValueError(f"sinkhorn: marginals of sizes {a.shape[-1]} and {b.shape[-1]} do not fit a {n}x{m} cost")
    if (a <= 0).any() or (b <= 0).any():
        raise ValueError("sinkhorn: marginals must be strictly positive")
    if blocked is not None:
        if blocked.shape != cost.shape:
            raise ValueError(f"sinkhorn: blocked has shape {tuple(blocked.shape)}, cost has {tuple(cost.shape)}")
        if blocked.all(dim=-1).any() or blocked.all(dim=-2).any():
            raise ValueError("sinkhorn: a row or column has every path blocked, so no transport plan exists")


def sinkhorn_log(
    cost: torch.Tensor,
    epsilon: float,
    iterations: int = 100,
    a: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
    blocked: torch.Tensor | None = None,
    tol: float = 0.0,
) -> torch.Tensor:
    """The entropic OT plan ``argmin <P, C> - epsilon H(P)`` subject to ``P 1 = a``,
    ``P^T 1 = b`` and ``P = 0`` on ``blocked`` paths, by log-domain Sinkhorn.

    ``cost`` is (..., n, m) and finite; ``a`` (..., n) and ``b`` (..., m) default to
    uniform marginals; ``blocked`` is a boolean (..., n, m) mask of forbidden paths. The
    column marginals hold exactly after the last iteration and the row marginals up to the
    solver's convergence. With ``tol > 0`` the loop stops early once every row marginal is
    within a relative error ``tol`` of ``a`` (checked every 10 iterations). Differentiable, but
    ConeSep uses the plan as a label and calls it under ``torch.no_grad()``.
    """
    if cost.dtype in (torch.float16, torch.bfloat16):  # e.g. from a bf16 autocast region
        cost = cost.float()
    a = _uniform(cost.shape[-2], cost) if a is None else a.to(cost)
    b = _uniform(cost.shape[-1], cost) if b is None else b.to(cost)
    _check(cost, a, b, blocked, epsilon)
    if iterations < 1:
        raise ValueError(f"sinkhorn: iterations must be >= 1, got {iterations}")
    log_kernel = -cost / epsilon
    if blocked is not None:
        log_kernel = log_kernel.masked_fill(blocked, float("-inf"))
    log_a, log_b = a.log(), b.log()
    log_u = torch.zeros_like(log_a)
    log_v = torch.zeros_like(log_b)
    for it in range(iterations):
        log_u = log_a - torch.logsumexp(log_kernel + log_v.unsqueeze(-2), dim=-1)
        log_v = log_b - torch.logsumexp(log_kernel + log_u.unsqueeze(-1), dim=-2)
        if tol > 0 and (it + 1) % 10 == 0:
            rows = torch.logsumexp(log_kernel + log_u.unsqueeze(-1) + log_v.unsqueeze(-2), dim=-1).exp()
            if float(((rows - a).abs() / a).max()) < tol:
                break
    return (log_u.unsqueeze(-1) + log_kernel + log_v.unsqueeze(-2)).exp()
