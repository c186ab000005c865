"""The headline rows of a stored ``metrics`` table: the validation recall that calibration,
the collapse guard and the run summary read (pandas only, so the engine imports no report)."""

from __future__ import annotations

import math

import pandas as pd


def headline_rows(metrics: pd.DataFrame, metric: str | None = None) -> pd.DataFrame:
    """The validation rows of the headline group (FashionIQ's category ``average`` where the
    rows have it, else ``all``), every epoch; only those of ``metric`` when given."""
    rows = metrics[metrics.split == "val"]
    rows = rows[rows.group == ("average" if (rows.group == "average").any() else "all")]
    return rows if metric is None else rows[rows.metric == metric]


def headline_recall(results: dict[str, dict[str, float]], metric: str = "recall@10") -> float:
    """``metric`` of the headline group in an evaluation's results dict (``all`` where the
    results have it, else FashionIQ's category ``average``; NaN when neither holds it), as
    the progress line shows it."""
    return results.get("all", results.get("average", {})).get(metric, math.nan)
