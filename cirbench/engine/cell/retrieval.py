"""Retrieval metrics at matrix-product speed: ranks of the targets from score matrices."""

from __future__ import annotations

import numpy as np
import torch


def rank_and_ties(
    scores: torch.Tensor, target_col: torch.Tensor, exclude_col: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query's target rank (see :func:`target_ranks`) and its ties: the number of other
    gallery columns scored exactly as the target. Under a uniformly random tie-break the
    target's 0-based position is ``rank + U``, U uniform on ``0..ties``; see :func:`hit_probability`.

    A non-finite score never ranks above anything (NaN and infinities read as -inf), and a
    query whose target score is not finite ranks last (rank M, no ties: a miss at every K
    up to the gallery's size), like a target that is not in the gallery."""
    finite = torch.isfinite(scores)
    scores = torch.where(finite, scores, torch.full_like(scores, float("-inf")))
    rows = torch.arange(scores.shape[0])
    if exclude_col is not None:
        has = exclude_col >= 0
        scores[rows[has], exclude_col[has]] = float("-inf")
    present = target_col >= 0
    present[present.clone()] = finite[rows[present], target_col[present]]
    ranks = torch.full((scores.shape[0],), scores.shape[1], dtype=torch.long)
    ties = torch.zeros(scores.shape[0], dtype=torch.long)
    target_scores = scores[rows[present], target_col[present]][:, None]
    ranks[present] = (scores[present] > target_scores).sum(dim=1)
    ties[present] = (scores[present] == target_scores).sum(dim=1) - 1
    return ranks, ties


def target_ranks(scores: torch.Tensor, target_col: torch.Tensor, exclude_col: torch.Tensor | None = None) -> torch.Tensor:
    """0-based rank of each query's target among the gallery columns.

    ``scores`` (N, M), higher is better; ``target_col`` (N,) the target's column (-1: the
    target is not in the gallery, rank = M). ``exclude_col`` (N,) a column removed from the
    ranking (the reference image), or -1 for none. The rank counts the columns scored
    strictly higher than the target; columns tied with it are counted apart
    (:func:`rank_and_ties`), and recall gives a tie its expected value (:func:`recall_at`).
    A non-finite target score ranks last.
    """
    return rank_and_ties(scores, target_col, exclude_col)[0]


def hit_probability(ranks, ties, k: int):
    """P(position < k) when the target is placed uniformly among its ``ties`` + 1 tied
    columns after ``ranks`` strictly higher ones: ``clip((k - ranks) / (ties + 1), 0, 1)``.
    Works on numpy arrays and torch tensors; without ties it is 1 where ``ranks < k``, else 0."""
    return ((k - ranks) / (ties + 1)).clip(0, 1)


def recall_at(ranks: np.ndarray | torch.Tensor, ks: tuple[int, ...], ties: np.ndarray | torch.Tensor | None = None) -> dict[int, float]:
    """Share of queries whose target rank is below ``k``, for each ``k``; with ``ties``, the
    mean of :func:`hit_probability` (the expected recall under a random tie-break)."""
    r = torch.as_tensor(ranks)
    if ties is None or not bool((torch.as_tensor(ties) > 0).any()):
        return {k: float((r < k).float().mean()) if len(r) else float("nan") for k in ks}
    t = torch.as_tensor(ties)
    return {k: float(hit_probability(r, t, k).float().mean()) if len(r) else float("nan") for k in ks}


def subset_scores(scores: torch.Tensor, subset_cols: torch.Tensor) -> torch.Tensor:
    """Restrict each row of ``scores`` to its candidate columns (N, S): columns at -1 (padding)
    score -inf. Used for CIRR's Recall_subset within ``img_set.members``."""
    gathered = scores.gather(1, subset_cols.clamp(min=0))
    return gathered.masked_fill(subset_cols < 0, float("-inf"))
