"""The noise rate is declared privileged information (issue 58): a method that declares
``reads_noise_rate`` (docs/examples/forget_rate.py, Co-teaching's forget rate) trains in a
grid with the rate of each cell, the runs table records that it was told, and the report
marks it in words wherever it names it; no other method is told (``tests/test_isolation.py``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from cirbench.cli import app

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "forget_rate.py"
RATES = (0.2, 0.5)


@pytest.fixture(scope="module")
def grid(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The results folder of forget_rate, its replay and sprc at 20% and 50% noise on shapes-mini."""
    out = tmp_path_factory.mktemp("told") / "results"
    result = CliRunner().invoke(app, ["run", "--plugin", str(EXAMPLE), "--methods", "forget_rate,sprc", "--noise",
                                      ",".join(map(str, RATES)), "--dataset", "shapes-mini", "--epochs", "1",
                                      "--batch-size", "64", "--output", str(out), "--cache-dir", str(cache_dir),
                                      "--replay", "forget_rate"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    # the summary table marks the method and its replay, whose kept set was chosen with the rate (issue 66)
    assert "".join("replay:forget_rate (told the noise rate)".split()) in "".join(
        c for c in result.output if c not in " \n│")
    return out


def test_it_trains_with_the_rate_of_each_cell(grid: Path) -> None:
    purity = pd.read_parquet(grid / "purity")
    kept = purity[(purity.method == "forget_rate") & (purity.noise_type == "all")].set_index("noise_rate")
    for rate in RATES:  # it forgets the rate's share of every batch
        assert kept.loc[rate, "n_selected"] / kept.loc[rate, "n_samples"] == pytest.approx(1 - rate, abs=0.01)
    losses = pd.read_parquet(grid / "losses")
    told = losses[(losses.method == "forget_rate") & (losses.name == "forget_rate")]
    assert dict(told.groupby("noise_rate").value.unique().map(list)) == {rate: [rate] for rate in RATES}


def test_the_runs_table_records_who_was_told(grid: Path) -> None:
    runs = pd.read_parquet(grid / "runs")
    assert dict(zip(runs.method, runs.reads_noise_rate)) == {"forget_rate": True, "sprc": False, "zero_shot": False,
                                                           "text_only": False, "text_blind": False,
                                                           "replay:forget_rate": True}  # inherited from its source


def test_the_report_marks_it_in_words(grid: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", "--results", str(grid), "--output", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "report" / "report.md").read_text()
    assert "forget_rate (told the noise rate)" in page
    assert "A method marked (told the noise rate) read the configured noise rate, which no other method is given" in page
    assert "sprc (told the noise rate)" not in page
    assert "forget_rate (told the noise rate)'s replay 92% pure" in page  # the chart's words, for its replay too
    decomposition = page.split("| Noise | Method | Purity (%) | method - sprc |", 1)[1].split("\n\n", 1)[0]
    assert "| 20% | forget_rate (told the noise rate) |" in decomposition  # its row, its filter being its replay's
