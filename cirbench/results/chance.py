"""The kept set against chance: the exact (hypergeometric) test of a kept set's clean count
against a random subset of the same size, which the claims read; in ``results`` (scipy only)
so that the engine can read it too."""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

KEPT_SET_ALPHA = 0.01
"""The one-sided level of the kept-set test."""


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
