"""Selection rules in the report (:mod:`cirbench.results.selection`): the view of a setting
under a rule (:func:`rule_view`) that the claims are checked on, and the sentence that names
the rule (:func:`describe_rule`). The "Model selection" table of the rules side by side is
:mod:`cirbench.report.tables.selection`."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from cirbench.report.analysis.loading.load import Setting


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
