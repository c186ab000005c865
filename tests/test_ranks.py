"""The ``ranks`` table: every validation query's final rank, stored per cell (and per
reference row), from which the stored recall is recomputed exactly; old results load."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cirbench.engine.cell.life import run_cell, run_reference
from cirbench.engine.cell.evaluate import NO_SUBSET_RANK
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.report.analysis.loading.load import load_results
from cirbench.results.selection import selected_epochs
from cirbench.results.store import SCHEMAS


@pytest.fixture(scope="module")
def mini_results(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    """One sprc cell on shapes-mini (one epoch) and the reference rows."""
    out = tmp_path_factory.mktemp("ranks") / "results"
    grid = Grid(GridSpec(methods=["sprc"], noise_rates=[0.5], epochs=1, batch_size=128, dataset="shapes-mini",
                         output=out, cache_dir=cache_dir))
    for cell in grid.reference_cells():
        assert run_reference(grid.resources, cell, announce=lambda m: None).status == "completed"
    for cell in grid.cells:
        assert run_cell(grid.resources, cell, progress=lambda info: None, announce=lambda m: None).status == "completed"
    return out


def _recall_from_ranks(ranks: pd.DataFrame, column: str, k: int) -> dict[str, float]:
    """Recall@k from stored ranks and ties (a tie counts at its expected value)."""
    ties = ranks["ties" if column == "rank" else "subset_ties"]
    hit = ((k - ranks[column]) / (ties + 1)).clip(0, 1)
    return {str(group): float(hit[rows.index].mean()) for group, rows in ranks.groupby("group")}


def test_recall_recomputed_from_stored_ranks_equals_the_stored_metric(mini_results: Path) -> None:
    ranks, metrics = pd.read_parquet(mini_results / "ranks"), pd.read_parquet(mini_results / "metrics")
    assert list(ranks.columns) == SCHEMAS["ranks"].names
    runs = pd.read_parquet(mini_results / "runs")
    assert set(ranks.run_id) == set(runs.run_id)  # the trained cell and every reference row
    checked = 0
    for run_id, own in ranks.groupby("run_id"):
        final = metrics[metrics.run_id == run_id]
        final = final[final.epoch == final.epoch.max()]
        assert own["query"].is_unique and (own["rank"] >= 0).all()
        for row in final.itertuples(index=False):
            kind, _, k = row.metric.partition("@")
            column = {"recall": "rank", "recall_subset": "subset_rank"}[kind]
            assert _recall_from_ranks(own, column, int(k))[row.group] == pytest.approx(row.value, abs=1e-6)  # recall_at averages in float32
            checked += 1
    assert checked >= 4 * 7  # four runs, seven recall metrics each; one query is worth 1/160


def test_the_epochs_a_rule_selects_are_kept_and_subset_ranks_are_filled(mini_results: Path, cache_dir: Path) -> None:
    ranks = pd.read_parquet(mini_results / "ranks")
    sprc = ranks[ranks.method == "sprc"]
    from cirbench.data.datasets.registry import DATASETS

    n_val = len(DATASETS.get("shapes-mini")(cache_dir, None).val)
    metrics = pd.read_parquet(mini_results / "metrics")
    for run_id, own in sprc.groupby("run_id"):
        chosen = {e for e in selected_epochs(metrics[metrics.run_id == run_id]).values() if e is not None}
        assert set(own.epoch) == chosen
        for _, epoch in own.groupby("epoch"):
            assert len(epoch) == n_val and sorted(epoch["query"]) == list(range(n_val))
    assert (sprc.subset_rank != NO_SUBSET_RANK).all()  # shapes has CIRR-style subsets
    assert np.issubdtype(sprc["rank"].dtype, np.integer)


def test_the_report_carries_the_ranks_of_completed_runs_and_old_results_load(mini_results: Path, tmp_path: Path) -> None:
    (setting,) = load_results(mini_results).settings
    assert set(setting.ranks.run_id) == set(setting.runs.run_id)  # reference rows are not the setting's runs
    old = tmp_path / "old"
    shutil.copytree(mini_results, old)
    shutil.rmtree(old / "ranks")  # results written before the ranks table existed
    (setting,) = load_results(old).settings
    assert setting.ranks.empty and list(setting.ranks.columns) == SCHEMAS["ranks"].names
    assert len(setting.metrics)


def test_the_headline_recomputed_by_the_query_bootstrap_equals_the_table(mini_results: Path) -> None:
    from cirbench.report.analysis.statistics.bootstrap import QueryBootstrap, rank_terms
    from cirbench.report.analysis.loading.numbers import headline_column, run_columns

    (setting,) = load_results(mini_results).settings
    per_run = run_columns(setting)
    for column in (headline_column(list(per_run.columns)), "R@10", "R_sub@2"):
        boot = QueryBootstrap(setting.ranks, rank_terms(column, setting.metrics), n_resamples=20)
        ids = list(per_run.index)
        assert boot.point(ids) == pytest.approx(per_run.loc[ids, column].to_numpy() / 100, abs=1e-6)
        assert boot.resample(ids).shape == (20, len(ids))
