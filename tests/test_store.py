"""Atomic writes, the results store, and resuming a grid after a failure or a kill."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
import pytest

from cirbench.engine.cell.life import run_cell
import cirbench.engine.cell.life as cell_module
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.results.atomic import atomic_write
from cirbench.results.store import TABLES, ResultsStore


def test_atomic_write_leaves_nothing_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "t" / "part.parquet"

    def explode(tmp: Path) -> None:
        tmp.write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(target, explode)
    assert not target.exists() and list(target.parent.iterdir()) == []


def spec(tmp_path: Path, cache_dir: Path, **kw) -> GridSpec:
    base = dict(methods=["sprc"], noise_rates=[0.0, 0.5], dataset="shapes-mini", epochs=1, batch_size=64,
                output=tmp_path / "results", cache_dir=cache_dir)
    base.update(kw)
    return GridSpec(**base)


def run_all(grid: Grid, progress=lambda info: None) -> list:
    return [run_cell(grid.resources, cell, progress, announce=lambda m: None) for cell in grid.cells]


def test_resume_after_interrupt_and_overwrite(tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    grid = Grid(spec(tmp_path, cache_dir))
    first, second = grid.cells
    assert run_cell(grid.resources, first, lambda info: None, announce=lambda m: None).status == "completed"

    def interrupt(info: dict) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_cell(grid.resources, second, interrupt, announce=lambda m: None)
    store = ResultsStore(tmp_path / "results")
    assert store.status(first.key.run_id) == "completed"
    assert store.status(second.key.run_id) == "interrupted"
    metrics_before = store.read("metrics")

    trained = []
    real = cell_module.train_cell
    monkeypatch.setattr(cell_module, "train_cell", lambda *a, **k: trained.append(a[0].name) or real(*a, **k))
    outcomes = run_all(Grid(spec(tmp_path, cache_dir)))
    assert [o.status for o in outcomes] == ["skipped", "completed"]
    assert len(trained) == 1
    after = store.read("metrics")
    first_rows = lambda m: m[m.run_id == first.key.run_id].reset_index(drop=True)  # noqa: E731
    pd.testing.assert_frame_equal(first_rows(metrics_before), first_rows(after))

    outcomes = run_all(Grid(spec(tmp_path, cache_dir, overwrite=True)))
    assert [o.status for o in outcomes] == ["completed", "completed"] and len(trained) == 3


def test_failed_cell_is_recorded_and_the_grid_goes_on(tmp_path: Path, cache_dir: Path) -> None:
    plugin = tmp_path / "exploding.py"
    plugin.write_text(textwrap.dedent('''
        from cirbench.method import Method
        class Exploding(Method):
            """Fails at its first step."""
            name = "exploding"
            def training_step(self, batch, epoch, step):
                raise RuntimeError("boom at step %d" % step)
    '''))
    grid = Grid(spec(tmp_path, cache_dir, methods=["exploding", "sprc"], noise_rates=[0.5], plugin_files=[plugin]))
    outcomes = run_all(grid)
    assert [o.status for o in outcomes] == ["failed", "completed"]
    runs = ResultsStore(tmp_path / "results").read("runs").set_index("method")
    assert runs.loc["exploding", "status"] == "failed" and "boom at step 0" in runs.loc["exploding", "error"]
    assert runs.loc["sprc", "status"] == "completed"
    for table in TABLES:  # every table reads whole, the failed run's parts are empty
        frame = ResultsStore(tmp_path / "results").read(table)
        assert "exploding" not in set(frame.method) or table == "runs"


def test_stray_temporary_files_are_ignored(tmp_path: Path, cache_dir: Path) -> None:
    run_all(Grid(spec(tmp_path, cache_dir, noise_rates=[0.0])))
    (tmp_path / "results" / "metrics" / ".run-x.parquet.123.tmp").write_bytes(b"PAR1 half written")
    frame = pd.read_parquet(tmp_path / "results" / "metrics")
    assert len(frame) > 0 and set(frame.metric) >= {"recall@1", "recall@10", "recall@50"}
