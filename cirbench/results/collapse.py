"""The collapse guard: a trained cell that ends up worse than a model that never looks at
the image, or whose loss stopped moving, is flagged ``collapsed`` in ``runs``.

A cell is flagged when

- its validation R@10 (the headline group, as calibration reads it:
  :func:`~cirbench.results.headline.headline_rows`) is below the ``text_only`` reference row's
  (same dataset, backbone and seed) at its final epoch, or at two epochs in a row at any
  point (a collapse that a longer schedule recovers from is still one); or
- its total training loss is constant over an epoch: the median change of the per-step
  ``total`` value from one step to the next is at most :data:`LOSS_ATOL` +
  :data:`LOSS_RTOL` x the epoch's mean magnitude. A real loss changes from batch to batch
  by far more (the batches hold different samples: a median change of 1-3% in the
  project's runs); a frozen one (HUG's constant-prediction value, an exact zero) does not.
  The median, not the range: the batches of an epoch differ in size by one, and a frozen
  constant-prediction loss, which depends on the batch size, takes two values (6.5155 and
  6.5235 at batch 125 and 126), a range of 1e-3 relative. An epoch of one step is not judged.

A flag, not a failure: the cell's numbers stay and its status stays ``completed``; the
report marks the cell, and no claim reads it as a robustness result. Epochs in the reasons
count from 1, as the progress line and the figures do.
"""

from __future__ import annotations

import itertools
import math

import pandas as pd

from cirbench.results.headline import headline_rows
from cirbench.results.metrics import RECALL, format_number
LOSS_RTOL = 1e-4
"""Relative median step-to-step change at or below which an epoch's total loss counts as constant."""
LOSS_ATOL = 1e-6
"""Absolute part of that tolerance (a loss stuck at 0)."""


def recall_per_epoch(metrics: pd.DataFrame) -> pd.Series:
    """The headline validation R@10 of one run's ``metrics`` rows, indexed by epoch (from 0)."""
    rows = headline_rows(metrics, RECALL)
    return rows.groupby("epoch").value.mean().sort_index()


def final_recall(metrics: pd.DataFrame) -> float:
    """The last epoch's headline validation R@10 of one run's ``metrics`` rows (NaN if none)."""
    recall = recall_per_epoch(metrics)
    return float(recall.iloc[-1]) if len(recall) else math.nan


def _below_text_only(recall: pd.Series, text_only: float) -> list[str]:
    """The recall half of the rule: the final epoch below, and every run of two or more
    consecutive epochs below."""
    if recall.empty or not math.isfinite(text_only):
        return []
    epochs = [int(e) for e, value in recall.items() if value < text_only]
    reasons = []
    last = int(recall.index[-1])
    if last in epochs:
        reasons.append(f"R@10 {format_number(recall[last], 3)} below text_only {format_number(text_only, 3)} at the final "
                       f"epoch ({last + 1})")
    for _, group in itertools.groupby(enumerate(epochs), lambda pair: pair[1] - pair[0]):  # runs of consecutive epochs
        streak = [epoch for _, epoch in group]
        if len(streak) >= 2:
            reasons.append(f"R@10 below text_only {format_number(text_only, 3)} at epochs {streak[0] + 1}-{streak[-1] + 1}")
    return reasons


def _constant_loss(losses: pd.DataFrame) -> list[str]:
    """The loss half of the rule: every epoch of two or more steps whose total loss does not move."""
    if losses.empty:
        return []
    total = losses[losses.name == "total"].sort_values("step")
    reasons = []
    for epoch, values in total.groupby("epoch").value:
        if len(values) < 2:
            continue
        change, mean = float(values.diff().abs().median()), float(values.mean())
        if change <= LOSS_ATOL + LOSS_RTOL * abs(mean):
            reasons.append(f"total loss constant over epoch {int(epoch) + 1} ({format_number(mean, 4)})")
    return reasons


def collapse_reason(metrics: pd.DataFrame, losses: pd.DataFrame, text_only: float) -> str:
    """Why a cell collapsed (see the module docstring), or ``""`` when it is healthy.

    ``metrics`` and ``losses`` are the cell's own tables (every epoch); ``text_only`` is the
    ``text_only`` reference row's headline R@10 for the same seed (NaN: the recall half of
    the rule is not applied)."""
    return "; ".join(_below_text_only(recall_per_epoch(metrics), text_only) + _constant_loss(losses))
