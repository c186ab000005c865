"""The reference rows' table (:mod:`cirbench.report.analysis.rankings.references`): the starting
model, the text-blind and text-only rankings and the bound, percent, never ranked."""

from __future__ import annotations

import pandas as pd

from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.loading.numbers import CLAIMS_EPOCH, ON_VALIDATION, format_mean
from cirbench.report.analysis.rankings.references import bound_label, reference_stats
from cirbench.report.tables.model import Cell, TableModel, read_seeds
from cirbench.results.roles import BASELINE


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
    return TableModel("Reference rows", columns, rows, note, _seeds(setting, list(stats.index)))


def _seeds(setting: Setting, names: list[str]) -> dict[str, tuple[int, ...]]:
    """The seeds each reference row and the bound (the baseline's cells at 0%) are read on."""
    refs = setting.references
    refs = refs[refs.split == "val"] if not refs.empty else refs
    seeds = {str(m): tuple(sorted({int(s) for s in group})) for m, group in refs.groupby("method").seed} if len(refs) else {}
    seeds |= {bound_label(setting): s for s in read_seeds(setting, [(setting.role(BASELINE), 0.0)]).values()}
    return {name: seeds[name] for name in names if seeds.get(name)}
