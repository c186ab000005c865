"""Published numbers to compare a reproduction with: the papers' tables as data.

Shipped with the package (``published_fashioniq.csv``, ``published_cirr.csv``, transcribed
from the papers' text): ConeSep's Table 1 (FashionIQ validation) and Table 2 (CIRR test1)
for every method and noise rate, and HUG's Tables 1-2 (no injected noise). A user's own
rows are added from CSV files in the same layout (``cirbench report --published FILE``).

One row per (source, table, noise rate, method). Columns: ``dataset`` (``fashioniq`` or
``cirr``), ``source`` and ``table`` (where the numbers are printed), ``split`` (``val``,
``test1``, or ``unstated``), ``protocol`` (in the form of the ``eval_protocol`` column of
the results, e.g. ``fashioniq:ref-excluded:R@10,50``; ``ref-unstated`` when the paper does
not say), ``noise_rate`` (0-1), ``method`` (as printed), ``cirbench_method`` (the cirbench
method it corresponds to, or empty), ``note``, then the metrics in percent under the
report's column names (:data:`METRICS`); an empty cell is a number the paper does not give.
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import Iterable

import pandas as pd

INFO_COLUMNS: tuple[str, ...] = (
    "dataset", "source", "table", "split", "protocol", "noise_rate", "method", "cirbench_method", "note",
)
METRICS: dict[str, tuple[str, ...]] = {
    "fashioniq": ("dress R@10", "dress R@50", "shirt R@10", "shirt R@50", "toptee R@10", "toptee R@50",
                  "Avg R@10", "Avg R@50", "AVG"),
    "cirr": ("R@1", "R@5", "R@10", "R@50", "R_sub@1", "R_sub@2", "R_sub@3", "Avg(R@5, R_sub@1)"),
}
SHIPPED: tuple[str, ...] = ("published_fashioniq.csv", "published_cirr.csv")
_REQUIRED = ("dataset", "source", "table", "split", "protocol", "noise_rate", "method")


class PublishedFileError(ValueError):
    """A file of published numbers that cannot be used; the message names the file, the
    line and what is wrong."""


def _number(text: str, where: str, low: float, high: float, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PublishedFileError(f"{where}: {what} {text!r} is not a number") from None
    if not (math.isfinite(value) and low <= value <= high):
        raise PublishedFileError(f"{where}: {what} {text!r} is outside [{low:g}, {high:g}]")
    return value


def read_published(path: Path | str, label: str | None = None) -> pd.DataFrame:
    """Read and validate one CSV of published numbers (see the module docstring)."""
    name = label or str(path)
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:
        raise PublishedFileError(f"{name}: cannot read it as CSV: {exc}") from None
    missing = [c for c in _REQUIRED if c not in frame.columns]
    if missing:
        raise PublishedFileError(f"{name}: missing column(s) {', '.join(missing)}; expected {', '.join(INFO_COLUMNS)} "
                             "and metric columns")
    known = {m for metrics in METRICS.values() for m in metrics}
    unknown = [c for c in frame.columns if c not in INFO_COLUMNS and c not in known]
    if unknown:
        raise PublishedFileError(f"{name}: unknown column(s) {', '.join(unknown)}; metric columns are "
                             f"{'; '.join(f'{d}: ' + ', '.join(m) for d, m in METRICS.items())}")
    rows = []
    for line, row in zip(range(2, len(frame) + 2), frame.to_dict("records")):
        where = f"{name} line {line} ({row.get('method', '')!s})"
        dataset = row["dataset"].strip()
        if dataset not in METRICS:
            raise PublishedFileError(f"{where}: dataset {dataset!r} is not one of {', '.join(METRICS)}")
        for column in _REQUIRED:
            if not str(row[column]).strip():
                raise PublishedFileError(f"{where}: empty {column}")
        out = {c: str(row.get(c, "")).strip() for c in INFO_COLUMNS}
        out["noise_rate"] = _number(out["noise_rate"], where, 0.0, 0.999999, "noise_rate")
        values = {}
        for metric in METRICS[dataset]:
            text = str(row.get(metric, "")).strip()
            values[metric] = _number(text, where, 0.0, 100.0, metric) if text else math.nan
        others = [c for c in frame.columns if c in known and c not in METRICS[dataset] and str(row[c]).strip()]
        if others:
            raise PublishedFileError(f"{where}: column(s) {', '.join(others)} are not {dataset} metrics")
        if all(math.isnan(v) for v in values.values()):
            raise PublishedFileError(f"{where}: no metric value")
        rows.append({**out, **values})
    return pd.DataFrame(rows, columns=[*INFO_COLUMNS, *dict.fromkeys(m for ms in METRICS.values() for m in ms)])


def load_published(extra: Iterable[Path | str] = ()) -> pd.DataFrame:
    """The shipped published tables plus the rows of every file in ``extra``."""
    package = resources.files("cirbench.report.analysis.verdicts")
    frames = []
    for name in SHIPPED:
        with resources.as_file(package / name) as path:
            frames.append(read_published(path, f"cirbench/report/analysis/verdicts/{name}"))
    frames += [read_published(Path(p)) for p in extra]
    return pd.concat(frames, ignore_index=True)
