"""The kept set against chance: a trained cell whose final kept set is less clean than a
random subset of the same size is flagged ``below_chance`` in ``runs``.

A random subset of ``n_selected`` of the ``n_samples`` training samples, ``n_clean`` of them
clean, holds a hypergeometric number of clean samples; its expected purity, the chance
level, is the training set's clean share ``n_clean / n_samples`` (1 - the noise rate). The
kept set judged is the cell's main noise score's (``noise_score``) over all samples (noise
type ``all``) at the last epoch of its ``purity`` rows: the one the report's purity table,
its purity figure and the claims read. ``n_samples`` and the kept counts are that row's,
``n_clean`` is ``n_samples`` minus the ``runs`` row's ``n_noisy`` (the same training set).

The cell is flagged when the one-sided exact test says the kept set is dirtier than chance:
P(a random subset holds at most ``n_selected_clean`` clean samples) < :data:`KEPT_SET_ALPHA`
(0.01, the level at which the claims call a kept set cleaner than chance). A kept set of
100 at 49% clean against 50% by chance is far from it (p = 0.44). Not judged: a cell with no
kept set (a method that only scores, or one that keeps nothing) and a training set with no
noise; a method that keeps everything sits exactly at chance, an oracle far above it.

A flag, not a failure: the cell's status stays ``completed``, its numbers stay in every
table and the claims read it as any other cell (the kept-set claim counts such a seed as
"does not hold"). Epochs in the reasons count from 1, as the collapse guard's do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
from scipy import stats

from cirbench.results.metrics import format_number
from cirbench.results.store import MAIN_SCORE

KEPT_SET_ALPHA = 0.01
"""The one-sided level of the kept-set test, for the flag as for the claims."""


@dataclass(frozen=True)
class KeptSetTest:
    """One run's kept set against a random subset of the same size (hypergeometric)."""

    n_samples: int
    n_clean: int
    n_selected: int
    n_selected_clean: int
    p_cleaner: float
    """P(a random subset of ``n_selected`` has at least ``n_selected_clean`` clean samples)."""
    p_dirtier: float
    """P(a random subset has at most ``n_selected_clean`` clean samples)."""

    @property
    def purity(self) -> float:
        """The clean share of the kept set."""
        return self.n_selected_clean / self.n_selected if self.n_selected else math.nan

    @property
    def chance(self) -> float:
        """The expected clean share of a random subset: the training set's clean share."""
        return self.n_clean / self.n_samples if self.n_samples else math.nan


def kept_set_test(n_samples: int, n_clean: int, n_selected: int, n_selected_clean: int) -> KeptSetTest:
    """Is a kept set of ``n_selected`` samples with ``n_selected_clean`` clean ones cleaner
    (or dirtier) than a random subset of the same size of ``n_samples`` samples, ``n_clean``
    clean? Both hypergeometric tails (``scipy.stats.hypergeom``)."""
    counts = (n_samples, n_clean, n_selected, n_selected_clean)
    if (min(counts) < 0 or n_clean > n_samples or n_selected > n_samples or n_selected_clean > min(n_clean, n_selected)
            or n_selected - n_selected_clean > n_samples - n_clean):
        raise ValueError(f"inconsistent kept-set counts: n_samples={n_samples}, n_clean={n_clean}, "
                         f"n_selected={n_selected}, n_selected_clean={n_selected_clean}")
    law = stats.hypergeom(n_samples, n_clean, n_selected)
    return KeptSetTest(n_samples, n_clean, n_selected, n_selected_clean,
                       float(law.sf(n_selected_clean - 1)), float(law.cdf(n_selected_clean)))


def final_kept_set(purity: pd.DataFrame) -> pd.Series | None:
    """The row of one run's ``purity`` rows that the rule judges (main score, noise type
    ``all``, last epoch), or None where that epoch has no kept set."""
    if purity.empty:
        return None
    rows = purity[(purity.score_name == MAIN_SCORE) & (purity.noise_type == "all")]
    rows = rows[rows.epoch == rows.epoch.max()]
    if rows.empty or pd.isna(rows.n_selected.iloc[0]) or int(rows.n_selected.iloc[0]) == 0:
        return None
    return rows.iloc[0]


def chance_test(purity: pd.DataFrame, n_noisy: float) -> tuple[int, KeptSetTest] | None:
    """(epoch, test) of one run's final kept set against chance (see the module docstring),
    or None where it is not judged: no kept set, no noise, or no ``n_noisy``."""
    row = final_kept_set(purity)
    if row is None or pd.isna(n_noisy) or int(n_noisy) == 0:
        return None
    try:
        test = kept_set_test(int(row.n_samples), int(row.n_samples) - int(n_noisy), int(row.n_selected),
                             int(row.n_selected_clean))
    except ValueError:  # counts that do not add up (an n_noisy of another training set): not judged
        return None
    return int(row.epoch), test


def below_chance_reason(purity: pd.DataFrame, n_noisy: float) -> str:
    """Why a run's final kept set is less clean than chance, or ``""`` when it is not (or is
    not judged). ``purity`` is the run's own table (every epoch and score), ``n_noisy`` its
    ``runs`` row's noisy training samples."""
    judged = chance_test(purity, n_noisy)
    if judged is None or judged[1].p_dirtier >= KEPT_SET_ALPHA:
        return ""
    epoch, test = judged
    return (f"kept set {format_number(100 * test.purity, 1)}% clean ({test.n_selected_clean} of {test.n_selected}) "
            f"below chance {format_number(100 * test.chance, 1)}% (p={format_number(test.p_dirtier, digits=1)}) at the "
            f"final epoch ({epoch + 1})")


def judge_below_chance(runs: pd.DataFrame, purity: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with the rule applied, from the stored ``purity`` rows, to every run written
    before the flag existed (``below_chance_reason`` null); the others as they were."""
    todo = runs.below_chance_reason.isna() if "below_chance_reason" in runs.columns else pd.Series(True, index=runs.index)
    if not todo.any():
        return runs
    runs = runs.copy()
    none = purity.iloc[:0]
    own = dict(list(purity.groupby("run_id"))) if len(purity) else {}
    reasons = [below_chance_reason(own.get(r.run_id, none), r.n_noisy) for r in runs[todo].itertuples(index=False)]
    for column in ("below_chance", "below_chance_reason"):
        runs[column] = runs.get(column, pd.Series(None, index=runs.index)).astype(object)
    runs.loc[todo, "below_chance_reason"] = reasons
    runs.loc[todo, "below_chance"] = [bool(reason) for reason in reasons]
    return runs
