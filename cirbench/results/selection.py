"""Model selection: which epoch of a cell is reported (``docs/selection.md``).

- ``final``: the last epoch.
- ``holdout``: the epoch with the best headline on the held-out noisy split
  (:mod:`cirbench.data.noise.holdout`): what a user without clean data can do. It reads the
  ``holdout`` rows of the metrics only.
- ``val_peek``: the epoch with the best headline on the reported validation queries: the
  releases' practice, optimistic by construction.

The headline is :func:`~cirbench.results.headline.headline_column` of the split's columns
(the papers' average where the split has its parts, else R@10); ties go to the earliest
epoch. Pandas only: the engine and the report both select with it.
"""

from __future__ import annotations

import math

import pandas as pd

from cirbench.results.headline import headline_column, wide_columns

RULES: tuple[str, ...] = ("final", "holdout", "val_peek")
DEFAULT_RULE = "holdout"
"""The rule the claims use where a run has a held-out split."""
RULE_SPLIT: dict[str, str] = {"holdout": "holdout", "val_peek": "val"}
"""The metrics split each peaking rule reads."""


def headline_by_epoch(metrics: pd.DataFrame, split: str) -> pd.Series:
    """The headline (percent) of each epoch of one run's ``split`` rows, index ``epoch``
    (empty when the run has no such rows)."""
    rows = metrics[metrics.split == split]
    if rows.empty:
        return pd.Series(dtype=float, index=pd.Index([], name="epoch"))
    wide = wide_columns(rows, ["epoch"])
    return wide[headline_column(list(wide.columns))].sort_index()


def selected_epoch(metrics: pd.DataFrame, rule: str) -> int | None:
    """The epoch ``rule`` selects from one run's ``metrics`` rows; None where the rule's
    split has no finite value (a run without a held-out split under ``holdout``)."""
    if rule not in RULES:
        raise ValueError(f"unknown selection rule {rule!r}; rules are {', '.join(RULES)}")
    if rule == "final":
        validation = metrics[metrics.split == "val"]
        return int(validation.epoch.max()) if len(validation) else None
    values = headline_by_epoch(metrics, RULE_SPLIT[rule]).dropna()
    return int(values.idxmax()) if len(values) else None


def selected_epochs(metrics: pd.DataFrame) -> dict[str, int | None]:
    """Every rule's epoch of one run: ``{rule: epoch or None}``."""
    return {rule: selected_epoch(metrics, rule) for rule in RULES}


def selection_values(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per run of ``metrics`` (index ``run_id``): each rule's selected epoch (``<rule>_epoch``,
    NaN where the rule has nothing to read) and the validation headline there (``<rule>``)."""
    rows = []
    for run_id, own in metrics.groupby("run_id"):
        val = headline_by_epoch(own, "val")
        row: dict[str, object] = {"run_id": run_id}
        for rule, epoch in selected_epochs(own).items():
            row[f"{rule}_epoch"] = math.nan if epoch is None else epoch
            row[rule] = float(val.get(epoch, math.nan)) if epoch is not None else math.nan
        rows.append(row)
    columns = ["run_id", *(f"{r}_epoch" for r in RULES), *RULES]
    return pd.DataFrame(rows, columns=columns).set_index("run_id")
