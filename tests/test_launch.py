"""One scheduler job per cell through submitit's local executor; a rerun submits only the
cells the results store does not hold as completed."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("submitit")

from cirbench.engine.running.grid import Grid, GridError, GridSpec  # noqa: E402
from cirbench.engine.running.launch import absolute_spec, pending_cells, submit_grid  # noqa: E402


def _spec(tmp_path: Path, data_dir: Path) -> GridSpec:
    return GridSpec(
        methods=["sprc", "oracle"], noise_rates=[0.5], dataset="shapes-mini", epochs=1, batch_size=300,
        output=tmp_path / "results", cache_dir=data_dir,
    )


@pytest.fixture(scope="module")
def data_dir(cache_dir: Path) -> Path:
    """shapes-mini and its tiny-tower cache, made once so that concurrent jobs only read them."""
    directory = cache_dir
    grid = Grid(GridSpec(methods=["sprc"], noise_rates=[0.0], dataset="shapes-mini", cache_dir=directory,
                         output=directory / "unused"))
    from cirbench.backbones.registry import BACKBONES

    grid.resources.tokens(BACKBONES.get("tiny")(0, directory, None), announce=lambda m: None)
    return directory


def test_each_cell_is_a_job_and_a_rerun_submits_only_incomplete_cells(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the local jobs share two cores
    spec = _spec(tmp_path, data_dir)
    first = submit_grid(Grid(spec), "local", timeout_min=10)
    assert [cell.key.method for cell, _ in first.jobs] == ["sprc", "oracle"] and not first.skipped
    outcomes = first.wait()
    assert [o["status"] for o in outcomes] == ["completed", "completed"], outcomes
    runs = pd.read_parquet(tmp_path / "results" / "runs")
    assert sorted(runs.method) == ["oracle", "sprc"] and (runs.status == "completed").all()
    assert any(first.folder.glob("*_log.out")), "the jobs' logs go to <output>/jobs"

    again = submit_grid(Grid(spec), "local", timeout_min=10)
    assert again.jobs == [] and len(again.skipped) == 2

    lost = next(c for c in Grid(absolute_spec(spec)).cells if c.key.method == "oracle")
    (tmp_path / "results" / "runs" / f"{lost.key.run_id}.parquet").unlink()
    third = submit_grid(Grid(spec), "local", timeout_min=10)
    assert [cell.key.run_id for cell, _ in third.jobs] == [lost.key.run_id] and len(third.skipped) == 1
    assert [o["status"] for o in third.wait()] == ["completed"]
    todo, done = pending_cells(Grid(absolute_spec(spec)))
    assert todo == [] and len(done) == 2


def test_a_bad_grid_or_launcher_submits_nothing(tmp_path: Path, data_dir: Path) -> None:
    spec = _spec(tmp_path, data_dir)
    with pytest.raises(ValueError, match="launcher 'pbs'"):
        submit_grid(Grid(spec), "pbs")
    with pytest.raises(GridError, match="noise rate"):
        Grid(GridSpec(methods=["sprc"], noise_rates=[1.5], output=tmp_path / "r"))  # nothing to submit: no grid
    with pytest.raises(ValueError, match="scheduler options"):
        submit_grid(Grid(spec), "local", options={"no_such_option": 1})
    assert not list((tmp_path / "results" / "jobs").glob("**/*.pkl")), "no job was written"
