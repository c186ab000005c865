"""``cirbench reproduce`` re-runs a reference folder's cells and compares their
final metrics within the reference seeds' spread: on ``shapes-mini`` with one epoch, against
a reference folder built here (the same machine reproduces it exactly; an altered reference
is outside; a reference of one seed cannot answer)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import cirbench.cli.main as cli

from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.engine.running.runner import run_grid
from cirbench.results.store import ResultsStore


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli.console, "width", 300)  # an error naming a long path stays on one line


@pytest.fixture(scope="module")
def reference(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reference folder: sprc at 50% noise, seeds 0 and 1, one epoch on shapes-mini."""
    output = tmp_path_factory.mktemp("reference") / "results"
    grid = Grid(GridSpec(methods=["sprc"], noise_rates=[0.5], seeds=[0, 1], dataset="shapes-mini", epochs=1,
                         batch_size=64, holdout=0.1, output=output, cache_dir=cache_dir))
    assert all(o.status == "completed" for o in run_grid(grid, jobs=1))
    return output


def _check(reference: Path, scratch: Path, cache_dir: Path, *extra: str):
    return CliRunner().invoke(cli.app, ["reproduce", "--reference", str(reference), "--dataset", "shapes-mini", "--noise",
                                        "0.5", "--seeds", "0", "--batch-size", "64", "--scratch", str(scratch),
                                        "--cache-dir", str(cache_dir), "--jobs", "1", *extra])


def test_the_same_machine_reproduces_its_reference(reference: Path, cache_dir: Path, tmp_path: Path) -> None:
    result = _check(reference, tmp_path / "scratch", cache_dir)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "1 epochs, held-out share 0.1" in out and "3 of 3 within 2 std" in out
    rows = [line for line in out.splitlines() if line.startswith("sprc ")]
    assert len(rows) == 3 and all(line.endswith("ok") and "+0.0000" in line for line in rows)


def test_a_reference_it_does_not_reproduce_exits_1(reference: Path, cache_dir: Path, tmp_path: Path) -> None:
    altered = tmp_path / "altered"
    shutil.copytree(reference, altered)
    runs = ResultsStore(altered).read("runs")
    for run_id in runs[runs.method == "sprc"].run_id:  # every seed moved alike: the spread stays, the values move
        part = ResultsStore(altered).part("metrics", run_id)
        metrics = pd.read_parquet(part)
        metrics.loc[metrics.metric == "recall@5", "value"] += 0.5
        metrics.to_parquet(part, index=False)
    result = _check(altered, tmp_path / "scratch", cache_dir, "--metrics", "recall@10,recall@5")
    assert result.exit_code == 1, result.output
    out = result.output
    assert "OUTSIDE" in out and "1 of 2 within" in out


def test_a_reference_of_one_seed_cannot_answer(reference: Path, cache_dir: Path, tmp_path: Path) -> None:
    one = tmp_path / "one-seed"
    shutil.copytree(reference, one)
    runs = ResultsStore(one).read("runs")
    for run_id in runs[runs.seed == 1].run_id:
        for table in ("runs", "metrics"):
            ResultsStore(one).part(table, run_id).unlink(missing_ok=True)
    result = _check(one, tmp_path / "scratch", cache_dir)
    assert result.exit_code == 2 and "at least two are needed" in result.output


def test_a_report_folder_is_a_reference_too(reference: Path, cache_dir: Path, tmp_path: Path) -> None:
    """A newcomer has the committed report, not its results folder: its cells table answers alike."""
    from cirbench.report.render.build import build_report
    from cirbench.report.analysis.loading.cells import FINAL_METRICS_FILE

    report = tmp_path / "report"
    build_report(reference, report)
    table = pd.read_csv(next(report.glob(f"*/{FINAL_METRICS_FILE}")))
    assert sorted(table.seed) == [0, 1] and {"run_id", "start_key", "recall@10"} <= set(table.columns)
    result = _check(report, tmp_path / "scratch", cache_dir)
    assert result.exit_code == 0 and "3 of 3 within 2 std" in result.output

    broken = next(report.glob(f"*/{FINAL_METRICS_FILE}"))
    table.drop(columns=["holdout"]).to_csv(broken, index=False)
    result = _check(report, tmp_path / "scratch2", cache_dir)
    assert result.exit_code == 2
    err = result.output
    assert str(broken) in err and "missing column(s) holdout" in err


def test_a_reference_from_another_start_is_refused_before_any_work(reference: Path, cache_dir: Path, tmp_path: Path) -> None:
    """A report made from another release of the start is another benchmark: refused (exit 2),
    naming both starts, and no cell is re-run."""
    other = tmp_path / "other-start"
    shutil.copytree(reference, other)
    store = ResultsStore(other)
    for run_id in store.read("runs").run_id:
        part = store.part("runs", run_id)
        runs = pd.read_parquet(part)
        runs["start_key"] = "tiny-pretrained-00000000+cir-00000000"
        runs.to_parquet(part, index=False)
    scratch = tmp_path / "scratch"
    result = _check(other, scratch, cache_dir)
    assert result.exit_code == 2, result.output
    assert "tiny-pretrained-00000000+cir-00000000" in result.output and "another benchmark" in result.output
    assert not scratch.exists() or not any(scratch.iterdir())
