"""The start a fine-tune begins from is recorded with every run, and a results folder never
pools runs of one backbone fine-tuned from two different starts (two releases of the
``tiny`` start, or two caches whose pre-training came out differently)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from cirbench.backbones.tiny_pretrain import build_tiny
from cirbench.cli import app
from cirbench.engine.cell.life import run_cell
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.results.store import ResultsStore
from start_release import altered_start, use_release

runner = CliRunner()


def test_the_start_key_names_the_pretrained_state_not_the_seed(cache_dir: Path, tmp_path: Path, monkeypatch) -> None:
    first, second = build_tiny(None, 0, cache_dir), build_tiny(None, 7, cache_dir)
    assert first.start_key() == second.start_key()
    assert first.start_key().startswith(first.tower_key() + "+cir-")
    use_release(monkeypatch, altered_start(), tmp_path)
    assert build_tiny(None, 0, cache_dir).start_key() != first.start_key()


def _run(output: Path, cache_dir: Path):
    return runner.invoke(app, ["run", "--methods", "sprc", "--noise", "0", "--dataset", "shapes-mini", "--epochs", "1",
                               "--batch-size", "64", "--output", str(output), "--cache-dir", str(cache_dir)])


def test_a_folder_holding_another_start_is_refused_before_any_work(cache_dir: Path, tmp_path: Path, monkeypatch) -> None:
    output = tmp_path / "results"
    assert _run(output, cache_dir).exit_code == 0
    runs = ResultsStore(output).read("runs")
    assert set(runs.start_key) == {build_tiny(None, 0, cache_dir).start_key()}

    use_release(monkeypatch, altered_start(), tmp_path / "other")  # another release of the start
    refused = _run(output, cache_dir)
    text = " ".join(refused.output.split())
    assert refused.exit_code == 2 and "fine-tuned from another start" in text and "--cache-dir" in text
    pd.testing.assert_frame_equal(ResultsStore(output).read("runs"), runs)


def test_a_cell_run_without_the_preflight_fails_instead_of_pooling(cache_dir: Path, tmp_path: Path, monkeypatch) -> None:
    output = tmp_path / "results"
    assert _run(output, cache_dir).exit_code == 0
    use_release(monkeypatch, altered_start(), tmp_path / "other")
    spec = GridSpec(methods=["sprc"], noise_rates=[0.5], dataset="shapes-mini", epochs=1, batch_size=64,
                    output=output, cache_dir=cache_dir)
    grid = Grid(spec)  # a scheduler job or worker process: it runs one cell, no preflight
    outcome = run_cell(grid.resources, grid.cells[0], progress=lambda info: None, announce=lambda message: None)
    assert outcome.status == "failed" and "another start" in outcome.error
    runs = ResultsStore(output).read("runs")
    failed = runs[runs.run_id == grid.cells[0].key.run_id]
    assert list(failed.status) == ["failed"] and list(failed.start_key) == [""]


def test_the_caches_exist_before_worker_processes_start_even_with_the_references_recorded(tmp_path: Path, monkeypatch) -> None:
    """Worker processes only read the caches; when the reference rows are already recorded
    (and so skipped) the main process still builds them first (a worker pre-training the
    start on its one thread once made a second start; the default start is now released, so
    nothing is pre-trained at all)."""
    from cirbench.engine.running import runner as runner_module
    fresh_cache = tmp_path / "fresh-cache"
    grid = Grid(GridSpec(methods=["sprc"], noise_rates=[0.0, 0.5], dataset="shapes-mini", epochs=1, batch_size=64,
                         output=tmp_path / "results", cache_dir=fresh_cache))
    found: dict[str, bool] = {}

    def workers(spec, run_ids, jobs):
        found["start"] = (fresh_cache / "towers").exists()  # a pre-trained start would be cached there
        found["tokens"] = any((fresh_cache / "features").glob("*.npy"))
        for run_id in run_ids:
            yield {"run_id": run_id, "status": "failed", "error": "not run", "final": {}}

    monkeypatch.setattr(runner_module, "run_references", lambda grid, references, report: [])  # as if recorded
    monkeypatch.setattr(runner_module, "run_in_processes", workers)
    outcomes = runner_module.run_grid(grid, jobs=2)
    assert len(outcomes) == 2 and found == {"start": False, "tokens": True}
