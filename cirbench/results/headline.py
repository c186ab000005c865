"""The headline of a stored ``metrics`` table: the validation recall that calibration, the
collapse guard and the run summary read, the report's columns (the papers' averages, as
:mod:`cirbench.results.metrics` defines them) and the single number that decides "best"
(pandas only, so the engine imports no report)."""

from __future__ import annotations

import math
import re

import pandas as pd

from cirbench.results.metrics import (  # noqa: F401  (re-exported: the report's tables read them from here)
    AVERAGE_GROUP, AVERAGES, CIRR_AVG, FIQ_AVG, RECALL, RECALL_NAME, headline_column, metric_label,
)

# Groups and metrics a dataset's summarize function adds (FashionIQ's "average" group, CIRR's
# "mean(recall@5,recall_subset@1)"); the report recomputes those averages itself.
SUMMARY_GROUPS: frozenset[str] = frozenset({"average", "avg", "mean", "summary"})
SUMMARY_METRIC = re.compile(r"(mean|avg|average)\(.*\)")


def _metric_order(metric: str) -> tuple:
    match = RECALL_NAME.fullmatch(metric)
    return (0, bool(match.group("subset")), int(match.group("k")), metric) if match else (1, False, 0, metric)


def metric_groups(metrics: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(all groups in display order with ``all`` first, the category groups among them)."""
    groups = [g for g in metrics.group.dropna().unique() if str(g).lower() not in SUMMARY_GROUPS]
    categories = sorted(g for g in groups if g != "all")
    return (["all"] if "all" in groups else []) + categories, categories


def wide_columns(metrics: pd.DataFrame, index: list[str]) -> pd.DataFrame:
    """The reported numbers (percent) of ``metrics`` rows, one row per ``index`` value.

    Columns are ``<metric>`` for the ``all`` group, ``<group> <metric>`` for each category
    (a dataset's own summary groups and ``mean(...)`` metrics are left out), then the
    :data:`~cirbench.results.metrics.AVERAGES` whose parts are there: one over categories
    (FashionIQ's ``Avg R@10``, ``Avg R@50`` and ``AVG``) when at least two categories have
    every part, one of the ``all`` group (CIRR's ``Avg(R@5, R_sub@1)``) when it has every part.
    """
    groups, categories = metric_groups(metrics)
    wide = metrics.pivot_table(index=index, columns=["group", "metric"], values="value", aggfunc="mean") * 100.0
    out = pd.DataFrame(index=wide.index)
    for group in groups:
        names = sorted({m for g, m in wide.columns if g == group and not SUMMARY_METRIC.fullmatch(m)}, key=_metric_order)
        for metric in names:
            label = metric_label(metric) if group == "all" else f"{group} {metric_label(metric)}"
            out[label] = wide[(group, metric)]
    for average in AVERAGES:
        if average.over_categories:
            over = [c for c in categories if all((c, part) in wide.columns for part in average.parts)]
            if len(over) >= 2:
                for part in average.parts:
                    out[average.part_column(part)] = wide[[(c, part) for c in over]].mean(axis=1, skipna=False)
                out[average.column] = average.of([out[average.part_column(part)] for part in average.parts])
        elif all(("all", part) in wide.columns for part in average.parts):
            out[average.column] = average.of([wide[("all", part)] for part in average.parts])
    return out


def headline_rows(metrics: pd.DataFrame, metric: str | None = None) -> pd.DataFrame:
    """The validation rows of the headline group (FashionIQ's category ``average`` where the
    rows have it, else ``all``), every epoch; only those of ``metric`` when given."""
    rows = metrics[metrics.split == "val"]
    rows = rows[rows.group == (AVERAGE_GROUP if (rows.group == AVERAGE_GROUP).any() else "all")]
    return rows if metric is None else rows[rows.metric == metric]


def headline_recall(results: dict[str, dict[str, float]], metric: str = RECALL) -> float:
    """``metric`` of the headline group in an evaluation's results dict (``all`` where the
    results have it, else FashionIQ's category ``average``; NaN when neither holds it), as
    the progress line shows it."""
    return results.get("all", results.get(AVERAGE_GROUP, {})).get(metric, math.nan)
