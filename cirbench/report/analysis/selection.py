"""Selection rules in the report (:mod:`cirbench.results.selection`): the "Model selection"
table (per method and noise rate the headline under each rule and the inflation a peek at
the reported queries buys, ``val_peek - holdout`` and ``val_peek - final``), and the view of
a setting under a rule (:func:`rule_view`) that the claims are checked on."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd

from cirbench.report.analysis.load import Setting
from cirbench.report.analysis.numbers import ON_VALIDATION, format_mean, rate_label, seed_stats, validation_metrics
from cirbench.report.tables.model import Cell, TableModel, collapse_note
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
                cells.append(Cell(f"{mean:+.2f}" if math.isfinite(mean) else "-"))
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
    return TableModel("Model selection", columns, rows, note)


@dataclass
class RuleView:
    """``setting`` as ``rule`` reports it: every run's validation metrics and ranks at the
    epoch the rule selects (its last epoch where the rule has nothing to read: ``fallback``
    runs), ``epochs`` per run, and ``missing_ranks``: runs with stored ranks, but none at the
    selected epoch (written before ranks were kept at every selected epoch)."""

    rule: str
    setting: Setting
    epochs: pd.Series
    fallback: int
    missing_ranks: int

    @property
    def usable(self) -> bool:
        """Whether the view's query bootstrap has what the final epoch's has."""
        return self.missing_ranks == 0


def rule_view(setting: Setting, rule: str) -> RuleView:
    """The :class:`RuleView` of ``setting`` under ``rule`` (``final`` is the setting as loaded)."""
    values = setting.selection
    chosen = values[f"{rule}_epoch"]
    fallback = chosen.isna() & values["final_epoch"].notna()
    epochs = chosen.fillna(values["final_epoch"])
    if rule == "final":
        return RuleView(rule, setting, epochs, 0, 0)
    metrics = setting.metrics
    at = metrics.run_id.map(epochs)
    metrics = metrics[(metrics.split != "val") | at.isna() | (metrics.epoch == at)]
    stored = setting.epoch_ranks
    if len(stored):
        ranks = stored[stored.epoch == stored.run_id.map(epochs)]
        missing = len(set(stored.run_id) - set(ranks.run_id))
    else:
        ranks, missing = stored, 0
    view = replace(setting, metrics=metrics.reset_index(drop=True), ranks=ranks.reset_index(drop=True))
    return RuleView(rule, view, epochs, int(fallback.sum()), missing)


def describe_rule(view: RuleView) -> str:
    """The sentence that says which rule a section's verdicts use."""
    text = f"Verdicts use the `{view.rule}` selection rule"
    if view.rule == "holdout":
        text += " (each run at its best held-out epoch"
        text += (f"; {view.fallback} of {len(view.epochs)} runs have no held-out split and are read at their last epoch)"
                 if view.fallback else ")")
    return text + "; a verdict that another rule changes names it beside the verdict."
