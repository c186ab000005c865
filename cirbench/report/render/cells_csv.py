"""Writes the report's tables of cells (:mod:`cirbench.report.analysis.loading.cells`) into each
setting's folder: ``final_metrics.csv`` and ``selected_metrics.csv``, atomically and readable by all."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cirbench.report.analysis.loading.cells import (
    FINAL_METRICS_FILE, SELECTED_METRICS_FILE, final_metrics_table, selected_metrics_table,
)
from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.loading.numbers import STORED_PLACES, format_number
from cirbench.results.atomic import atomic_write


def write_final_metrics(setting: Setting, folder: Path) -> Path:
    """Write :func:`final_metrics_table` of ``setting`` into ``folder`` (atomically); its path."""
    return write_table(final_metrics_table(setting), folder / FINAL_METRICS_FILE)


def write_selected_metrics(setting: Setting, folder: Path) -> Path:
    """Write :func:`selected_metrics_table` of ``setting`` into ``folder`` (atomically); its path."""
    return write_table(selected_metrics_table(setting), folder / SELECTED_METRICS_FILE)


def write_table(table: pd.DataFrame, path: Path) -> Path:
    """Write ``table`` as CSV at ``path`` (atomically, readable by all), every float at
    :data:`STORED_PLACES` decimals by the report's one rounding rule; its path."""
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        table.to_csv(tmp, index=False, float_format=lambda value: format_number(value, STORED_PLACES))
        tmp.chmod(0o644)

    atomic_write(path, write)
    return path
