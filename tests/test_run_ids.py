"""A cell's run id holds everything that changes its numbers: the resolved hyperparameters
(an ``lr`` of None is the backbone's ``default_lr``) and the start, known without loading
weights; and the ids of one unchanged setting stay what they were."""

from __future__ import annotations

from pathlib import Path

import pytest

from cirbench.backbones import tiny_release
from cirbench.backbones.tiny import TinyBackbone
from cirbench.engine.running.grid import Grid, GridError, GridSpec


def _ids(tmp_path: Path, **kw) -> dict[tuple[str, float | str, int], str]:
    """Every cell's and reference row's id by (method, noise rate or "nan", seed)."""
    spec = GridSpec(**{"methods": ["sprc"], "noise_rates": [0.0, 0.8], "seeds": [0], "output": tmp_path / "results",
                       "cache_dir": tmp_path / "datasets", **kw})
    grid = Grid(spec)
    return {(c.key.method, "nan" if c.key.noise_rate != c.key.noise_rate else c.key.noise_rate, c.key.seed): c.key.run_id
            for c in grid.cells + grid.reference_cells()}


def test_the_default_lr_changes_the_ids_relying_on_it_and_no_other(tmp_path: Path, monkeypatch) -> None:
    setting = dict(methods=["sprc", "sprc:fixed"], overrides={"sprc:fixed": {"lr": "0.0003"}})
    before = _ids(tmp_path, **setting)
    monkeypatch.setattr(TinyBackbone, "default_lr", 1e-4)
    after = _ids(tmp_path, **setting)
    changed = {cell for cell in before if before[cell] != after[cell]}
    assert changed == {("sprc", 0.0, 0), ("sprc", 0.8, 0)}  # not sprc:fixed (an explicit lr), not the untrained reference rows


def test_the_resolved_lr_is_the_explicit_one(tmp_path: Path) -> None:
    """An explicit lr equal to the default names the same numbers, so the same cell."""
    default, explicit = _ids(tmp_path), _ids(tmp_path, overrides={"sprc": {"lr": repr(TinyBackbone.default_lr)}})
    assert default[("sprc", 0.8, 0)] == explicit[("sprc", 0.8, 0)]


def test_the_start_is_part_of_the_id(tmp_path: Path, monkeypatch) -> None:
    before = _ids(tmp_path)
    monkeypatch.setattr(tiny_release, "START_KEY", "tiny-random-00000000+cir-00000000")  # another release
    assert all(before[cell] != new for cell, new in _ids(tmp_path).items())
    assert _ids(tmp_path, weights="stage1")[("sprc", 0.8, 0)] != before[("sprc", 0.8, 0)]
    assert _ids(tmp_path, precision="bf16")[("sprc", 0.8, 0)] != _ids(tmp_path)[("sprc", 0.8, 0)]


PINNED = {
    # sprc on shapes from the stage1 start (whose id names its recipe, so a re-release of the cir start leaves these
    # alone), held-out share 0.1, seed 0; re-pinned when the default became 10,000 scenes and 2 epochs (issue 43) and when tiny's default_lr became 1e-3 (issue 55; the untrained zero_shot row keeps its id). An id that changes here changes every results folder's cells: only on
    # purpose (say so in docs/benchmark.md#run-ids), never by accident.
    ("sprc", 0.0, 0): "sprc-shapes-tiny-thirds-0-s0-ccde1f97",
    ("sprc", 0.8, 0): "sprc-shapes-tiny-thirds-0.8-s0-ee71145e",
    ("zero_shot", "nan", 0): "zero_shot-shapes-tiny-thirds-s0-9a733654",
}


def test_the_ids_of_one_unchanged_setting_are_pinned(tmp_path: Path) -> None:
    ids = _ids(tmp_path, holdout=0.1, weights="stage1")
    assert {cell: ids[cell] for cell in PINNED} == PINNED



def test_the_perfect_filter_at_no_noise_is_skipped_and_no_other_id_moves(tmp_path: Path) -> None:
    """``oracle`` at 0% is ``sprc`` at 0%: not a cell of the grid; every other cell keeps the id it has alone."""
    grid = Grid(GridSpec(methods=["sprc", "oracle"], noise_rates=[0.0, 0.5], seeds=[0, 1], output=tmp_path, cache_dir=tmp_path))
    cells = {(c.key.method, c.key.noise_rate, c.key.seed): c.key.run_id for c in grid.cells}
    assert sorted({(m, r) for m, r, _ in cells}) == [("oracle", 0.5), ("sprc", 0.0), ("sprc", 0.5)]
    assert grid.skipped == ["oracle at 0% noise is sprc at 0% (a perfect filter with nothing to filter): not trained; "
                            "the report reads sprc's cell"]
    alone = {}
    for method, rate in (("sprc", 0.0), ("sprc", 0.5), ("oracle", 0.5)):
        one = Grid(GridSpec(methods=[method], noise_rates=[rate], seeds=[0, 1], output=tmp_path, cache_dir=tmp_path))
        alone.update({(c.key.method, c.key.noise_rate, c.key.seed): c.key.run_id for c in one.cells})
    assert cells == alone


def test_the_perfect_filter_at_no_noise_trains_only_with_its_own_overrides(tmp_path: Path) -> None:
    spec = dict(noise_rates=[0.0], output=tmp_path, cache_dir=tmp_path)
    with pytest.raises(GridError, match="nothing to train: oracle at 0% noise is sprc at 0%"):
        Grid(GridSpec(methods=["oracle"], **spec))
    tuned = Grid(GridSpec(methods=["sprc", "oracle"], overrides={"oracle": {"lr": "0.001"}}, **spec))
    assert [c.key.method for c in tuned.cells] == ["sprc", "oracle"] and not tuned.skipped
