"""The report's tables of cells: every trained cell's final validation metrics, one CSV per
setting (``<report>/<setting>/final_metrics.csv``), committed with the report, and beside it
the same cells' metrics at the epoch the claims read (``selected_metrics.csv``).

It is what another machine compares its own cells with (``cirbench reproduce
--reference reports``) without the results folder, which is generated and never committed:
one row per cell (method, noise rate, seed), the run's id, start and schedule, and the
final epoch's validation metrics of group ``all`` as columns.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cirbench.report.analysis.loading.load import SETTING_COLUMNS, Setting, final_epoch
from cirbench.report.analysis.loading.selection import rule_view
from cirbench.results.selection import DEFAULT_RULE

FINAL_METRICS_FILE = "final_metrics.csv"
SELECTED_METRICS_FILE = "selected_metrics.csv"
RUN_COLUMNS: list[str] = [*SETTING_COLUMNS, "method", "noise_rate", "seed", "run_id", "start_key", "epochs", "holdout"]
"""The columns every row carries before its metrics."""


class CellsTableError(ValueError):
    """A cells table that cannot be read: missing, or without the columns a comparison needs."""


def final_metrics_table(setting: Setting) -> pd.DataFrame:
    """One row per trained cell of ``setting``: :data:`RUN_COLUMNS`, then one column per
    validation metric (group ``all``) at the run's final epoch."""
    metrics = setting.metrics[(setting.metrics.split == "val") & (setting.metrics.group == "all")]
    wide = final_epoch(metrics).pivot_table(index="run_id", columns="metric", values="value", aggfunc="first")
    runs = setting.runs[[c for c in RUN_COLUMNS if c in setting.runs.columns]]
    table = runs.merge(wide, left_on="run_id", right_index=True, how="inner")
    return table.sort_values(["method", "noise_rate", "seed"]).reset_index(drop=True)


def selected_metrics_table(setting: Setting, rule: str = DEFAULT_RULE) -> pd.DataFrame:
    """:func:`final_metrics_table` at the epoch ``rule`` selects (the claims' and the
    leaderboard's): each row's ``rule`` and ``selected_epoch`` (counted from 1, as the figures
    count, so equal to ``epochs`` where the rule picked the last) before its metrics."""
    view = rule_view(setting, rule)
    table = final_metrics_table(view.setting)
    at = sum(c in table.columns for c in RUN_COLUMNS)
    table.insert(at, "selected_epoch", table.run_id.map(view.epochs).astype("int64") + 1)
    table.insert(at, "rule", rule)
    return table


def read_final_metrics(path: Path) -> pd.DataFrame:
    """The cells tables at ``path``: a ``final_metrics.csv`` file, or a report folder whose
    settings hold one each (concatenated). Raises :class:`CellsTableError` naming the file
    and what is wrong."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(path.glob(f"*/{FINAL_METRICS_FILE}"))
    if not files:
        raise CellsTableError(f"{path}: no {FINAL_METRICS_FILE} (a report folder holds one per setting)")
    frames = []
    for file in files:
        try:
            frame = pd.read_csv(file, dtype={"start_key": str})
        except (OSError, ValueError) as exc:
            raise CellsTableError(f"{file}: cannot be read as CSV ({exc})") from exc
        missing = [c for c in RUN_COLUMNS if c not in frame.columns]
        if missing:
            raise CellsTableError(f"{file}: missing column(s) {', '.join(missing)}")
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    table["start_key"] = table.start_key.fillna("")
    return table


def long_metrics(table: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """``table``'s ``metrics`` as rows ``method, noise_rate, seed, metric, value`` (the shape
    of the results store's final metrics); a metric the table lacks raises
    :class:`CellsTableError`."""
    missing = [m for m in metrics if m not in table.columns]
    if missing:
        raise CellsTableError(f"the cells table has no metric column(s) {', '.join(missing)}")
    return table.melt(id_vars=["method", "noise_rate", "seed"], value_vars=metrics, var_name="metric")
