"""Kept-set cells trained on the tiny backbone (shapes-mini, two epochs): the two invariants
of a replay (the perfect filter's run replayed gives its metrics exactly; a run whose kept set
is every row, after a warm-up epoch with none, gives the baseline's exactly), a plugin
method from docs/examples replayed without any change, a frontier cell's kept set, the runs
table's record of them, a rerun that skips them (but redoes a replay whose source was re-run
with another kept set), and a report that never ranks them.

The replays must read the source's recorded kept set, never the ground truth: the second
and third tests fail when they do (the first cannot tell: the perfect filter's kept set is
the ground truth)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from cirbench.cli import app
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.engine.running.runner import run_grid
from cirbench.report import build_report
from cirbench.report.analysis.rankings.kept_worth import kept_worth
from cirbench.report.analysis.loading.load import load_results
from cirbench.report.tables.kept_worth import decomposition_table
from cirbench.results.store import MAIN_SCORE, TABLES, ResultsStore

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "docs" / "examples" / "template_per_batch.py"
KEEPS_EVERY_ROW = '''
import torch

from cirbench_methods.sprc import SPRC


class KeepsEveryRow(SPRC):
    """The baseline's step, reporting every row as kept after a warm-up epoch that reports none."""

    name = "keeps_every_row"
    partitions = True

    def training_step(self, batch, epoch, step):
        out = self.sprc_step(batch)
        if epoch > 0:
            out.selected_clean = torch.ones(len(batch), dtype=torch.bool, device=batch.index.device)
        return out
