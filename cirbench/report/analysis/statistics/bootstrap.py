"""Paired bootstrap resamples of a setting's validation queries and training samples.

One draw of resamples (counts of each query or sample, drawn with replacement, seeded) is
shared by every run it is applied to, so two methods and all seeds are compared on the same
resampled queries. A run's metric on a resample is a weighted mean, so every resample of
every run comes out of one matrix product: counts (B, n) @ per-item values (n, runs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from cirbench.report.analysis.loading.numbers import metric_groups
from cirbench.results.metrics import AVERAGES, RECALL_NAME

N_RESAMPLES = 2000
_CHUNK = 256  # resamples drawn at a time, to bound the index array's memory


def resample_counts(n: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(n_resamples, n) float32: how often each of ``n`` items is drawn in each resample of
    ``n`` draws with replacement."""
    counts = np.empty((n_resamples, n), dtype=np.float32)
    for start in range(0, n_resamples, _CHUNK):
        size = min(_CHUNK, n_resamples - start)
        draws = rng.integers(0, n, size=(size, n)) + (np.arange(size) * n)[:, None]
        counts[start : start + size] = np.bincount(draws.ravel(), minlength=size * n).reshape(size, n)
    return counts


@dataclass(frozen=True)
class RankTerm:
    """``weight`` x the share of ``group``'s queries whose ``column`` rank is below ``k``
    (a tie counted at its expected value, from the ``ties`` / ``subset_ties`` column)."""

    group: str
    column: str
    k: int
    weight: float


_COLUMN = re.compile(r"(?:(?P<group>\S+) )?(?P<kind>R|R_sub)@(?P<k>\d+)")


def _rank_of(metric: str) -> tuple[str, int]:
    """The ranks column and K a stored recall reads: ``recall_subset@1`` -> (``subset_rank``, 1)."""
    match = RECALL_NAME.fullmatch(metric)
    return ("subset_rank" if match.group("subset") else "rank"), int(match.group("k"))


def rank_terms(column: str, metrics: pd.DataFrame) -> list[RankTerm]:
    """A recall column of the report's tables (:func:`~cirbench.report.analysis.loading.numbers.wide_columns`)
    as a weighted sum of per-group hit rates, as a fraction (the tables print percent).

    An average of :data:`~cirbench.results.metrics.AVERAGES` weighs its parts as it is defined:
    FashionIQ's ``AVG`` and ``Avg R@K`` over the categories that have every part in
    ``metrics``; CIRR's (R@5 + R_sub@1) / 2 of the ``all`` group.
    Raises ValueError for a column that is not a recall of stored ranks.
    """
    categories = metric_groups(metrics)[1]
    for average in AVERAGES:
        if not average.over_categories:
            if column == average.column:
                return [RankTerm("all", *_rank_of(part), 1.0 / len(average.parts)) for part in average.parts]
            continue
        over = [c for c in categories if set(average.parts) <= set(metrics.loc[metrics.group == c, "metric"])]
        if column == average.column and over:
            weight = 1.0 / len(average.parts) / len(over)
            return [RankTerm(c, *_rank_of(part), weight) for c in over for part in average.parts]
        parts = [part for part in average.parts if average.part_column(part) == column]
        if parts and over:
            return [RankTerm(c, *_rank_of(parts[0]), 1.0 / len(over)) for c in over]
    match = _COLUMN.fullmatch(column)
    if match is None:
        raise ValueError(f"column {column!r} is not a recall that can be recomputed from the ranks table")
    kind = "subset_rank" if match.group("kind") == "R_sub" else "rank"
    return [RankTerm(match.group("group") or "all", kind, int(match.group("k")), 1.0)]


_TIES = {"rank": "ties", "subset_rank": "subset_ties"}


def _hits(own: pd.DataFrame, term: RankTerm) -> np.ndarray:
    """Each query's hit at ``term.k`` (1 or 0; between for a tie: its expected value, as
    :func:`cirbench.engine.cell.retrieval.hit_probability`). Ranks stored before the ties
    columns existed count no ties."""
    ranks = own[term.column].to_numpy()
    ties = own[_TIES[term.column]].to_numpy(dtype=float) if _TIES[term.column] in own.columns else None
    if ties is None or not np.nan_to_num(ties).any():
        return ranks < term.k
    return np.clip((term.k - ranks) / (np.nan_to_num(ties) + 1), 0, 1)


class QueryBootstrap:
    """Resamples of the validation queries, within each group (a FashionIQ category is
    resampled on its own and the categories averaged as the metric does)."""

    def __init__(self, ranks: pd.DataFrame, terms: Sequence[RankTerm], n_resamples: int = N_RESAMPLES, seed: int = 0) -> None:
        self.terms = list(terms)
        self.n_resamples = n_resamples
        groups = sorted({t.group for t in self.terms})
        self.queries = {g: np.sort(ranks.loc[ranks.group == g, "query"].unique()) for g in groups}
        rng = np.random.default_rng(seed)
        self.counts = {g: resample_counts(len(q), n_resamples, rng) for g, q in self.queries.items() if len(q)}
        self._ranks = {run_id: own for run_id, own in ranks[ranks.group.isin(groups)].groupby("run_id")}

    def has(self, run_id: str) -> bool:
        """Whether ``run_id`` has stored ranks (results written before the ``ranks`` table have none)."""
        return run_id in self._ranks

    def _values(self, run_ids: Sequence[str], group: str) -> np.ndarray:
        """(n_group, runs): each query's weighted hits under the terms of ``group``."""
        queries = self.queries[group]
        out = np.zeros((len(queries), len(run_ids)), dtype=np.float32)
        for j, run_id in enumerate(run_ids):
            own = self._ranks[run_id]
            own = own[own.group == group].set_index("query").reindex(queries)
            if own["rank"].isna().any():
                raise ValueError(f"run {run_id} has no rank for some validation queries of group {group!r}")
            for term in self.terms:
                if term.group == group:
                    out[:, j] += term.weight * _hits(own, term)
        return out

    def point(self, run_ids: Sequence[str]) -> np.ndarray:
        """(runs,): each run's metric recomputed from its ranks (every query once)."""
        return sum(self._values(run_ids, g).mean(axis=0) for g in self.queries)

    def resample(self, run_ids: Sequence[str]) -> np.ndarray | None:
        """(n_resamples, runs): each run's metric on every resample; None when a run has no
        ranks. Raises ValueError when a run's ranks miss queries that other runs have."""
        if not run_ids or not all(self.has(r) for r in run_ids):
            return None
        empty = [g for g, q in self.queries.items() if not len(q)]
        if empty:
            raise ValueError(f"no stored ranks for group(s) {', '.join(empty)}")
        return sum(self.counts[g] @ self._values(run_ids, g) / len(self.queries[g]) for g in self.queries)


