"""Named extra per-sample scores (``StepOutput.extra_scores``): recorded beside the main
``noise_score`` with their ``score_name``, kept out of the report's tables, and old tables
without the column read as the main score."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cirbench.engine.cell.life import run_cell
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.report.analysis.loading.load import load_results
from cirbench.report.analysis.loading.numbers import purity_per_run
from cirbench.results.store import MAIN_SCORE, SCHEMAS, ResultsStore

PLUGIN = textwrap.dedent(
    '''
    import torch
    from cirbench.method import Method, StepOutput

    class TwoScores(Method):
        """Scores each sample by its own query similarity to its target, and by its position."""
        name = "{name}"
        scores_noise = True

        def training_step(self, batch, epoch, step):
            query = self.backbone.composed_feature(batch.reference, batch.text)
            sim = self.similarity(query, self.backbone.target_features(batch.target)).diagonal()
            position = batch.index.float()
            return StepOutput(-sim.mean(), noise_score=-sim.detach(),
                              extra_scores={{"{extra}": position, "uniform": torch.ones_like(position)}})
    '''
)


def _plugin(tmp_path: Path, name: str = "two_scores", extra: str = "position") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(PLUGIN.format(name=name, extra=extra))
    return path


def _run(tmp_path: Path, cache_dir: Path, plugin: Path, method: str = "two_scores") -> tuple[Grid, list]:
    grid = Grid(GridSpec(methods=[method], noise_rates=[0.5], epochs=2, batch_size=128, dataset="shapes-mini",
                         output=tmp_path / "results", cache_dir=cache_dir, plugin_files=[plugin]))
    outcomes = [run_cell(grid.resources, cell, progress=lambda info: None, announce=lambda m: None) for cell in grid.cells]
    return grid, outcomes


def test_extra_scores_are_recorded_with_their_name(tmp_path: Path, cache_dir: Path) -> None:
    grid, (outcome,) = _run(tmp_path, cache_dir, _plugin(tmp_path))
    assert outcome.status == "completed", outcome.error
    purity, scores = grid.store.read("purity"), grid.store.read("scores")
    assert set(purity.score_name) == set(scores.score_name) == {MAIN_SCORE, "position", "uniform"}
    # AUROC per epoch and noise type for every name
    by_name = purity.groupby(["score_name", "epoch"]).noise_type.apply(set)
    assert all(types == {"all", "reference", "caption", "target"} for types in by_name)
    assert len(by_name) == 3 * 2
    assert purity[purity.score_name == "uniform"].auroc.eq(0.5).all()  # a constant score does not separate
    position = scores[(scores.score_name == "position") & (scores.epoch == 1)]
    n = len(position)
    assert sorted(position.score) == list(range(n))  # each sample's own value, in split order
    assert position.selected_clean.isna().all()  # an extra score is a score, not a partition

    (setting,) = load_results(grid.spec.output).settings
    assert set(setting.purity.score_name) == set(setting.scores.score_name) == {MAIN_SCORE}
    assert set(setting.extra_scores.score_name) == {"position", "uniform"}
    assert set(setting.extra_scores.epoch) == {1}  # the final epoch only, like scores
    assert len(setting.named_scores("position")) == n and len(setting.named_scores(MAIN_SCORE)) == n
    main_auroc = setting.purity.query("noise_type == 'all' and epoch == 1").auroc.iloc[0]
    assert purity_per_run(setting)["AUROC"].iloc[0] == pytest.approx(100 * main_auroc)  # the tables use the main score


def test_an_extra_score_may_not_take_the_main_scores_name(tmp_path: Path, cache_dir: Path) -> None:
    grid, (outcome,) = _run(tmp_path, cache_dir, _plugin(tmp_path, "clash", extra=MAIN_SCORE), method="clash")
    assert outcome.status == "failed" and "may not be named 'noise_score'" in outcome.error


def test_tables_written_before_score_name_read_as_the_main_score(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    old = SCHEMAS["purity"].remove(SCHEMAS["purity"].get_field_index("score_name"))
    frame = pd.DataFrame({f.name: pd.Series(dtype=object) for f in old})
    row = {name: None for name in old.names} | {"run_id": "old", "epoch": 0, "noise_type": "all", "auroc": 0.7}
    frame = pd.concat([frame, pd.DataFrame([row])], ignore_index=True)
    (tmp_path / "purity").mkdir()
    pq.write_table(pa.Table.from_pandas(frame, schema=old, preserve_index=False), tmp_path / "purity" / "old.parquet")
    read = store.read("purity")
    assert list(read.columns) == SCHEMAS["purity"].names
    assert read.score_name.tolist() == [MAIN_SCORE] and read.auroc.tolist() == [0.7]
