"""Every registered method runs a few steps through the real loop and evaluates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cirbench.engine.grid import Grid, GridSpec
from cirbench.plugins import discover_methods

METHODS = discover_methods().methods.names()


@pytest.mark.parametrize("method", METHODS)
def test_method_conforms(method: str, tmp_path: Path, cache_dir: Path) -> None:
    grid = Grid(GridSpec(methods=[method], noise_rates=[0.5], dataset="shapes-mini", epochs=2, batch_size=64,
                         output=tmp_path, cache_dir=cache_dir))
    (cell,) = grid.cells
    outcome = grid.run_cell(cell, lambda info: None, announce=lambda m: None)
    assert outcome.status == "completed", outcome.error
    recall = outcome.final["all"]
    assert set(recall) >= {"recall@1", "recall@5", "recall@10", "recall@50"}
    assert all(0.0 <= v <= 1.0 for v in recall.values())
    losses = outcome.result.tables["losses"]
    assert np.isfinite(losses.value).all() and "total" in set(losses.name)
    cls = cell.method_cls
    assert isinstance(cls.version, str) and cls.version
    purity = outcome.result.tables["purity"]
    if cls.partitions:
        final = purity[(purity.epoch == 1) & (purity.noise_type == "all")]
        assert len(final) == 1 and final.n_selected.iloc[0] > 0
    if cls.scores_noise:
        assert len(purity) > 0 and purity.auroc.notna().any()
    if not (cls.partitions or cls.scores_noise):
        assert purity.empty
