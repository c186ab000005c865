"""The harness from Python (:mod:`cirbench.api`): the usage page's example runs and gives the
cells the command line gives, and the command line's grids are the API's (defaults, held-out
rule, ablation rows, sweep trials, calibration grid)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from cirbench import api

from cirbench.settings import defaults
from cirbench.cli import app
from cirbench.engine.planning.spec import GridError
from cirbench.results.store import ResultsStore

ROOT = Path(__file__).resolve().parents[1]


def _usage_example() -> str:
    page = (ROOT / "docs" / "usage.md").read_text()
    return page.split("## From Python", 1)[1].split("```python", 1)[1].split("```", 1)[0]


def test_the_usage_pages_example_runs_and_gives_the_clis_cells(tmp_path: Path, cache_dir: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "datasets").symlink_to(cache_dir)  # the session's generated data, as the example's default cache folder
    scope: dict = {}
    exec(compile(_usage_example(), "docs/usage.md", "exec"), scope)
    assert {o.status for o in scope["outcomes"]} == {"completed"} and (tmp_path / "reports" / "report.md").is_file()
    before = ResultsStore(tmp_path / "results").read("runs").sort_values("run_id", ignore_index=True)
    result = CliRunner().invoke(app, ["run", "--methods", "sprc", "--noise", "0.5", "--dataset", "shapes-mini", "--epochs", "1",
                                      "--batch-size", "64", "--output", "results", "--cache-dir", "datasets"])
    assert result.exit_code == 0, result.output
    after = ResultsStore(tmp_path / "results").read("runs").sort_values("run_id", ignore_index=True)
    assert set(before.run_id) >= {c.key.run_id for c in scope["grid"].cells}
    pd.testing.assert_frame_equal(before, after)  # the command line's grid is the same cells: nothing ran again


def test_a_grid_without_methods_or_rates_is_the_defaults(tmp_path: Path) -> None:
    grid = api.grid(output=tmp_path, dataset="shapes-mini")
    assert grid.spec.methods == list(defaults.METHODS) and grid.spec.noise_rates == list(defaults.NOISE_RATES)
    assert grid.spec.holdout == defaults.HOLDOUT == api.resolved_holdout(None, "shapes-mini")
    assert api.resolved_holdout(None, "cirr") == 0.0 and api.resolved_holdout(0.2, "cirr") == 0.2


def test_an_ablation_brings_its_rows_and_rates(tmp_path: Path) -> None:
    told: list[str] = []
    grid = api.grid(ablate=["conesep"], output=tmp_path, announce=told.append)
    assert grid.spec.methods[0] == "conesep" and len(grid.spec.methods) > 1
    assert all(label.startswith("conesep") for label in grid.spec.methods) and 0.0 not in grid.spec.noise_rates
    assert told and told[0].startswith("--ablate: conesep")


def test_a_sweep_has_its_trials_and_refuses_no_held_out_split(tmp_path: Path) -> None:
    grid = api.sweep(["sprc"], [0.5], trials=2, output=tmp_path)
    assert grid.spec.methods == ["sprc", "sprc:trial1"] and grid.spec.holdout == defaults.HOLDOUT  # trial 0: the defaults
    with pytest.raises(GridError, match="--holdout 0: a sweep selects on the held-out split"):
        api.sweep(["sprc"], [0.5], holdout=0.0, output=tmp_path)
    with pytest.raises(GridError, match="at least one trial"):
        api.sweep(["sprc"], [0.5], trials=0, output=tmp_path)


def test_the_calibration_grid_is_the_calibration_methods_and_rates(tmp_path: Path) -> None:
    grid = api.calibration(hosted=False, output=tmp_path, dataset="shapes-mini")
    assert {c.key.method for c in grid.cells} == set(defaults.CALIBRATION_METHODS)
    assert {c.key.noise_rate for c in grid.cells} == set(defaults.CALIBRATION_RATES)