def _members(frame: pd.DataFrame, noise_type: str | None) -> np.ndarray:
    """All samples, or the clean ones plus those of ``noise_type`` (a clean-vs-this-kind view)."""
    if noise_type in (None, "all"):
        return np.ones(len(frame), dtype=bool)
    return (~frame.is_noisy.to_numpy(dtype=bool)) | (frame.noise_type.to_numpy() == noise_type)


def weighted_auroc(score: np.ndarray, positive: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUROC of ``score`` against ``positive`` (n,) under each row of ``weights`` (B, n):
    the weighted share of (positive, negative) pairs ranked right, ties counting half."""
    order = np.argsort(score, kind="stable")
    sorted_score, sorted_pos = score[order], positive[order]
    starts = np.flatnonzero(np.r_[True, np.diff(sorted_score) != 0])
    w = weights[:, order]
    pos = np.add.reduceat(w * sorted_pos, starts, axis=1)
    neg = np.add.reduceat(w * ~sorted_pos, starts, axis=1)
    below = np.cumsum(neg, axis=1) - neg
    with np.errstate(invalid="ignore", divide="ignore"):
        return (pos * (below + 0.5 * neg)).sum(axis=1) / (pos.sum(axis=1) * neg.sum(axis=1))


SAMPLE_METRICS = ("purity", "auroc")


class SampleBootstrap:
    """Resamples of the training samples (by ``sample_id``), for kept-set purity and AUROC.

    ``purity`` is the truly clean share of the kept set; with a ``noise_type`` it is counted
    on the clean samples plus those of that type only (how clean the kept set is against
    that kind of noise). ``auroc`` is that of the score against the true noise flag, with a
    ``noise_type`` on the clean samples plus that type, as in the ``purity`` table.

    The resamples are drawn over every sample id of the setting; a sample a run has no row
    for was not in its training set (held out for selection, ``--holdout``) and counts in
    none of that run's values. Runs of one seed hold out the same samples, so a comparison
    paired by seed stays paired sample by sample.
    """

    def __init__(self, sample_ids: Sequence[str], n_resamples: int = N_RESAMPLES, seed: int = 0) -> None:
        self.sample_ids = np.sort(np.asarray(sample_ids, dtype=object))
        self.n_resamples = n_resamples
        self.counts = resample_counts(len(self.sample_ids), n_resamples, np.random.default_rng(seed))

    def _aligned(self, scores: pd.DataFrame, run_id: str) -> pd.DataFrame | None:
        own = scores[scores.run_id == run_id]
        if own.empty:
            return None
        own = own.set_index("sample_id").reindex(self.sample_ids)
        own["trained"] = own.is_noisy.notna()
        own["is_noisy"] = own.is_noisy.astype("boolean").fillna(False)
        return own.reset_index()

    def _arrays(self, own: pd.DataFrame, metric: str, noise_type: str | None):
        members = _members(own, noise_type) & own.trained.to_numpy(dtype=bool)
        if metric == "purity":
            selected = own.selected_clean.astype("boolean")
            if selected[members].isna().any():
                return None
            kept = selected.fillna(False).to_numpy(dtype=bool) & members
            return kept & ~own.is_noisy.to_numpy(dtype=bool), kept
        score = own.score.to_numpy(dtype=float)
        if not np.isfinite(score[members]).all():
            return None
        return score, own.is_noisy.to_numpy(dtype=bool), members

    def values(self, scores: pd.DataFrame, run_ids: Sequence[str], metric: str, noise_type: str | None = None,
               resampled: bool = True) -> np.ndarray | None:
        """(n_resamples, runs) of ``metric`` on every resample (``resampled`` False: (1, runs),
        every sample once); None when a run lacks the rows or the partition or score.
        ``scores``: final-epoch ``scores`` rows of one ``score_name``."""
        if metric not in SAMPLE_METRICS:
            raise ValueError(f"unknown sample metric {metric!r}; choose one of {', '.join(SAMPLE_METRICS)}")
        weights = self.counts if resampled else np.ones((1, len(self.sample_ids)), dtype=np.float32)
        columns = []
        for run_id in run_ids:
            own = self._aligned(scores, run_id)
            arrays = None if own is None else self._arrays(own, metric, noise_type)
            if arrays is None:
                return None
            if metric == "purity":
                clean_kept, kept = arrays
                with np.errstate(invalid="ignore", divide="ignore"):
                    columns.append((weights @ clean_kept.astype(np.float32)) / (weights @ kept.astype(np.float32)))
            else:
                score, positive, members = arrays
                columns.append(weighted_auroc(score[members], positive[members], weights[:, members]))
        return np.stack(columns, axis=1) if columns else None
