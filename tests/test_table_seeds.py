"""Every table names the seeds it reads (issue 79): the headline grid on seeds 0-4 beside an
ablation row and the kept-set cells on seeds 0-2 (as the committed study runs them), each
table's heading names the seeds of its own numbers, read here from the runs and the
comparisons, not from the leaderboard's."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import test_leaderboard
from cirbench.report import load_results
from cirbench.report.analysis.rankings.kept_worth import kept_worth
from cirbench.report.render.content import assemble
from cirbench.report.render.layout import parts
from cirbench.report.tables.kept_worth import DECOMPOSITION_TITLE, NOISE_TYPES_TITLE
from cirbench.report.tables.model import TableModel, heading, seeds_by_row, seeds_words
from cirbench.results.store import CellKey, ResultsStore
from test_claims import _run_row
from test_kept_worth import write_kept_cells
from test_leaderboard import DECLINE, SETTING, _metrics, _ranks

HEADLINE, FEWER = (0, 1, 2, 3, 4), (0, 1, 2)
VARIANT = "conesep:no_gfq"


def _write_variant(root: Path) -> None:
    """An ablation row of conesep at 50%, on seeds 0-2 only (its grid's)."""
    store = ResultsStore(root)
    for seed in FEWER:
        ranks = [_ranks(VARIANT, 0.5, seed, epoch, 0.6 - DECLINE * epoch) for epoch in (0, 1)]
        held_out = [_ranks(VARIANT, 0.5, seed + 10, epoch, 0.6 - 0.2 * epoch) for epoch in (0, 1)]
        tables = {"ranks": pd.concat(ranks, ignore_index=True),
                  "metrics": pd.concat([*map(_metrics, ranks), *(_metrics(h, "holdout") for h in held_out)], ignore_index=True)}
        row = _run_row(150) | {"epochs": 2, "holdout": 0.1, "n_holdout": 30, "partitions": True}
        store.write_run(CellKey(f"{VARIANT}-0.5-s{seed}", VARIANT, *SETTING, 0.5, seed), row, tables)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("seeds") / "results"
    saved = test_leaderboard.SEEDS
    test_leaderboard.SEEDS = HEADLINE  # the headline grid and the reference rows on five seeds
    try:
        test_leaderboard.write_study(root)
    finally:
        test_leaderboard.SEEDS = saved
    write_kept_cells(root)  # frontier, noise-type and replay cells on seeds 0-2
    _write_variant(root)
    data = load_results(root)
    (section,) = assemble(data, tmp_path_factory.mktemp("out")).sections
    return data.settings[0], section


def _tables(section) -> dict[str, TableModel]:
    return {t.title: t for t in [*section.tables, *(k for k in section.kept_worth if isinstance(k, TableModel))]}


def _run_seeds(setting, method: str, rate: float) -> tuple[int, ...]:
    runs = setting.runs
    return tuple(sorted(int(s) for s in runs.seed[(runs.method == method) & (runs.noise_rate.astype(float) == rate)]))


def test_the_words_name_the_seeds_of_most_rows_and_every_other() -> None:
    assert seeds_words({"a": (0, 1, 2), "b": (0, 1, 2), "c": (0, 1, 2, 3, 4)}) == "seeds 0,1,2 (c: seeds 0,1,2,3,4)"
    assert seeds_words({"a": (0,)}) == "seed 0" and seeds_words({}) == ""
    assert seeds_by_row({("a", 0.5): [0, 1], ("a", 0.8): [0, 1, 2], ("b", 0.5): [2, 0, 1]}) == {
        "a at 50%": (0, 1), "a at 80%": (0, 1, 2), "b": (0, 1, 2)}


def test_the_kept_set_tables_name_the_seeds_of_their_comparisons(study) -> None:
    setting, section = study
    tables = _tables(section)
    decomposition, types = tables[DECOMPOSITION_TITLE], tables[NOISE_TYPES_TITLE]
    worth = kept_worth(setting, n_resamples=50)
    compared = {int(s) for split in worth.splits for check in (split.total, split.filter, split.other)
                for s in check.comparison.seeds}
    assert compared == set(FEWER)  # what the decomposition reads, whatever the leaderboard's seeds
    assert heading(decomposition) == f"{DECOMPOSITION_TITLE}, seeds 0,1,2"
    assert heading(types) == f"{NOISE_TYPES_TITLE}, seeds 0,1,2"
    titles = [p.title for p in parts(section)]
    assert f"{DECOMPOSITION_TITLE}, seeds 0,1,2" in titles and section.leaderboard.seeds == list(HEADLINE)


def test_every_table_heading_names_the_seeds_each_row_reads(study) -> None:
    setting, section = study
    tables = _tables(section)
    ablations = tables["Ablations"]
    assert heading(ablations) == "Ablations, seeds 0,1,2 (conesep: seeds 0,1,2,3,4)"  # the full row: the headline's cells
    assert heading(tables["Retrieval"]) == "Retrieval, seeds 0,1,2,3,4"
    for table in tables.values():
        assert table.seeds and heading(table) == f"{table.title}, {seeds_words(table.seeds)}", table.title
        if table.title in (DECOMPOSITION_TITLE, NOISE_TYPES_TITLE, "Reference rows") or table.title.startswith(("Tuned", "Claim")):
            continue  # rows that are not one method's cells (read above, or by their own tests)
        rate = ""
        for noise, label, _ in table.rows:  # a method's row: the seeds of its runs at that rate
            rate = noise or rate
            method = label.split(" (")[0].rstrip("†‡")
            said = table.seeds.get(method) or table.seeds[f"{method} at {rate}"]
            assert said == _run_seeds(setting, method, float(rate.rstrip("%")) / 100), (table.title, rate, method)
