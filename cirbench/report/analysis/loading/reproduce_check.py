"""Does this machine reproduce a report? The reference's cells of a setting (a report
folder's cells table, :mod:`cirbench.report.render.cells_csv`, one such file, or a results folder)
and their final validation metrics, and each re-run cell's metric against the spread of the
reference's seeds (``cirbench reproduce`` re-runs the cells: :mod:`cirbench.cli.tools`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from cirbench.report.analysis.loading.cells import CellsTableError, long_metrics, read_final_metrics
from cirbench.report.analysis.loading.numbers import format_number
from cirbench.results.store import ResultsStore


@dataclass(frozen=True)
class Wanted:
    """The cells to compare: their methods and noise rates, and the setting's ``dataset``,
    ``backbone`` and ``noise_protocol`` columns as the results name them."""

    methods: list[str]
    noise_rates: list[float]
    dataset: str
    backbone: str
    noise_protocol: str


class ReferenceFolderError(ValueError):
    """The reference folder cannot answer: no completed cells of the setting, or one seed only."""


@dataclass(frozen=True)
class Verdict:
    """One re-run cell and metric against the reference."""

    method: str
    noise_rate: float
    seed: int
    metric: str
    reference: float
    mean: float
    std: float
    n_seeds: int
    reproduced: float
    allowed: float

    @property
    def difference(self) -> float:
        """Reproduced minus the reference's value for the same seed."""
        return self.reproduced - self.reference

    @property
    def within(self) -> bool:
        """Whether the difference is within the allowed spread."""
        return abs(self.difference) <= self.allowed


def final_metrics(store: ResultsStore, runs: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """The final-epoch validation metrics (group ``all``) of ``runs``: one row per run and
    metric with ``method, noise_rate, seed, metric, value``."""
    table = store.read("metrics", list(runs.run_id))
    table = table[(table.split == "val") & (table.group == "all") & table.metric.isin(metrics)]
    table = table[table.epoch == table.groupby("run_id")["epoch"].transform("max")]
    return table[["method", "noise_rate", "seed", "metric", "value"]]


def reference_runs(store: ResultsStore, wanted: Wanted) -> pd.DataFrame:
    """The completed, trained runs of the ``wanted`` cells' setting in ``store`` (the latest per cell)."""
    runs = store.read("runs")
    runs = runs[(runs.status == "completed") & ~runs.is_reference & runs.method.isin(wanted.methods)
                & runs.noise_rate.isin(wanted.noise_rates) & (runs.dataset == wanted.dataset)
                & (runs.backbone == wanted.backbone) & (runs.noise_protocol == wanted.noise_protocol)]
    return runs.sort_values("finished").drop_duplicates(["method", "noise_rate", "seed"], keep="last")


def cells_table_runs(path: Path, wanted: Wanted) -> pd.DataFrame:
    """The rows of the ``wanted`` setting, methods and noise rates in the cells table at ``path``
    (a report folder or its ``final_metrics.csv``)."""
    try:
        table = read_final_metrics(path)
    except CellsTableError as exc:
        raise ReferenceFolderError(str(exc)) from exc
    return table[(table.method.isin(wanted.methods)) & table.noise_rate.isin(wanted.noise_rates)
                 & (table.dataset == wanted.dataset) & (table.backbone == wanted.backbone)
                 & (table.noise_protocol == wanted.noise_protocol)]


def load_reference(path: Path, wanted: Wanted, metrics: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The reference's runs of the ``wanted`` setting (one row per cell, with ``epochs``,
    ``holdout`` and ``start_key``) and their final validation ``metrics`` (rows ``method,
    noise_rate, seed, metric, value``), from a results folder or a report's cells table."""
    from_store = (path / "runs").is_dir()
    runs = reference_runs(ResultsStore(path), wanted) if from_store else cells_table_runs(path, wanted)
    if runs.empty:
        raise ReferenceFolderError(f"{path} holds no completed run of {wanted.methods} at {wanted.noise_rates} "
                             f"on {wanted.dataset} / {wanted.backbone}")
    if from_store:
        return runs, final_metrics(ResultsStore(path), runs, metrics)
    try:
        return runs, long_metrics(runs, metrics)
    except CellsTableError as exc:
        raise ReferenceFolderError(f"{path}: {exc}") from exc


def check_same_start(runs: pd.DataFrame, start_key: str) -> None:
    """Refuse a reference whose cells record a start other than ``start_key`` (the start the
    re-run cells load): another start is another benchmark, whose numbers no re-run here
    can reproduce. References that record no start (written before the key existed) pass."""
    recorded = sorted(set(runs.get("start_key", pd.Series(dtype=str)).fillna("").astype(str)) - {""})
    if recorded and start_key not in recorded:
        raise ReferenceFolderError(
            f"the reference's cells start from {', '.join(recorded)}, and this installation's start is {start_key}: "
            "another start is another benchmark (docs/benchmark.md#run-ids); reproduce a report made from this start, "
            "or install the version of cirbench that released the reference's")


def setting_of(runs: pd.DataFrame, column: str, given: float | None) -> float:
    """``given``, else the one value of ``column`` in the reference ``runs``."""
    if given is not None:
        return given
    values = sorted(set(runs[column]))
    if len(values) != 1:
        raise ReferenceFolderError(f"the reference runs hold {column} {values}: give --{column} to choose one")
    return values[0]


def compare(reference: pd.DataFrame, reproduced: pd.DataFrame, spread: float) -> list[Verdict]:
    """A :class:`Verdict` per reproduced row, against the reference rows of its cell and
    metric (the same seed's value; the spread over the reference's seeds)."""
    verdicts = []
    for row in reproduced.itertuples():
        same = reference[(reference.method == row.method) & (reference.noise_rate == row.noise_rate)
                         & (reference.metric == row.metric)]
        if len(same) < 2:
            raise ReferenceFolderError(f"the reference holds {len(same)} seed(s) of {row.method} at {row.noise_rate:g} "
                                 f"({row.metric}): at least two are needed to read a spread")
        at_seed = same[same.seed == row.seed]
        value = float(at_seed.value.iloc[0]) if len(at_seed) else float(same.value.mean())
        std = float(same.value.std(ddof=1))
        verdicts.append(Verdict(row.method, float(row.noise_rate), int(row.seed), row.metric, value,
                                float(same.value.mean()), std, len(same), float(row.value), spread * std))
    return verdicts


def verdict_lines(verdicts: list[Verdict]) -> list[str]:
    """A header and one line per verdict."""
    header = f"{'method':<10} {'noise':>5} {'seed':>4} {'metric':<16} {'reference':>9} {'mean±std (n)':>20} " \
             f"{'reproduced':>10} {'diff':>8} {'allowed':>8}  verdict"
    lines = [header]
    for v in verdicts:
        spread = f"{format_number(v.mean, 4)}±{format_number(v.std, 4)} ({v.n_seeds})"
        lines.append(f"{v.method:<10} {v.noise_rate:>5g} {v.seed:>4} {v.metric:<16} {format_number(v.reference, 4):>9} "
                     f"{spread:>20} {format_number(v.reproduced, 4):>10} {format_number(v.difference, 4, sign=True):>8} "
                     f"{format_number(v.allowed, 4):>8}  {'ok' if v.within else 'OUTSIDE'}")
    return lines
