"""A study's pending cells timed at the pace its results folder has measured (``cirbench
study FILE --plan``): each pending cell at the median wall time of the completed cells of its
method in that folder (a variant or a sweep trial read as its method, ``sprc:release`` as
``sprc``; a label without a measured method, such as a kept-set cell, at the median of every
cell), summed (a cell two grids share once) and divided by the cells run at once. The FLOP count says what a cell costs
anywhere; this says what the rest of a study costs on the machine that ran its first cells."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from cirbench.api.plan import GridPlan


@dataclass(frozen=True)
class Pace:
    """The pending cells' measured cost: cell-seconds in all, by method, and the cells timed at
    the folder's overall median (no cell of their method measured)."""

    seconds: float
    by_method: dict[str, float]
    pending: int
    unmeasured: int

    def hours(self, jobs: int) -> float:
        """Hours of wall time at ``jobs`` cells at once."""
        return self.seconds / max(jobs, 1) / 3600


def measured_seconds(results: Path) -> pd.Series:
    """Median wall seconds of the completed cells per method (index: the label's method) in the
    results folder ``results``; empty where it holds none."""
    runs_dir = results / "runs"
    files = sorted(runs_dir.glob("*.parquet")) if runs_dir.is_dir() else []
    if not files:
        return pd.Series(dtype=float)
    runs = pd.concat([pd.read_parquet(f, columns=["method", "status", "is_reference", "wall_seconds"]) for f in files])
    done = runs[(runs.status == "completed") & ~runs.is_reference.astype(bool) & (runs.wall_seconds > 0)]
    return done.groupby(done.method.str.split(":").str[0]).wall_seconds.median()


def pace(results: Path, plans: list[GridPlan]) -> Pace | None:
    """The ``plans``' pending cells timed at ``results``' measured pace (see the module
    docstring); None where the folder has no completed cell to time them by."""
    medians = measured_seconds(results)
    if medians.empty:
        return None
    overall = float(medians.median())
    labels = {run_id: label for plan in plans for run_id, label in plan.pending_labels.items()}
    by_method: dict[str, float] = {}
    unmeasured = 0
    for label in labels.values():
        method = label.split(":")[0]
        seconds = float(medians.get(method, math.nan))
        if math.isnan(seconds):
            seconds, unmeasured = overall, unmeasured + 1
        by_method[method] = by_method.get(method, 0.0) + seconds
    return Pace(sum(by_method.values()), by_method, len(labels), unmeasured)
