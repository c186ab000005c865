"""The reference rows of a report: the starting model, the text-blind and text-only rankings
(the runs flagged ``is_reference``: :mod:`cirbench.engine.reference` computes them) and the
bound of every method, the baseline trained on the uncorrupted triplets (its noise-0 cell).
Shown beside the results, never ranked."""

from __future__ import annotations

import pandas as pd

from cirbench.report.analysis.load import Setting
from cirbench.report.analysis.numbers import (
    CLAIMS_EPOCH, ON_VALIDATION, format_mean, run_columns, seed_stats, summarize, wide_columns,
)
from cirbench.report.tables.model import Cell, TableModel
from cirbench.results.labels import TEXT_BLIND_ROW, TEXT_ONLY_ROW, ZERO_SHOT_ROW
from cirbench.results.roles import BASELINE

BOUND = "{baseline} at 0% noise (bound)"
"""The bound's row label, of the setting's baseline (:func:`bound_label`)."""
REFERENCE_STYLES: dict[str, dict] = {
    ZERO_SHOT_ROW: {"color": "0.45", "linestyle": "-", "linewidth": 1.2},
    TEXT_BLIND_ROW: {"color": "0.55", "linestyle": ":", "linewidth": 1.6},
    TEXT_ONLY_ROW: {"color": "0.45", "linestyle": (0, (3, 1, 1, 1, 1, 1)), "linewidth": 1.3},
    BOUND: {"color": "0.15", "linestyle": "-.", "linewidth": 1.0},
}
"""How each reference line is drawn: in grey (no method's colour), each with a line style of
its own; the rows are listed in this order, any other reference row of the results after
them by name."""
OTHER_STYLE: dict = {"color": "0.65", "linestyle": (0, (1, 3)), "linewidth": 1.2}
"""How a reference row the styles above do not name is drawn."""


def bound_label(setting: Setting) -> str:
    """The bound's row label in ``setting``: its baseline (by role) at 0% noise."""
    return BOUND.format(baseline=setting.role(BASELINE))


def reference_style(setting: Setting, name: str) -> dict:
    """How the reference row (or the bound) ``name`` of ``setting`` is drawn."""
    return REFERENCE_STYLES.get(BOUND if name == bound_label(setting) else name, OTHER_STYLE)


def reference_order(names: list[str], bound: str) -> list[str]:
    """``names`` (reference rows and the bound, labelled ``bound``) in display order: those
    of :data:`REFERENCE_STYLES` in its order, then the others by name, the bound last."""
    known = [m for m in REFERENCE_STYLES if m != BOUND and m in names]
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


def reference_table(setting: Setting) -> TableModel | None:
    """The reference rows as a table (percent, mean ± std over seeds), never ranked."""
    stats = reference_stats(setting)
    if stats.empty:
        return None
    columns = list(stats["mean"].columns)
    rows = []
    for i, name in enumerate(stats.index):
        cells = [Cell(format_mean(float(stats.loc[name, ("mean", c)]), float(stats.loc[name, ("std", c)]),
                              int(stats.loc[name, ("n", c)]) if pd.notna(stats.loc[name, ("n", c)]) else 0))
                 for c in columns]
        rows.append(("ref" if i == 0 else "", name, cells))
    note = ("Not fine-tuned: zero_shot is the starting model, text_blind ranks by the reference image alone, text_only "
            "by the text alone (the starting model's features). The bound is the baseline trained on the uncorrupted "
            f"triplets, read {CLAIMS_EPOCH}. {ON_VALIDATION.capitalize()} (%). None of these is ranked.")
    return TableModel("Reference rows", columns, rows, note)
