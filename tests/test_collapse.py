"""The collapse guard (cirbench.results.collapse): the rule on constructed metrics and losses,
and the ``collapsed`` / ``collapse_reason`` columns a grid cell's ``runs`` row carries (and
its ``below_chance`` ones, cirbench.results.chance)."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

import cirbench.cli.grid as cli_grid
from cirbench.engine.cell.life import run_cell, run_reference
from cirbench.results.collapse import collapse_reason, final_recall
from cirbench.engine.cell import life as cell_module
from cirbench.engine.running.grid import Grid, GridSpec

TEXT_ONLY = 0.013


def _metrics(r10: list[float], group: str = "all") -> pd.DataFrame:
    """Validation R@10 of one run per epoch (from 0), in ``group``."""
    return pd.DataFrame([{"epoch": e, "split": "val", "group": group, "metric": "recall@10", "value": v, "eval_protocol": "p"}
                         for e, v in enumerate(r10)])


def _losses(per_epoch: list[list[float]]) -> pd.DataFrame:
    """Per-step ``total`` losses (and a component) of one run, a list per epoch."""
    rows, step = [], 0
    for epoch, values in enumerate(per_epoch):
        for value in values:
            rows += [{"epoch": epoch, "step": step, "name": "total", "value": value},
                     {"epoch": epoch, "step": step, "name": "itc", "value": 1.0}]  # a constant component is no collapse
            step += 1
    return pd.DataFrame(rows)


HEALTHY_LOSS = [[4.1, 3.9, 3.7], [3.5, 3.6, 3.2], [3.0, 2.9, 3.1]]


def test_a_healthy_cell_has_no_reason() -> None:
    assert collapse_reason(_metrics([0.3, 0.4, 0.45]), _losses(HEALTHY_LOSS), TEXT_ONLY) == ""


def test_below_text_only_at_the_final_epoch() -> None:
    reason = collapse_reason(_metrics([0.3, 0.2, 0.005]), _losses(HEALTHY_LOSS), TEXT_ONLY)
    assert reason == "R@10 0.005 below text_only 0.013 at the final epoch (3)"


def test_two_epochs_in_a_row_below_then_recovering_is_flagged() -> None:
    reason = collapse_reason(_metrics([0.010, 0.012, 0.3, 0.4]), _losses(HEALTHY_LOSS), TEXT_ONLY)
    assert reason == "R@10 below text_only 0.013 at epochs 1-2"


def test_one_epoch_below_then_recovering_is_not_flagged() -> None:
    assert collapse_reason(_metrics([0.3, 0.010, 0.3, 0.012, 0.4]), _losses(HEALTHY_LOSS), TEXT_ONLY) == ""


def test_a_total_loss_constant_over_an_epoch_is_flagged() -> None:
    frozen = [[4.1, 3.9, 3.7], [6.5155, 6.5155 + 1e-7, 6.5155 - 1e-7], [3.0, 2.9, 3.1]]
    reason = collapse_reason(_metrics([0.3, 0.4, 0.45]), _losses(frozen), TEXT_ONLY)
    assert reason == "total loss constant over epoch 2 (6.5155)"
    # frozen at the constant-prediction value of two batch sizes (125, then 126 rows): still constant
    two_sizes = [[6.5235] * 3 + [6.5155] * 5]
    assert collapse_reason(_metrics([0.3]), _losses(two_sizes), TEXT_ONLY) == "total loss constant over epoch 1 (6.5185)"
    # a real loss moves by far more than the tolerance (1e-4 relative); an epoch of one step is not judged
    assert collapse_reason(_metrics([0.3]), _losses([[6.5155, 6.5185, 6.5135]]), TEXT_ONLY) == ""
    assert collapse_reason(_metrics([0.3]), _losses([[6.5155]]), TEXT_ONLY) == ""


def test_every_reason_is_given_and_the_headline_group_is_read() -> None:
    both = collapse_reason(_metrics([0.3, 0.01, 0.005]), _losses([[1.0, 2.0], [0.0, 0.0], [1.0, 2.0]]), TEXT_ONLY)
    assert both.split("; ") == ["R@10 0.005 below text_only 0.013 at the final epoch (3)",
                                "R@10 below text_only 0.013 at epochs 2-3", "total loss constant over epoch 2 (0.0000)"]
    # FashionIQ: the category average decides (as calibration reads it), not a category
    fiq = pd.concat([_metrics([0.001, 0.001], group="dress"), _metrics([0.2, 0.3], group="average")])
    assert collapse_reason(fiq, _losses(HEALTHY_LOSS), TEXT_ONLY) == ""
    assert final_recall(fiq) == pytest.approx(0.3)
    # without a text_only value the recall half of the rule is not applied
    assert collapse_reason(_metrics([0.0, 0.0]), _losses(HEALTHY_LOSS), math.nan) == ""


def _grid(tmp_path: Path, cache_dir: Path) -> Grid:
    return Grid(GridSpec(methods=["sprc"], noise_rates=[0.5], seeds=[0], dataset="shapes-mini", epochs=1, batch_size=200,
                         output=tmp_path / "results", cache_dir=cache_dir))


def test_text_only_is_read_from_the_store_or_evaluated_with_the_starting_backbone(tmp_path: Path, cache_dir: Path) -> None:
    grid = _grid(tmp_path, cache_dir)
    cell = grid.cells[0]
    dataset, backbone, tokens = cell_module.start(grid.resources, cell.key, {}, lambda m: None)
    evaluated = cell_module.text_only_recall(grid.resources, cell.key, dataset, backbone, tokens)  # no reference row recorded yet
    (text_only,) = [c for c in grid.reference_cells() if c.key.method == "text_only"]
    assert run_reference(grid.resources, text_only, announce=lambda m: None).status == "completed"
    stored = cell_module.text_only_recall(grid.resources, cell.key, dataset, None, None)  # read from the store: needs no backbone
    assert 0.0 < stored == evaluated


def test_a_grid_cell_records_the_flag_and_keeps_its_numbers(tmp_path: Path, cache_dir: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    grid = _grid(tmp_path, cache_dir)
    monkeypatch.setattr(cell_module, "text_only_recall", lambda *args: 1.5)  # a reference no cell reaches
    chance = "kept set 39.0% clean (390 of 1000) below chance 50.0% (p=4e-23) at the final epoch (1)"
    seen = []  # the kept-set rule (cirbench.results.chance) on the cell's own purity rows and n_noisy
    monkeypatch.setattr(cell_module, "below_chance_reason", lambda purity, n_noisy: seen.append(n_noisy) or chance)
    outcome = run_cell(grid.resources, grid.cells[0], progress=lambda info: None, announce=lambda m: None)
    assert outcome.status == "completed", outcome.error
    runs = pd.read_parquet(tmp_path / "results" / "runs")
    (row,) = runs.to_dict("records")
    assert row["status"] == "completed" and isinstance(row["collapsed"], (bool, np.bool_)) and row["collapsed"]
    assert row["collapse_reason"].endswith("below text_only 1.500 at the final epoch (1)")
    assert seen == [row["n_noisy"]] and row["below_chance"] and row["below_chance_reason"] == chance
    metrics = pd.read_parquet(tmp_path / "results" / "metrics")
    assert len(metrics) and np.isfinite(metrics.value).all()  # a flag, not a failure: the numbers stay

    printed = Console(file=io.StringIO(), width=250)
    monkeypatch.setattr(cli_grid, "console", printed)
    cli_grid.print_summary(grid, [outcome])  # what `cirbench run` prints after the grid
    summary = printed.file.getvalue()
    assert "completed collapsed below chance" in summary and row["collapse_reason"] in summary
    assert f"below chance sprc noise=0.5 seed=0: {chance}" in summary
