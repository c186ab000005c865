"""A claim's cells side by side: for a claim whose file declares ``[claim.cells]``
(:class:`~cirbench.report.analysis.verdicts.claim_files.CellsSpec`), one table of those cells, a row per
declared row at each noise rate where two of them ran in one row or one column, a column per declared column, each the
headline mean ± std over seeds at the claims' epoch. The shipped claim on SSN's lead at 80%
declares SSN and the baseline each at each other's temperature: the four cells whose two
differences the claim checks (the SSN method page reads them)."""

from __future__ import annotations

import pandas as pd

from cirbench.report.analysis.verdicts.claim_files import ClaimSpec
from cirbench.report.analysis.verdicts.claims import setting_claims
from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.loading.numbers import CLAIMS_EPOCH, ON_VALIDATION, format_mean, rate_label, run_columns, summarize
from cirbench.report.tables.model import Cell, TableModel, collapse_note, read_seeds
from cirbench.results.metrics import headline_column
from cirbench.results.roles import ROLES


def _filled(setting: Setting, label: str) -> str:
    """``label`` with a ``{role}`` replaced by the setting's method of that role."""
    for role in ROLES:
        label = label.replace(f"{{{role}}}", setting.role(role))
    return label


def _compared(stats: pd.DataFrame, grid: list[tuple[str, list[str]]], rate: float) -> bool:
    """Whether two of the declared cells that ran at ``rate`` share a row or a column (the
    table compares something there, not a method's headline cell alone)."""
    ran = [(i, j) for i, (_, row) in enumerate(grid) for j, label in enumerate(row) if (rate, label) in stats.index]
    return any(a != b and (a[0] == b[0] or a[1] == b[1]) for a in ran for b in ran)


def claim_cells_table(setting: Setting, number: int, spec: ClaimSpec) -> TableModel | None:
    """The cells of claim ``number`` (``spec``) side by side on ``setting`` (read as given:
    pass the claims' rule view); None where the claim declares none or none of them ran."""
    if spec.cells is None:
        return None
    per_run = run_columns(setting)
    metric = headline_column(list(per_run.columns))
    if metric is None:
        return None
    stats = summarize(setting, per_run[[metric]])
    grid = [(row[0], [_filled(setting, label) for label in row[1:]]) for row in spec.cells.rows]
    rates = [rate for rate in sorted({float(rate) for rate, _ in stats.index}) if _compared(stats, grid, rate)]
    if not rates:
        return None
    rows, shown, seeds = [], [], set()
    runs = setting.runs
    for rate in rates:
        for i, (name, row) in enumerate(grid):
            cells = []
            for label in row:
                if (rate, label) in stats.index:
                    mean, std, n = (stats.loc[(rate, label), (part, metric)] for part in ("mean", "std", "n"))
                    cells.append(Cell(format_mean(float(mean), float(std), int(n)) + setting.collapse_mark(label, rate)))
                    shown.append((label, rate))
                    seeds |= set(runs.loc[(runs.method == label) & (runs.noise_rate.astype(float) == rate), "seed"].astype(int))
                else:
                    cells.append(Cell("-"))
            rows.append((rate_label(rate) if i == 0 else "", name, cells))
    cells_named = "; ".join(f"{name}: " + ", ".join(f"`{label}`" for label in row) for name, row in grid)
    note = (f"The cells claim {number} reads, side by side (its file's `[claim.cells]`; {cells_named}, in the columns' "
            f"order): {metric} (%, {ON_VALIDATION}) {CLAIMS_EPOCH}, mean ± std over seeds "
            f"{','.join(map(str, sorted(seeds)))}, at each noise rate where two of them ran in one row or column; - where a cell was not run. The claims table's comparisons are their "
            "differences, paired by seed." + collapse_note(setting, shown))
    title = f"Claim {number}'s cells side by side: {_filled(setting, spec.short or spec.text)}"
    return TableModel(title, list(spec.cells.columns), rows, note, read_seeds(setting, shown, per_run.index))


def claim_cells_tables(setting: Setting) -> list[TableModel]:
    """:func:`claim_cells_table` of every claim that applies to ``setting`` and declares its
    cells, numbered as the claims table numbers them."""
    tables = [claim_cells_table(setting, number, spec) for number, spec in enumerate(setting_claims(setting), 1)]
    return [t for t in tables if t is not None]
