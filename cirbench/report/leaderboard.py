"""The report's leaderboard, the first thing it shows: per setting, methods (rows) x noise
rates (columns), the claims' metric and R@10 side by side (mean ± std over seeds, percent) at
the epoch the claims read (:func:`~cirbench.report.selection.rule_view` under the claims'
rule).

Each cell carries its paired comparison with the baseline (the method whose role is
``baseline``) at that rate and the column's leaders,
both judged by the claims' own rule (:func:`~cirbench.report.claims.recall_judge`): the best
of a column is bold only where it beats every other ranked method; otherwise it and the
methods it does not beat are tied for the lead. Only hosted and plugin methods are ranked;
the perfect filter, the bound (the baseline at 0%) and the reference rows are lines of their
own, never ranked. A cell whose R@10 is below ``zero_shot``'s is marked: a fine-tune that
ends below where it began.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import pandas as pd

from cirbench.report.bootstrap import N_RESAMPLES
from cirbench.report.claims import Check, recall_judge
from cirbench.report.load import Setting
from cirbench.report.references import bound_label, reference_stats
from cirbench.report.selection import RuleView, rule_view
from cirbench.report.significance import DOES_NOT_HOLD, HOLDS, INCONCLUSIVE, Term, difference
from cirbench.report.tables import headline_column, rate_label, run_columns, summarize
from cirbench.results.labels import ZERO_SHOT_ROW
from cirbench.results.metrics import FASHIONIQ_AVERAGE, RECALL, metric_label
from cirbench.results.roles import BASELINE
from cirbench.results.selection import DEFAULT_RULE

RECALL_COLUMNS: tuple[str, ...] = (FASHIONIQ_AVERAGE.part_column(RECALL), metric_label(RECALL))
"""The R@10 shown beside the claims' metric: FashionIQ's category average, else the ``all`` group's."""
ZERO_SHOT = ZERO_SHOT_ROW
BETTER, WORSE, UNSEPARATED = "better", "worse", "inconclusive"
VERSUS: dict[str, str] = {HOLDS: BETTER, DOES_NOT_HOLD: WORSE, INCONCLUSIVE: UNSEPARATED}
"""The verdict of ``method - baseline > 0`` as the leaderboard names it."""
RANKED, PERFECT_FILTER, BOUND_ROW, REFERENCE_ROW = "ranked", "perfect filter", "bound", "reference"
BEST, TIED = "best", "tied"
Judge = Callable[[str, Sequence[Term]], Check]
"""The claims' comparison of ``terms > 0`` (:func:`~cirbench.report.claims.recall_judge`)."""


@dataclass(frozen=True)
class Stat:
    """Mean, std (ddof 1) and number of seeds of one column of one cell, percent."""

    mean: float
    std: float
    n: int


@dataclass
class LeaderCell:
    """One cell: the claims' metric and R@10, and what the claims' rule says of it."""

    metric: Stat
    recall: Stat
    versus: str = ""
    """:data:`BETTER`, :data:`WORSE` or :data:`UNSEPARATED` than the baseline at the rate (empty: the baseline itself, or none)."""
    lead: str = ""
    """:data:`BEST` (ahead of every other ranked method), :data:`TIED` (a leader not separated) or empty."""
    below_start: bool = False
    """Its R@10 is below ``zero_shot``'s."""
    collapsed: bool = False


@dataclass
class LeaderRow:
    """One line: a ranked method, the perfect filter (cells per rate), or the bound or a
    reference row (one ``span`` cell, the same at every rate)."""

    kind: str
    method: str
    label: str
    cells: dict[float, LeaderCell] = field(default_factory=dict)
    span: LeaderCell | None = None


@dataclass
class Leaderboard:
    """A setting's leaderboard: its columns, rows and how its numbers were read."""

    metric: str
    recall: str
    rates: list[float]
    rows: list[LeaderRow]
    rule: str
    epochs: str
    """Which epoch each run is read at, in words."""
    seeds: list[int]
    start: float
    """``zero_shot``'s R@10 (NaN without that row)."""
    baseline: str
    """The method each cell is compared with: the setting's baseline, by role."""

    @property
    def ranked(self) -> list[LeaderRow]:
        """The rows ranked against each other."""
        return [r for r in self.rows if r.kind == RANKED]

    @property
    def unranked(self) -> list[LeaderRow]:
        """The perfect filter, the bound and the reference rows, in that order."""
        return [r for r in self.rows if r.kind != RANKED]


