"""The numbers every room of the report reads a setting by: each run's final-epoch recall
columns (:func:`run_columns`) and their mean, std and seed count per cell (:func:`summarize`),
each run's kept-set quality (:func:`purity_per_run`), the one rule every printed number is rounded by
(:func:`~cirbench.results.metrics.format_number`), and the words that say which epoch a number is read at and how a rate and a mean are printed."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cirbench.report.analysis.loading.load import Setting, final_epoch
from cirbench.results.headline import (  # noqa: F401  (re-exported: the report's modules read them from here)
    CIRR_AVG, FIQ_AVG, headline_column, metric_groups, wide_columns,
)
from cirbench.results.labels import rate_label  # noqa: F401  (re-exported: how the report prints a rate)
from cirbench.results.metrics import STORED_PLACES, format_number  # noqa: F401  (re-exported: the one rounding rule)


CLAIMS_EPOCH = "at each run's held-out-selected epoch (the claims' rule)"
"""How every table, figure and line of the report that reads recall says which epoch it read,
in these words (:func:`~cirbench.report.analysis.loading.selection.rule_view` under the default rule; a run
without a held-out split is read at its last epoch, which the leaderboard counts); a part that reads another epoch
says so with :data:`LAST_EPOCH` or, like the model selection table, names its rules."""
LAST_EPOCH = "at each run's last epoch"
"""How a part that reads the last epoch says so: the kept sets and noise scores, which the
claims read there too, and the cells' table ``final_metrics.csv``."""
ON_VALIDATION = "recall on the validation queries"
"""What the recall numbers are: never the held-out noisy triplets, which only pick the epoch."""


def validation_split(metrics: pd.DataFrame) -> str | None:
    """The split the tables report: ``val`` if present, else the first split by name."""
    splits = sorted(metrics.split.dropna().unique())
    return "val" if "val" in splits else (splits[0] if splits else None)


def validation_metrics(setting: Setting) -> pd.DataFrame:
    """The metrics rows of the reported split (see :func:`validation_split`), every epoch."""
    split = validation_split(setting.metrics)
    return setting.metrics[setting.metrics.split == split]


def run_columns(setting: Setting) -> pd.DataFrame:
    """Final-epoch :func:`wide_columns` of every run, index ``run_id``."""
    metrics = validation_metrics(setting)
    if metrics.empty:
        return pd.DataFrame(index=pd.Index([], name="run_id"))
    return wide_columns(final_epoch(metrics), ["run_id"])


def summarize(setting: Setting, per_run: pd.DataFrame) -> pd.DataFrame:
    """Mean, std (ddof 1) and seed count of every column per (noise rate, method)."""
    keyed = setting.runs.set_index("run_id")[["noise_rate", "method"]].join(per_run, how="inner")
    return seed_stats(keyed.groupby(["noise_rate", "method"]))


def seed_stats(grouped) -> pd.DataFrame:
    """``mean``, ``std`` (ddof 1) and ``n`` of every column of a grouped frame, side by side."""
    return pd.concat({"mean": grouped.mean(), "std": grouped.std(ddof=1), "n": grouped.count()}, axis=1)


def format_points(difference: float) -> str:
    """A difference in percentage points, signed, as every line, table and figure label that
    compares two numbers prints it: ``1.65`` -> ``+1.7`` (``-`` without a value)."""
    return format_number(difference, 1, sign=True)


def format_percent(value: float) -> str:
    """A share or purity already in percent as every table, line and figure label prints it:
    ``42.85`` -> ``42.9`` (``-`` without a value)."""
    return format_number(value, 1)


def format_mean(mean: float, std: float, n: int) -> str:
    """A table cell's ``mean ± std`` over ``n`` seeds (the mean alone without a spread; ``-`` without a mean)."""
    if not math.isfinite(mean):
        return "-"
    return f"{format_number(mean)} ± {format_number(std)}" if n >= 2 and math.isfinite(std) else format_number(mean)


PURITY_COLUMNS: dict[str, str] = {
    "purity": "Purity",
    "kept": "Kept",
    "clean_recall": "Clean kept",
    "noise_recall": "Noise caught",
    "reference": "Ref. caught",
    "caption": "Caption caught",
    "target": "Target caught",
    "auroc": "AUROC",
}


def purity_per_run(setting: Setting) -> pd.DataFrame:
    """Final-epoch kept-set quality per run, in percent (AUROC x 100), index ``run_id``."""
    last = final_epoch(setting.purity)
    if last.empty:
        return pd.DataFrame()
    overall = last[last.noise_type == "all"].set_index("run_id")
    out = pd.DataFrame(index=overall.index)
    out["purity"] = overall.purity * 100
    n_sel = pd.to_numeric(overall.n_selected, errors="coerce")
    out["kept"] = n_sel / overall.n_samples.astype(float) * 100
    out["clean_recall"] = overall.clean_recall * 100
    out["noise_recall"] = overall.noise_recall * 100
    by_type = last[last.noise_type != "all"].pivot_table(index="run_id", columns="noise_type", values="noise_recall", aggfunc="mean")
    out = out.rename(columns=PURITY_COLUMNS)
    for kind in setting.noise_types:  # every type the results hold, a plugin protocol's too
        label = PURITY_COLUMNS.get(kind, f"{kind.capitalize()} caught")
        out[label] = by_type[kind].reindex(out.index) * 100 if kind in by_type.columns else np.nan
    out[PURITY_COLUMNS["auroc"]] = overall.auroc * 100
    return out


def flagged_shares(setting: Setting) -> dict[float, dict[str, float]]:
    """Per noise rate and partitioning method, the share of all training samples not kept
    as clean at the final epoch (mean over seeds): what a random partition with the same
    flag rate catches of every noise type."""
    last = final_epoch(setting.purity)
    overall = last[(last.noise_type == "all") & (last.noise_rate > 0)]
    selected = pd.to_numeric(overall.n_selected, errors="coerce")
    share = (1.0 - selected / pd.to_numeric(overall.n_samples, errors="coerce")).dropna()
    result: dict[float, dict[str, float]] = {}
    for (rate, method), value in share.groupby([overall.noise_rate, overall.method]).mean().items():
        result.setdefault(float(rate), {})[method] = float(value)
    return result
