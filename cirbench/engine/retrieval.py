"""Retrieval metrics at matrix-product speed: ranks of the targets from score matrices."""

from __future__ import annotations

import numpy as np
import torch


def tie_break(ties: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """How many of its ``ties`` tied columns a uniformly random tie-break places above each
    query's target: an integer uniform on ``0..ties``, drawn from the query's integer ``key``
    alone (splitmix64), so that a query gets the same draw in every run, chunking and device."""
    z = keys.cpu().numpy().astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)  # uint64 arrays wrap around
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    uniform = (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)  # in [0, 1)
    count = ties.cpu().numpy() + 1
    return torch.from_numpy(np.minimum((uniform * count).astype(np.int64), count - 1)).to(ties.device)


def rank_and_ties(
    scores: torch.Tensor, target_col: torch.Tensor, exclude_col: torch.Tensor | None = None,
    keys: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query's target rank and its ties: the number of other gallery columns scored
    exactly as the target. The rank counts the columns scored strictly higher than the
    target plus, with ``keys`` (N,) (integers naming the queries), the tied columns that a
    uniformly random tie-break places above it (:func:`tie_break`): so a tie counts as a
    hit with probability its share of the tied positions below K, as in the peers' unstable
    sorts, and a model whose scores are all equal gets chance. Without ties the rank is the
    strict count, with or without ``keys``.

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
    if keys is not None:
        ranks = ranks + tie_break(ties, keys)
    return ranks, ties


def target_ranks(scores: torch.Tensor, target_col: torch.Tensor, exclude_col: torch.Tensor | None = None) -> torch.Tensor:
    """0-based rank of each query's target among the gallery columns.

    ``scores`` (N, M), higher is better; ``target_col`` (N,) the target's column (-1: the
    target is not in the gallery, rank = M). ``exclude_col`` (N,) a column removed from the
    ranking (the reference image), or -1 for none. The rank counts the columns scored
    strictly higher than the target, so ties are resolved in the target's favour; the
    evaluator breaks them at random instead (:func:`rank_and_ties` with ``keys``). A
    non-finite score never ranks above anything, and a non-finite target score ranks last.
    """
    return rank_and_ties(scores, target_col, exclude_col)[0]


def recall_at(ranks: np.ndarray | torch.Tensor, ks: tuple[int, ...]) -> dict[int, float]:
    """Share of queries whose target rank is below ``k``, for each ``k``."""
    r = torch.as_tensor(ranks)
    return {k: float((r < k).float().mean()) if len(r) else float("nan") for k in ks}


def subset_scores(scores: torch.Tensor, subset_cols: torch.Tensor) -> torch.Tensor:
    """Restrict each row of ``scores`` to its candidate columns (N, S): columns at -1 (padding)
    score -inf. Used for CIRR's Recall_subset within ``img_set.members``."""
    gathered = scores.gather(1, subset_cols.clamp(min=0))
    return gathered.masked_fill(subset_cols < 0, float("-inf"))