def _stat(stats: pd.DataFrame, key: object, column: str | None) -> Stat:
    if column is None or key not in stats.index or ("mean", column) not in stats.columns:
        return Stat(math.nan, math.nan, 0)
    n = stats.loc[key, ("n", column)]
    return Stat(float(stats.loc[key, ("mean", column)]), float(stats.loc[key, ("std", column)]), int(n) if pd.notna(n) else 0)


def epochs_text(view: RuleView) -> str:
    """The epoch the leaderboard (and the claims) read each run at, in words."""
    if view.rule == "holdout":
        text = "at each run's best epoch on its held-out noisy triplets (the claims' `holdout` rule"
        return text + (f"; {view.fallback} of {len(view.epochs)} runs without a held-out split at their last epoch)"
                       if view.fallback else ")")
    return f"at the epoch the `{view.rule}` rule selects (the claims' rule)"


def _mark_leaders(rows: list[LeaderRow], rates: list[float], judge: Judge) -> None:
    """Mark each column's leader :data:`BEST` where the claims' rule puts it ahead of every
    other ranked method, else it and those it is not ahead of :data:`TIED`."""
    for rate in rates:
        contenders = [(row.method, row.cells[rate]) for row in rows
                      if row.kind == RANKED and rate in row.cells and math.isfinite(row.cells[rate].metric.mean)]
        if len(contenders) < 2:
            continue
        top, top_cell = max(contenders, key=lambda pair: pair[1].metric.mean)
        tied = [cell for method, cell in contenders if method != top
                and judge(f"{top} vs {method}, {rate_label(rate)}", difference(top, method, rate)).verdict != HOLDS]
        top_cell.lead = TIED if tied else BEST
        for cell in tied:
            cell.lead = TIED


def _cells(setting: Setting, stats: pd.DataFrame, method: str, columns: tuple[str, str | None], start: float,
           judge: Judge) -> dict[float, LeaderCell]:
    cells, baseline = {}, setting.role(BASELINE)
    for rate in setting.rates:
        metric = _stat(stats, (rate, method), columns[0])
        if not math.isfinite(metric.mean):
            continue
        cell = LeaderCell(metric, _stat(stats, (rate, method), columns[1]), collapsed=bool(setting.collapse_mark(method, rate)))
        cell.below_start = cell.recall.mean < start
        if method != baseline and (rate, baseline) in stats.index:
            check = judge(f"{method} vs {baseline}, {rate_label(rate)}", difference(method, baseline, rate))
            cell.versus = VERSUS.get(check.verdict, "")
        cells[rate] = cell
    return cells


def build_leaderboard(setting: Setting, n_resamples: int = N_RESAMPLES, seed: int = 0,
                      rule: str = DEFAULT_RULE) -> Leaderboard | None:
    """The leaderboard of ``setting`` read as the claims read it (``rule``, the bootstrap's
    ``n_resamples`` and ``seed``); None without validation recall."""
    view = rule_view(setting, rule)
    per_run = run_columns(view.setting)
    metric = headline_column(list(per_run.columns))
    if metric is None:
        return None
    recall = next((c for c in RECALL_COLUMNS if c in per_run.columns), None)
    stats = summarize(view.setting, per_run[list(dict.fromkeys(c for c in (metric, recall) if c))])
    references = reference_stats(view.setting)
    start = _stat(references, ZERO_SHOT, recall).mean
    judge = recall_judge(view.setting, n_resamples, seed)
    rows = [LeaderRow(PERFECT_FILTER if m in setting.oracles else RANKED, m, setting.label(m),
                      _cells(setting, stats, m, (metric, recall), start, judge)) for m in setting.methods]
    _mark_leaders(rows, setting.rates, judge)
    rows = [r for r in rows if r.kind == RANKED] + [r for r in rows if r.kind != RANKED]
    bound, baseline = bound_label(setting), setting.role(BASELINE)
    for name in sorted(references.index, key=lambda n: n != bound):
        span = LeaderCell(_stat(references, name, metric), _stat(references, name, recall))
        if name == bound:
            span.below_start = span.recall.mean < start
        rows.append(LeaderRow(BOUND_ROW if name == bound else REFERENCE_ROW, baseline if name == bound else str(name),
                              str(name), span=span))
    seeds = sorted({int(s) for s in setting.runs.seed})
    return Leaderboard(metric, recall or "", setting.rates, rows, rule, epochs_text(view), seeds, start, baseline)
