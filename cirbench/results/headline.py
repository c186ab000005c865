"""The headline of a stored ``metrics`` table: the validation recall that calibration, the
collapse guard and the run summary read, the report's columns (the papers' averages) and
the single number that decides "best" (pandas only, so the engine imports no report)."""

from __future__ import annotations

import math
import re

import pandas as pd

# Groups and metrics a dataset's summarize function adds (FashionIQ's "average" group, CIRR's
# "mean(recall@5,recall_subset@1)"); the report recomputes those averages itself.
SUMMARY_GROUPS: frozenset[str] = frozenset({"average", "avg", "mean", "summary"})
SUMMARY_METRIC = re.compile(r"(mean|avg|average)\(.*\)")
FIQ_AVG = "AVG"
CIRR_AVG = "Avg(R@5, R_sub@1)"


def _metric_order(metric: str) -> tuple:
    match = re.fullmatch(r"recall(_subset)?@(\d+)", metric)
    return (0, bool(match.group(1)), int(match.group(2)), metric) if match else (1, False, 0, metric)


def metric_label(metric: str) -> str:
    """``recall@10`` -> ``R@10``, ``recall_subset@1`` -> ``R_sub@1``; other names unchanged."""
    return metric.replace("recall_subset@", "R_sub@").replace("recall@", "R@")


def metric_groups(metrics: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(all groups in display order with ``all`` first, the category groups among them)."""
    groups = [g for g in metrics.group.dropna().unique() if str(g).lower() not in SUMMARY_GROUPS]
    categories = sorted(g for g in groups if g != "all")
    return (["all"] if "all" in groups else []) + categories, categories


def wide_columns(metrics: pd.DataFrame, index: list[str]) -> pd.DataFrame:
    """The reported numbers (percent) of ``metrics`` rows, one row per ``index`` value.

    Columns are ``<metric>`` for the ``all`` group, ``<group> <metric>`` for each category
    (a dataset's own summary groups and ``mean(...)`` metrics are left out), then the
    derived averages: FashionIQ's ``Avg R@10``, ``Avg R@50`` and ``AVG`` over
    categories when there are at least two categories with R@10 and R@50, and CIRR's
    ``Avg(R@5, R_sub@1)`` when the ``all`` group has both.
    """
    groups, categories = metric_groups(metrics)
    wide = metrics.pivot_table(index=index, columns=["group", "metric"], values="value", aggfunc="mean") * 100.0
    out = pd.DataFrame(index=wide.index)
    for group in groups:
        names = sorted({m for g, m in wide.columns if g == group and not SUMMARY_METRIC.fullmatch(m)}, key=_metric_order)
        for metric in names:
            label = metric_label(metric) if group == "all" else f"{group} {metric_label(metric)}"
            out[label] = wide[(group, metric)]
    fiq = [c for c in categories if (c, "recall@10") in wide.columns and (c, "recall@50") in wide.columns]
    if len(fiq) >= 2:
        out["Avg R@10"] = wide[[(c, "recall@10") for c in fiq]].mean(axis=1, skipna=False)
        out["Avg R@50"] = wide[[(c, "recall@50") for c in fiq]].mean(axis=1, skipna=False)
        out[FIQ_AVG] = (out["Avg R@10"] + out["Avg R@50"]) / 2
    if ("all", "recall@5") in wide.columns and ("all", "recall_subset@1") in wide.columns:
        out[CIRR_AVG] = (wide[("all", "recall@5")] + wide[("all", "recall_subset@1")]) / 2
    return out


def headline_column(columns: list[str]) -> str | None:
    """The single number that decides "best": the papers' average if present, else R@10."""
    for name in (FIQ_AVG, CIRR_AVG, "R@10"):
        if name in columns:
            return name
    return columns[0] if columns else None




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
