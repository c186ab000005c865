"""Contrastive losses shared by several methods (each method file owns the rest of its math)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def info_nce(sim: torch.Tensor, temperature: torch.Tensor | float) -> torch.Tensor:
    """Cross-entropy of each row of ``sim`` (B, B) against its diagonal entry."""
    labels = torch.arange(sim.shape[0], device=sim.device)
    return F.cross_entropy(sim / temperature, labels)


def robust_contrastive(sim: torch.Tensor, temperature: torch.Tensor | float, eps: float = 1e-6) -> torch.Tensor:
    """Robust contrastive loss (RCL; ConeSep Eq. 4, TME's ``lrm``): with ``p = softmax(sim /
    temperature)`` row-wise, ``-sum_{j != i} log(1 - p_ij) / B``. It only pushes negatives
    away, so a wrong positive pair does far less harm than under InfoNCE."""
    return per_sample_robust_contrastive(sim, temperature, eps).mean()


def per_sample_robust_contrastive(sim: torch.Tensor, temperature: torch.Tensor | float, eps: float = 1e-6) -> torch.Tensor:
    """Each row's own RCL term, ``-sum_{j != i} log(1 - p_ij)`` (B,), over all columns of a
    square ``sim``; its mean is :func:`robust_contrastive`. TME sums it over clean rows."""
    p = F.softmax(sim / temperature, dim=1)
    off_diagonal = ~torch.eye(sim.shape[0], dtype=torch.bool, device=sim.device)
    return -(torch.log((1.0 - p).clamp_min(eps)) * off_diagonal).sum(1)


def per_sample_info_nce(sim: torch.Tensor, temperature: torch.Tensor | float) -> torch.Tensor:
    """Each row's own InfoNCE loss, ``-log_softmax(sim / temperature).diag()`` (B,)."""
    return -F.log_softmax(sim / temperature, dim=1).diagonal()
