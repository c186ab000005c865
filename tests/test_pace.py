"""A study's pending cells timed at its results folder's measured pace (``cirbench study FILE
--plan``): each at its method's median completed cell, a cell two grids share once, a label
with no measured method at the median of every cell."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from cirbench.api.pace import measured_seconds, pace
from cirbench.api.plan import GridPlan
from cirbench.cli.options import console
from cirbench.cli.study import print_pace

CELLS = [("sprc", "completed", False, 100.0), ("sprc", "completed", False, 110.0), ("sprc", "completed", False, 300.0),
         ("tme", "completed", False, 60.0), ("tme:release", "completed", False, 80.0),
         ("zero_shot", "completed", True, 5.0), ("tme", "failed", False, 1.0)]


def _results(root: Path) -> Path:
    (root / "runs").mkdir(parents=True)
    for n, (method, status, reference, seconds) in enumerate(CELLS):
        row = {"method": method, "status": status, "is_reference": reference, "wall_seconds": seconds}
        pd.DataFrame([row]).to_parquet(root / "runs" / f"cell{n}.parquet")
    return root


def _plans() -> list[GridPlan]:
    first = GridPlan("grid 1", "", 4, 3, pending_labels={"a": "sprc:release", "b": "tme:trial1", "c": "replay:tme"})
    second = GridPlan("grid 2", "", 2, 2, pending_labels={"c": "replay:tme", "d": "sprc"})
    return [first, second]


def test_each_method_is_timed_at_its_median_completed_cell(tmp_path: Path) -> None:
    medians = measured_seconds(_results(tmp_path / "results"))
    assert medians.to_dict() == {"sprc": 110.0, "tme": 70.0}  # a variant is its method; no reference row, no failed cell


def test_the_pending_cells_add_up_once_each(tmp_path: Path) -> None:
    found = pace(_results(tmp_path / "results"), _plans())
    assert found.pending == 4 and found.unmeasured == 1  # replay:tme, shared by both grids, once
    assert found.by_method == {"sprc": 220.0, "tme": 70.0, "replay": 90.0}  # replay: the median of every method's
    assert found.hours(2) == pytest.approx(380.0 / 2 / 3600)
    assert pace(tmp_path / "empty", _plans()) is None


def test_the_plan_prints_the_measured_pace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _results(tmp_path / "results")
    study = tmp_path / "study.toml"
    study.write_text('[study]\noutput = "results"\nreport = ""\n[[grid]]\nkind = "run"\nmethods = ["sprc"]\n')
    monkeypatch.chdir(tmp_path)
    with console.capture() as captured:
        print_pace(study, _plans(), jobs=2)
    said = " ".join(captured.get().split())
    assert "the 4 pending cells take about 0.1 h, 2 at a time" in said
    assert "sprc 0.1 h" in said and "1 at the median of every cell" in said
