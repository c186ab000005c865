"""The report's "Model selection" table: per method and noise rate the headline under each
selection rule (:mod:`cirbench.results.selection`) and the inflation a peek at the reported
queries buys, ``val_peek - holdout`` (and ``val_peek - final``, which every run has)."""

from __future__ import annotations

import math

import pandas as pd

from cirbench.report.load import Setting
from cirbench.report.tables import (
    Cell, TableModel, _format, collapse_note, rate_label, seed_stats, validation_metrics,
)
from cirbench.results.selection import RULES, headline_by_epoch, selected_epochs

RULE_LABELS: dict[str, str] = {"final": "final", "holdout": "holdout", "val_peek": "val_peek (optimistic)"}


def selection_values(setting: Setting) -> pd.DataFrame:
    """Per run (index ``run_id``): each rule's selected epoch (``<rule>_epoch``, NaN where
    the rule has nothing to read) and the validation headline there (``<rule>``, percent)."""
    rows = []
    for run_id, own in setting.metrics.groupby("run_id"):
        val = headline_by_epoch(own, "val")
        row: dict[str, object] = {"run_id": run_id}
        for rule, epoch in selected_epochs(own).items():
            row[f"{rule}_epoch"] = math.nan if epoch is None else epoch
            row[rule] = float(val.get(epoch, math.nan)) if epoch is not None else math.nan
        rows.append(row)
    columns = ["run_id", *(f"{r}_epoch" for r in RULES), *RULES]
    return pd.DataFrame(rows, columns=columns).set_index("run_id")


def selection_table(setting: Setting) -> TableModel | None:
    """The headline under ``final``, ``holdout`` and ``val_peek`` per method and rate (mean ±
    std over seeds) and the mean inflations; None without validation metrics."""
    if validation_metrics(setting).empty:
        return None
    values = selection_values(setting)
    keyed = setting.runs.set_index("run_id")[["noise_rate", "method"]].join(values, how="inner")
    keyed["peek_vs_holdout"] = keyed["val_peek"] - keyed["holdout"]
    keyed["peek_vs_final"] = keyed["val_peek"] - keyed["final"]
    stats = seed_stats(keyed.groupby(["noise_rate", "method"])[[*RULES, "peek_vs_holdout", "peek_vs_final"]])
    rows, shown = [], []
    for rate in setting.rates:
        block = stats.xs(rate, level="noise_rate")
        methods = [m for m in setting.methods if m in block.index]
        for i, method in enumerate(methods):
            cells = []
            for rule in RULES:
                mean, std, n = (float(block.loc[method, (k, rule)]) for k in ("mean", "std", "n"))
                cells.append(Cell(_format(mean, std, int(n))))
            for column in ("peek_vs_holdout", "peek_vs_final"):
                mean = float(block.loc[method, ("mean", column)])
                cells.append(Cell(f"{mean:+.2f}" if math.isfinite(mean) else "-"))
            rows.append((rate_label(rate) if i == 0 else "", setting.label(method, rate), cells))
            shown.append((method, rate))
    if not rows:
        return None
    held = int(setting.runs.get("n_holdout", pd.Series(dtype=int)).fillna(0).gt(0).sum())
    note = (
        "Validation headline (%) at the epoch each rule selects, mean ± std over seeds: final = the last epoch; "
        "holdout = the best epoch on the held-out noisy training triplets (no clean data, no reported query read); "
        "val_peek = the best epoch on the reported validation queries, the releases' practice, optimistic by "
        "construction. The inflation columns are mean differences in percentage points. "
        + (f"{held} of {len(setting.runs)} runs have a held-out split (`cirbench run --holdout 0.1`); "
           "holdout is '-' for the others." if held < len(setting.runs) else "Every run has a held-out split.")
        + collapse_note(setting, shown)
    )
    columns = [*(RULE_LABELS[r] for r in RULES), "val_peek - holdout", "val_peek - final"]
    return TableModel("Model selection", columns, rows, note)
