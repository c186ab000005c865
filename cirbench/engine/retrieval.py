"""Retrieval metrics at matrix-product speed: ranks of the targets from score matrices."""

from __future__ import annotations

import numpy as np
import torch


def target_ranks(scores: torch.Tensor, target_col: torch.Tensor, exclude_col: torch.Tensor | None = None) -> torch.Tensor:
    """0-based rank of each query's target among the gallery columns.

    ``scores`` (N, M), higher is better; ``target_col`` (N,) the target's column (-1: the
    target is not in the gallery, rank = M). ``exclude_col`` (N,) a column removed from the
    ranking (the reference image), or -1 for none. The rank counts the columns scored
    strictly higher than the target, so ties are resolved in the target's favour.
    """
    scores = scores.clone()
    rows = torch.arange(scores.shape[0])
    if exclude_col is not None:
        has = exclude_col >= 0
        scores[rows[has], exclude_col[has]] = float("-inf")
    present = target_col >= 0
    ranks = torch.full((scores.shape[0],), scores.shape[1], dtype=torch.long)
    target_scores = scores[rows[present], target_col[present]]
    ranks[present] = (scores[present] > target_scores[:, None]).sum(dim=1)
    return ranks


def recall_at(ranks: np.ndarray | torch.Tensor, ks: tuple[int, ...]) -> dict[int, float]:
    """Share of queries whose target rank is below ``k``, for each ``k``."""
    r = torch.as_tensor(ranks)
    return {k: float((r < k).float().mean()) if len(r) else float("nan") for k in ks}


def subset_scores(scores: torch.Tensor, subset_cols: torch.Tensor) -> torch.Tensor:
    """Restrict each row of ``scores`` to its candidate columns (N, S): columns at -1 (padding)
    score -inf. Used for CIRR's Recall_subset within ``img_set.members``."""
    gathered = scores.gather(1, subset_cols.clamp(min=0))
    return gathered.masked_fill(subset_cols < 0, float("-inf"))