'''


@dataclass
class Trained:
    """The module's grid, its outcomes by label and its store."""

    grid: Grid
    status: dict[str, str]
    store: ResultsStore

    def run_id(self, label: str) -> str:
        return next(c.key.run_id for c in self.grid.cells if c.key.method == label)

    def metrics(self, label: str) -> pd.DataFrame:
        frame = self.store.read("metrics", [self.run_id(label)])
        columns = ["epoch", "split", "group", "metric", "value"]
        return frame[columns].sort_values(columns[:4]).reset_index(drop=True)

    def kept(self, label: str) -> pd.DataFrame:
        """The kept set the run recorded, one column per epoch, a row per training triplet."""
        scores = self.store.read("scores", [self.run_id(label)])
        scores = scores[scores.score_name == MAIN_SCORE]
        return scores.pivot(index="sample_id", columns="epoch", values="selected_clean")


def _spec(root: Path, cache_dir: Path, **fields) -> GridSpec:
    options = dict(methods=["sprc", "oracle", "keeps_every_row", "template_per_batch"], noise_rates=[0.5], seeds=[0],
                   dataset="shapes-mini", epochs=2, batch_size=128, holdout=0.1, output=root / "results", cache_dir=cache_dir,
                   plugin_files=[root / "keeps_every_row.py", TEMPLATE], frontier=[0.6],
                   replay=["oracle", "keeps_every_row", "template_per_batch"])
    return GridSpec(**{**options, **fields})


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Trained:
    root = tmp_path_factory.mktemp("kept-sets")
    (root / "keeps_every_row.py").write_text(KEEPS_EVERY_ROW)
    grid = Grid(_spec(root, cache_dir))
    outcomes = run_grid(grid)
    return Trained(grid, {o.cell.key.method: o.status for o in outcomes}, grid.store)


def test_every_cell_completes(trained: Trained) -> None:
    assert {label: status for label, status in trained.status.items() if status != "completed"} == {}
    assert [c.key.method for c in trained.grid.cells][-4:] == [
        "frontier:p0.6", "replay:oracle", "replay:keeps_every_row", "replay:template_per_batch"]


def test_replaying_the_perfect_filters_run_gives_its_metrics_exactly(trained: Trained) -> None:
    pd.testing.assert_frame_equal(trained.metrics("replay:oracle"), trained.metrics("oracle"), check_exact=True)
    assert set(trained.metrics("oracle").split) == {"val", "holdout"}


def test_replaying_a_run_that_keeps_every_row_gives_the_baselines_metrics_exactly(trained: Trained) -> None:
    source = trained.kept("keeps_every_row")
    assert source[0].isna().all() and source[1].eq(True).all()  # a warm-up epoch without a kept set, then every row
    pd.testing.assert_frame_equal(trained.metrics("replay:keeps_every_row"), trained.metrics("sprc"), check_exact=True)
    assert not trained.metrics("sprc").equals(trained.metrics("oracle"))  # so the equality above says something


def test_a_plugin_method_replays_without_any_change_to_it(trained: Trained) -> None:
    """The per-batch template of docs/examples, loaded from its file: the replay keeps, epoch by
    epoch, exactly what the template kept, which is not the clean set."""
    source, replay = trained.kept("template_per_batch"), trained.kept("replay:template_per_batch")
    assert list(source.columns) == [0, 1] and source.notna().all().all()
    pd.testing.assert_frame_equal(replay, source)
    truth = trained.store.read("scores", [trained.run_id("template_per_batch")]).drop_duplicates("sample_id")
    clean = ~truth.set_index("sample_id").is_noisy.reindex(source.index).astype(bool)
    assert not source[1].astype(bool).equals(clean) and not source[0].equals(source[1])


def test_a_frontier_cell_keeps_every_clean_triplet_and_reaches_its_purity(trained: Trained) -> None:
    scores = trained.store.read("scores", [trained.run_id("frontier:p0.6")])
    scores = scores[scores.score_name == MAIN_SCORE]
    for _, epoch in scores.groupby("epoch"):
        kept = epoch[epoch.selected_clean.astype(bool)]
        assert epoch[~epoch.is_noisy].selected_clean.all()
        assert abs((~kept.is_noisy).mean() - 0.6) <= 1 / len(kept)
    purity = trained.store.read("purity", [trained.run_id("frontier:p0.6")])
    assert np.allclose(purity[purity.noise_type == "all"].purity, 0.6, atol=0.01)


def test_the_runs_table_marks_them_as_reference_cells_with_their_source(trained: Trained) -> None:
    runs = trained.store.read("runs").set_index("method")
    assert (runs.loc[["sprc", "oracle", "template_per_batch"], "kept_set"] == "").all()
    frontier, replay = runs.loc["frontier:p0.6"], runs.loc["replay:template_per_batch"]
    assert frontier.kept_set == "frontier" and frontier.kept_set_purity == 0.6 and frontier.is_oracle and frontier.role == ""
    assert replay.kept_set == "replay" and not replay.is_oracle and replay.role == "" and np.isnan(replay.kept_set_purity)
    source = runs.loc["template_per_batch"]
    assert replay.kept_set_source == source.run_id
    assert replay.kept_set_source_sha256 == json.loads(source.parts)["scores"]["sha256"]
    assert runs.loc["replay:oracle", "method_version"] == runs.loc["oracle", "method_version"]


def test_a_rerun_skips_them_and_a_grid_without_the_sources_finds_the_same_replays(trained: Trained, cache_dir: Path) -> None:
    again = run_grid(Grid(trained.grid.spec))
    assert {o.status for o in again} == {"skipped"}
    alone = Grid(_spec(trained.store.root.parent, cache_dir, methods=["sprc"], frontier=[]))  # the sources complete in the folder
    assert [(c.key.method, c.key.run_id) for c in alone.cells if c.kept is not None] == [
        (label, trained.run_id(label)) for label in ("replay:oracle", "replay:keeps_every_row", "replay:template_per_batch")]


def test_a_replay_whose_source_recorded_another_kept_set_since_is_redone(
        trained: Trained, cache_dir: Path, tmp_path: Path) -> None:
    """A source re-run with another kept set (here its record rewritten with the kept rows
    flipped) makes its replay stale: the next run redoes that replay, keeps its old record
    under quarantine/, and skips everything else."""
    shutil.copytree(trained.store.root.parent, tmp_path, dirs_exist_ok=True)
    grid = Grid(_spec(tmp_path, cache_dir))
    store, source = grid.store, next(c.key for c in grid.cells if c.key.method == "template_per_batch")
    tables = {table: store.read(table, [source.run_id]) for table in TABLES if table != "runs"}
    main = tables["scores"].score_name == MAIN_SCORE
    tables["scores"].loc[main, "selected_clean"] = ~tables["scores"].loc[main, "selected_clean"].astype(bool)
    row = store.read("runs", [source.run_id]).iloc[0].to_dict()
    store.write_run(source, {k: v for k, v in row.items() if k != "parts"}, tables)
    assert store.is_complete(source.run_id)
    status = {o.cell.key.method: o.status for o in run_grid(grid)}
    assert status.pop("replay:template_per_batch") == "completed" and set(status.values()) == {"skipped"}
    runs = store.read("runs").set_index("method")
    new_sha = json.loads(runs.loc["template_per_batch", "parts"])["scores"]["sha256"]
    assert runs.loc["replay:template_per_batch", "kept_set_source_sha256"] == new_sha
    assert new_sha != json.loads(row["parts"])["scores"]["sha256"]
    replay_id = trained.run_id("replay:template_per_batch")
    assert list((tmp_path / "results" / "quarantine").rglob(f"runs/{replay_id}.parquet"))
    scores = store.read("scores", [replay_id])
    scores = scores[scores.score_name == MAIN_SCORE]
    replayed = scores.pivot(index="sample_id", columns="epoch", values="selected_clean").astype(bool)
    pd.testing.assert_frame_equal(replayed, ~trained.kept("template_per_batch").astype(bool))  # the new kept set


def test_the_report_never_ranks_them_and_keeps_them_apart(trained: Trained, tmp_path: Path) -> None:
    setting = load_results(trained.store.root).settings[0]
    labels = {"frontier:p0.6", "replay:oracle", "replay:keeps_every_row", "replay:template_per_batch"}
    assert set(setting.kept_sets.runs.method) == labels and labels.isdisjoint(setting.runs.method)
    assert labels.isdisjoint(setting.methods) and setting.problems.empty
    ids = set(setting.kept_sets.runs.run_id)
    assert set(setting.kept_sets.metrics.run_id) == ids == set(setting.kept_sets.epoch_ranks.run_id)
    read = set().union(*(set(frame.run_id) for frame in (setting.metrics, setting.purity, setting.scores, setting.epoch_ranks)))
    assert read and ids.isdisjoint(read)  # what the tables, figures and claims read holds none of them
    build_report(trained.store.root, tmp_path / "reports")
    written = "".join(p.read_text() for p in (tmp_path / "reports").rglob("*") if p.suffix in (".md", ".csv", ".tex", ".html"))
    assert not any(label in written for label in labels) and "keeps_every_row" in written
    first = (tmp_path / "reports" / "report.md").read_text().splitlines()[2]
    assert f"{len(setting.runs)} completed cell(s) and {len(labels)} kept-set cell(s) in 1 setting(s)" in first


def _rewrite_source(store: ResultsStore, source, change) -> dict:
    """Re-record ``source``'s cell with ``change`` applied to its main score's ``scores`` rows
    (as a re-run with ``--overwrite`` would); its old ``runs`` row."""
    tables = {table: store.read(table, [source.run_id]) for table in TABLES if table != "runs"}
    main = tables["scores"].score_name == MAIN_SCORE
    tables["scores"].loc[main] = change(tables["scores"].loc[main].copy())
    row = store.read("runs", [source.run_id]).iloc[0].to_dict()
    store.write_run(source, {k: v for k, v in row.items() if k != "parts"}, tables)
    assert store.is_complete(source.run_id)
    return row


def test_a_source_rerun_to_the_same_decisions_keeps_its_replay(trained: Trained, cache_dir: Path, tmp_path: Path) -> None:
    """Issue 66: the source's float scores differ (as between a two-worker grid and a single
    cell), its kept/dropped decisions do not: the replay stays valid, nothing is redone."""
    shutil.copytree(trained.store.root.parent, tmp_path, dirs_exist_ok=True)
    grid = Grid(_spec(tmp_path, cache_dir))
    store, source = grid.store, next(c.key for c in grid.cells if c.key.method == "template_per_batch")
    replay = store.read("runs", [trained.run_id("replay:template_per_batch")]).iloc[0]
    assert json.loads(replay.kept_set_source_decisions).keys() == {"0", "1"}  # a digest per epoch replayed
    old = _rewrite_source(store, source, lambda rows: rows.assign(score=rows.score + 5.7e-6))
    new_parts = json.loads(store.read("runs", [source.run_id]).parts[0])
    assert new_parts["scores"]["sha256"] != json.loads(old["parts"])["scores"]["sha256"]
    assert {o.status for o in run_grid(grid)} == {"skipped"}
    assert not (tmp_path / "results" / "quarantine").exists()
    verified = CliRunner().invoke(app, ["results", "verify", "--results", str(tmp_path / "results")])
    assert verified.exit_code == 0 and "every replay true to its source" in " ".join(verified.output.split())


def test_a_source_rerun_to_other_decisions_makes_verify_and_the_report_call_its_replay_stale(
        trained: Trained, cache_dir: Path, tmp_path: Path) -> None:
    """Issue 66: ``results verify`` names the stale replay and its source and exits 1; the
    report leaves the replay out of what a kept set is worth with a note naming the command."""
    shutil.copytree(trained.store.root.parent, tmp_path, dirs_exist_ok=True)
    grid = Grid(_spec(tmp_path, cache_dir))
    store, source = grid.store, next(c.key for c in grid.cells if c.key.method == "template_per_batch")
    replay_id = trained.run_id("replay:template_per_batch")
    flip = lambda rows: rows.assign(selected_clean=~rows.selected_clean.astype(bool))  # noqa: E731
    _rewrite_source(store, source, flip)
    verified = CliRunner().invoke(app, ["results", "verify", "--results", str(tmp_path / "results")])
    said = "".join(verified.output.split())
    assert verified.exit_code == 1, verified.output
    assert "".join(f"cell {replay_id}: stale replay: its source {source.run_id} was re-run since".split()) in said
    assert "1stalereplay(s)" in said
    worth = kept_worth(load_results(tmp_path / "results").settings[0], n_resamples=20)
    assert replay_id not in worth.points.index and trained.run_id("replay:oracle") in worth.points.index
    assert [s.method for s in worth.splits] == ["keeps_every_row"]  # template_per_batch's row needs its replay: left out
    (note,) = worth.left_out
    assert note.startswith("`replay:template_per_batch` at 50%, seed 0 left out: stale replay: its source")
    assert ("`cirbench run` of its grid with `--replay template_per_batch --output results` (this report's results "
            "folder) redoes it") in note
    assert str(tmp_path) not in note  # a committed report names no machine's path
    assert note in decomposition_table(worth).note  # the report's decomposition says so under its table
