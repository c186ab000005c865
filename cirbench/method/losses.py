"""Contrastive losses shared by several methods (each method file owns the rest of its math)."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

RCLGuard = Literal["one_minus", "probability"]
"""How RCL keeps ``log(1 - p)`` finite: ``one_minus`` clamps ``1 - p`` at ``eps`` (cirbench's
reading); ``probability`` clamps ``p`` to ``[1e-7, 1 - 1e-7]`` first, as the releases'
``robust_infoNCE`` does (TME, HABIT, INTENT), so a saturated entry costs ``-log 1e-7``."""
RELEASE_PROBABILITY_EPS = 1e-7


def info_nce(sim: torch.Tensor, temperature: torch.Tensor | float) -> torch.Tensor:
    """Cross-entropy of each row of ``sim`` (B, B) against its diagonal entry."""
    labels = torch.arange(sim.shape[0], device=sim.device)
    return F.cross_entropy(sim / temperature, labels)


def robust_contrastive(sim: torch.Tensor, temperature: torch.Tensor | float, eps: float = 1e-6,
                       guard: RCLGuard = "one_minus") -> torch.Tensor:
    """Robust contrastive loss (RCL; ConeSep Eq. 4, TME's ``lrm``): with ``p = softmax(sim /
    temperature)`` row-wise, ``-sum_{j != i} log(1 - p_ij) / B``. It only pushes negatives
    away, so a wrong positive pair does far less harm than under InfoNCE. ``guard``: :data:`RCLGuard`."""
    return per_sample_robust_contrastive(sim, temperature, eps, guard).mean()


def per_sample_robust_contrastive(sim: torch.Tensor, temperature: torch.Tensor | float, eps: float = 1e-6,
                                  guard: RCLGuard = "one_minus") -> torch.Tensor:
    """Each row's own RCL term, ``-sum_{j != i} log(1 - p_ij)`` (B,), over all columns of a
    square ``sim``; its mean is :func:`robust_contrastive`. TME sums it over clean rows."""
    p = F.softmax(sim / temperature, dim=1)
    off_diagonal = ~torch.eye(sim.shape[0], dtype=torch.bool, device=sim.device)
    if guard == "probability":
        log_rest = torch.log(1.0 - p.clamp(RELEASE_PROBABILITY_EPS, 1.0 - RELEASE_PROBABILITY_EPS))
    elif guard == "one_minus":
        log_rest = torch.log((1.0 - p).clamp_min(eps))
    else:
        raise ValueError(f"RCL guard {guard!r} is not one of one_minus, probability")
    return -(log_rest * off_diagonal).sum(1)


def per_sample_info_nce(sim: torch.Tensor, temperature: torch.Tensor | float) -> torch.Tensor:
    """Each row's own InfoNCE loss, ``-log_softmax(sim / temperature).diag()`` (B,)."""
    return -F.log_softmax(sim / temperature, dim=1).diagonal()
