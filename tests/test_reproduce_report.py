"""``benchmarks/reproduce_report.py`` re-runs a reference folder's cells and compares their
final metrics within the reference seeds' spread: on ``shapes-mini`` with one epoch, against
a reference folder built here (the same machine reproduces it exactly; an altered reference
is outside; a reference of one seed cannot answer)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from cirbench.engine.grid import Grid, GridSpec
from cirbench.engine.runner import run_grid
from cirbench.results.store import ResultsStore

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("reproduce_report", ROOT / "benchmarks" / "reproduce_report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reference(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reference folder: sprc at 50% noise, seeds 0 and 1, one epoch on shapes-mini."""
    output = tmp_path_factory.mktemp("reference") / "results"
    grid = Grid(GridSpec(methods=["sprc"], noise_rates=[0.5], seeds=[0, 1], dataset="shapes-mini", epochs=1,
                         batch_size=64, holdout=0.1, output=output, cache_dir=cache_dir))
    assert all(o.status == "completed" for o in run_grid(grid, jobs=1))
    return output


def _check(reference: Path, scratch: Path, cache_dir: Path, *extra: str) -> int:
    return _script().main(["--reference", str(reference), "--dataset", "shapes-mini", "--noise", "0.5", "--seeds", "0",
                           "--batch-size", "64", "--scratch", str(scratch), "--cache-dir", str(cache_dir), "--jobs", "1",
                           *extra])


def test_the_same_machine_reproduces_its_reference(reference: Path, cache_dir: Path, tmp_path: Path, capsys) -> None:
    assert _check(reference, tmp_path / "scratch", cache_dir) == 0
    out = capsys.readouterr().out
    assert "1 epochs, held-out share 0.1" in out and "3 of 3 within 2 std" in out
    rows = [line for line in out.splitlines() if line.startswith("sprc ")]
    assert len(rows) == 3 and all(line.endswith("ok") and "+0.0000" in line for line in rows)


def test_a_reference_it_does_not_reproduce_exits_1(reference: Path, cache_dir: Path, tmp_path: Path, capsys) -> None:
    altered = tmp_path / "altered"
    shutil.copytree(reference, altered)
    runs = ResultsStore(altered).read("runs")
    for run_id in runs[runs.method == "sprc"].run_id:  # every seed moved alike: the spread stays, the values move
        part = ResultsStore(altered).part("metrics", run_id)
        metrics = pd.read_parquet(part)
        metrics.loc[metrics.metric == "recall@5", "value"] += 0.5
        metrics.to_parquet(part, index=False)
    assert _check(altered, tmp_path / "scratch", cache_dir, "--metrics", "recall@10,recall@5") == 1
    out = capsys.readouterr().out
    assert "OUTSIDE" in out and "1 of 2 within" in out


def test_a_reference_of_one_seed_cannot_answer(reference: Path, cache_dir: Path, tmp_path: Path, capsys) -> None:
    one = tmp_path / "one-seed"
    shutil.copytree(reference, one)
    runs = ResultsStore(one).read("runs")
    for run_id in runs[runs.seed == 1].run_id:
        for table in ("runs", "metrics"):
            ResultsStore(one).part(table, run_id).unlink(missing_ok=True)
    assert _check(one, tmp_path / "scratch", cache_dir) == 2
    assert "at least two are needed" in capsys.readouterr().err


def test_a_report_folder_is_a_reference_too(reference: Path, cache_dir: Path, tmp_path: Path, capsys) -> None:
    """A newcomer has the committed report, not its results folder: its cells table answers alike."""
    from cirbench.report.build import build_report
    from cirbench.report.cells_csv import FINAL_METRICS_FILE

    report = tmp_path / "report"
    build_report(reference, report)
    table = pd.read_csv(next(report.glob(f"*/{FINAL_METRICS_FILE}")))
    assert sorted(table.seed) == [0, 1] and {"run_id", "start_key", "recall@10"} <= set(table.columns)
    assert _check(report, tmp_path / "scratch", cache_dir) == 0
    assert "3 of 3 within 2 std" in capsys.readouterr().out

    broken = next(report.glob(f"*/{FINAL_METRICS_FILE}"))
    table.drop(columns=["holdout"]).to_csv(broken, index=False)
    assert _check(report, tmp_path / "scratch2", cache_dir) == 2
    err = capsys.readouterr().err
    assert str(broken) in err and "missing column(s) holdout" in err
