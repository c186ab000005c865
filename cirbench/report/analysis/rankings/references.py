"""The reference rows of a report: the starting model, the text-blind and text-only rankings
(the runs flagged ``is_reference``: :mod:`cirbench.engine.planning.reference` computes them) and the
bound of every method, the baseline trained on the uncorrupted triplets (its noise-0 cell).
Shown beside the results, never ranked: their table is :mod:`cirbench.report.tables.references`,
their line styles are :mod:`cirbench.report.figures.palette`'s."""

from __future__ import annotations

import pandas as pd

from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.loading.numbers import run_columns, seed_stats, summarize, wide_columns
from cirbench.results.labels import TEXT_BLIND_ROW, TEXT_ONLY_ROW, ZERO_SHOT_ROW
from cirbench.results.roles import BASELINE

BOUND = "{baseline} at 0% noise (bound)"
"""The bound's row label, of the setting's baseline (:func:`bound_label`)."""
REFERENCE_ORDER: tuple[str, ...] = (ZERO_SHOT_ROW, TEXT_BLIND_ROW, TEXT_ONLY_ROW)
"""The reference rows in the order the report lists them, any other reference row of the
results after them by name, the bound last (:func:`reference_order`)."""


def bound_label(setting: Setting) -> str:
    """The bound's row label in ``setting``: its baseline (by role) at 0% noise."""
    return BOUND.format(baseline=setting.role(BASELINE))


def reference_order(names: list[str], bound: str) -> list[str]:
    """``names`` (reference rows and the bound, labelled ``bound``) in display order: those
    of :data:`REFERENCE_ORDER` in its order, then the others by name, the bound last."""
    known = [m for m in REFERENCE_ORDER if m in names]
    return known + sorted(set(names) - set(known) - {bound}) + ([bound] if bound in names else [])


def reference_stats(setting: Setting) -> pd.DataFrame:
    """Mean, std and count over seeds of every reported column, one row per reference row
    and one for the bound (rows missing from the results are absent)."""
    blocks = []
    if not setting.references.empty:
        refs = setting.references
        per_seed = wide_columns(refs[refs.split == "val"], ["method", "seed"]) if "val" in set(refs.split) else pd.DataFrame()
        if len(per_seed):
            blocks.append(seed_stats(per_seed.groupby(level="method")))
    per_run = run_columns(setting)
    if len(per_run.columns):
        stats = summarize(setting, per_run)
        baseline = setting.role(BASELINE)
        if (0.0, baseline) in stats.index:
            blocks.append(stats.loc[[(0.0, baseline)]].droplevel("noise_rate").rename(index={baseline: bound_label(setting)}))
    if not blocks:
        return pd.DataFrame()
    out = pd.concat(blocks)
    return out.loc[reference_order(list(out.index), bound_label(setting))]
