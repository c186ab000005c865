"""The "Model selection" table of the report (the rules of :mod:`cirbench.results.selection`):
per method and noise rate the headline under each rule and the inflation a peek at the
reported queries buys, ``val_peek - holdout`` and ``val_peek - final``."""

from __future__ import annotations

import math

from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.loading.numbers import ON_VALIDATION, format_mean, format_number, rate_label, seed_stats, validation_metrics
from cirbench.report.tables.model import Cell, TableModel, collapse_note, read_seeds
from cirbench.results.selection import RULES

RULE_LABELS: dict[str, str] = {"final": "final", "holdout": "holdout", "val_peek": "val_peek (optimistic)"}


def selection_table(setting: Setting) -> TableModel | None:
    """The headline under ``final``, ``holdout`` and ``val_peek`` per method and rate (mean ±
    std over seeds) and the mean inflations; None without validation metrics."""
    if validation_metrics(setting).empty:
        return None
    values = setting.selection
    keyed = setting.runs.set_index("run_id")[["noise_rate", "method"]].join(values, how="inner")
    keyed["peek_vs_holdout"] = keyed["val_peek"] - keyed["holdout"]
    keyed["peek_vs_final"] = keyed["val_peek"] - keyed["final"]
    stats = seed_stats(keyed.groupby(["noise_rate", "method"])[[*RULES, "peek_vs_holdout", "peek_vs_final"]])
    rows, shown = [], []
    defaults = [t for t in setting.trials if t.endswith(":trial0")]  # an older sweep's defaults (now the plain rows)
    for rate in setting.rates:
        block = stats.xs(rate, level="noise_rate")
        methods = [m for m in [*setting.methods, *defaults] if m in block.index]
        for i, method in enumerate(methods):
            cells = []
            for rule in RULES:
                mean, std, n = (float(block.loc[method, (k, rule)]) for k in ("mean", "std", "n"))
                cells.append(Cell(format_mean(mean, std, int(n))))
            for column in ("peek_vs_holdout", "peek_vs_final"):
                mean = float(block.loc[method, ("mean", column)])
                cells.append(Cell(format_number(mean, sign=True)))
            rows.append((rate_label(rate) if i == 0 else "", setting.label(method, rate), cells))
            shown.append((method, rate))
    if not rows:
        return None
    held = int(setting.runs.n_holdout.gt(0).sum())
    note = (
        "This table compares the selection rules; every other part of the report reads the holdout rule (the claims'). "
        f"Validation headline (%, {ON_VALIDATION}) at the epoch each rule selects, mean ± std over seeds: final = the last epoch; "
        "holdout = the best epoch on the held-out noisy training triplets (no clean data, no reported query read); "
        "val_peek = the best epoch on the reported validation queries, the releases' practice, optimistic by "
        "construction. The inflation columns are mean differences in percentage points. "
        + ("Rows `<method>:trial0` are an older sweep's defaults, run with a held-out split. "
           if defaults else "")
        + (f"{held} of {len(setting.runs)} runs have a held-out split (`cirbench run --holdout 0.1`); "
           "holdout is '-' for the others." if held < len(setting.runs) else "Every run has a held-out split.")
        + collapse_note(setting, shown)
    )
    columns = [*(RULE_LABELS[r] for r in RULES), "val_peek - holdout", "val_peek - final"]
    return TableModel("Model selection", columns, rows, note, read_seeds(setting, shown, keyed.index))
