"""The kept-set cells a grid asks for (``--frontier``, ``--noise-types``, ``--replay``), planned
before any work: which cells, their run ids, the refusals; the rows a frontier or noise-type
cell keeps; the order in which the replays run after their sources."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from cirbench.engine.running import launch
from cirbench.engine.running.grid import Grid, GridError, GridSpec
from cirbench.engine.planning.kept_plan import waiting_replays, waves
from cirbench.engine.cell.kept_sets import KeptSetError, frontier_rows, noise_type_rows, replay_rows
from cirbench.results.store import ResultsStore


def _grid(tmp_path: Path, **fields) -> Grid:
    options = dict(methods=["sprc", "oracle"], noise_rates=[0.0, 0.5, 0.8], seeds=[0, 1], dataset="shapes-mini",
                   output=tmp_path / "results", cache_dir=tmp_path / "datasets")
    return Grid(GridSpec(**{**options, **fields}))


def _kept(grid: Grid) -> list[tuple[str, float, int]]:
    return [(c.key.method, c.key.noise_rate, c.key.seed) for c in grid.cells if c.kept is not None]


def test_the_frontier_is_made_only_above_each_rates_clean_share(tmp_path: Path) -> None:
    grid = _grid(tmp_path, frontier=[0.8, 0.6, 0.4])
    made = sorted({(label, rate) for label, rate, _ in _kept(grid)})
    assert made == [("frontier:p0.4", 0.8), ("frontier:p0.6", 0.5), ("frontier:p0.6", 0.8),
                    ("frontier:p0.8", 0.5), ("frontier:p0.8", 0.8)]
    assert len(_kept(grid)) == 5 * 2  # every seed
    assert any("frontier:p0.4 at 50% noise: not above the clean share 0.5" in line for line in grid.skipped)
    assert any("at 0% noise" in line for line in grid.skipped)
    frontier = next(c for c in grid.cells if c.key.method == "frontier:p0.6")
    assert frontier.method_cls.name == "oracle" and frontier.kept.kind == "frontier" and frontier.kept.purity == 0.6


def test_a_purity_asked_for_twice_is_planned_once(tmp_path: Path) -> None:
    """Issue 66: ``--frontier-purity 0.8,0.8`` plans each cell once (it planned it twice: one row
    stored, a "locked" and a "completed" line shown), and says so."""
    twice, once = _grid(tmp_path, frontier=[0.8, 0.8, 0.6]), _grid(tmp_path, frontier=[0.8, 0.6])
    assert [c.key.run_id for c in twice.cells] == [c.key.run_id for c in once.cells]
    assert len({c.key.run_id for c in twice.cells}) == len(twice.cells)
    assert "frontier:p0.8 asked for 2 times: planned once" in twice.skipped


@pytest.mark.parametrize("purity, message", [
    (1.0, "p = 1 is the perfect filter's own cell"), (1.2, r"--frontier-purity 1.2 is outside \(0, 1\)"),
    (0.0, r"--frontier-purity 0 is outside \(0, 1\)"),
])
def test_a_frontier_purity_out_of_range_is_refused(tmp_path: Path, purity: float, message: str) -> None:
    with pytest.raises(GridError, match=message):
        _grid(tmp_path, frontier=[purity])


def test_one_cell_per_noise_type_of_the_protocol(tmp_path: Path) -> None:
    grid = _grid(tmp_path, noise_types=True, seeds=[0])
    assert _kept(grid) == [(f"noise_type:{t}", r, 0) for t in ("reference", "caption", "target") for r in (0.5, 0.8)]
    single = _grid(tmp_path, noise_types=True, noise_protocol="caption", seeds=[0])
    assert _kept(single) == [] and any("noise_type:caption: the only noise type" in line for line in single.skipped)


def test_kept_set_run_ids_are_stable_distinct_and_keyed_to_what_they_keep(tmp_path: Path) -> None:
    ids = {c.key.run_id for c in _grid(tmp_path, frontier=[0.8], noise_types=True, replay=["oracle"]).cells}
    again = {c.key.run_id for c in _grid(tmp_path, frontier=[0.8], noise_types=True, replay=["oracle"]).cells}
    assert ids == again and len(ids) == (3 + 2) * 2 + 2 * 2 * (1 + 3 + 1)  # sprc at 3 rates, oracle at 2; kept-set cells
    plain = {c.key.run_id for c in _grid(tmp_path).cells}
    assert plain < ids  # asking for kept-set cells moves no other id
    replays = lambda grid: {(c.key.noise_rate, c.key.seed): c.key.run_id for c in grid.cells if c.key.method == "replay:oracle"}  # noqa: E731
    tuned = _grid(tmp_path, replay=["oracle"], overrides={"oracle": {"rtc_weight": "0.3"}})
    assert set(replays(tuned).values()).isdisjoint(replays(_grid(tmp_path, replay=["oracle"])).values())


@pytest.mark.parametrize("replay, message", [
    ("hug", "method 'hug' keeps no set"), ("sprc", "method 'sprc' keeps no set"), ("intent", "'intent' keeps no set"),
    ("conesep:no_ot", "an ablation variant; replays are made of a method's own runs only"),
    ("tme:trial1", "a sweep trial"), ("tmee", "unknown method 'tmee'"),
])
def test_a_replay_of_what_keeps_no_set_is_refused(tmp_path: Path, replay: str, message: str) -> None:
    with pytest.raises(GridError, match=message):
        _grid(tmp_path, methods=["sprc", "tme", "hug", "conesep"], replay=[replay])


def test_a_replay_whose_source_is_neither_in_the_grid_nor_complete_is_refused_naming_it(tmp_path: Path) -> None:
    source = next(c.key.run_id for c in _grid(tmp_path, methods=["tme"]).cells if c.key.noise_rate == 0.5)
    with pytest.raises(GridError, match=f"--replay tme: 4 source run\\(s\\) are neither cells of this grid nor complete .*{source}"):
        _grid(tmp_path, replay=["tme"])


def test_the_replays_run_after_their_sources(tmp_path: Path) -> None:
    grid = _grid(tmp_path, methods=["tme", "sprc"], frontier=[0.8], replay=["tme"], seeds=[0])
    first, second = waves(grid.cells)
    assert {c.key.method for c in second} == {"replay:tme"} and "replay:tme" not in {c.key.method for c in first}
    assert [c.key.method for c in grid.cells][-2:] == ["replay:tme", "replay:tme"]  # run here, one after another
    sources = {c.kept.source.run_id for c in second}
    assert sources == {c.key.run_id for c in first if c.key.method == "tme" and c.key.noise_rate > 0}
    assert waiting_replays(grid.cells, sources) == second and waiting_replays(grid.cells, set()) == []


def test_a_launcher_holds_back_the_replays_whose_sources_are_pending(tmp_path: Path, monkeypatch) -> None:
    submitted: list[list[str]] = []

    class Executor:
        def __init__(self, folder, cluster) -> None:
            pass

        def update_parameters(self, **parameters) -> None:
            pass

        def map_array(self, job, specs, run_ids):
            submitted.append(list(run_ids))
            return [SimpleNamespace(job_id=str(i)) for i in range(len(run_ids))]

    monkeypatch.setattr(launch, "_require_submitit", lambda: SimpleNamespace(AutoExecutor=Executor))
    grid = _grid(tmp_path, methods=["tme"], noise_rates=[0.8], seeds=[0], replay=["tme"])
    submission = launch.submit_grid(grid, "local")
    assert [c.key.method for c in submission.waiting] == ["replay:tme"]
    assert submitted == [[c.key.run_id for c in grid.cells if c.key.method == "tme"]]


def test_the_frontier_keeps_every_clean_triplet_and_a_seeded_nested_share_of_the_noisy() -> None:
    is_noisy = np.random.default_rng(3).random(1000) < 0.8
    clean = ~is_noisy
    sets = {p: frontier_rows(is_noisy, p, seed=0) for p in (0.8, 0.6, 0.4)}
    for p, keep in sets.items():
        assert keep[clean].all() and abs(clean.sum() / keep.sum() - p) < 1 / keep.sum()
    assert (sets[0.8] <= sets[0.6]).all() and (sets[0.6] <= sets[0.4]).all()  # one seed: nested kept sets
    assert (frontier_rows(is_noisy, 0.6, seed=0) == sets[0.6]).all()  # same seed, same kept set
    assert not (frontier_rows(is_noisy, 0.6, seed=1) == sets[0.6]).all()
    with pytest.raises(KeptSetError, match="a kept set of purity 0.1 needs .* the split has"):
        frontier_rows(is_noisy, 0.1, seed=0)


def test_a_noise_type_cell_keeps_every_clean_triplet_and_that_type_only() -> None:
    kinds = np.array(["clean", "caption", "reference", "clean", "target", "caption"], dtype=object)
    assert noise_type_rows(kinds != "clean", kinds, "caption").tolist() == [True, True, False, True, False, True]


def test_a_replay_of_a_run_not_complete_fails_naming_it(tmp_path: Path) -> None:
    grid = _grid(tmp_path, methods=["tme"], noise_rates=[0.8], seeds=[0], replay=["tme"])
    replay = next(c for c in grid.cells if c.kept is not None)
    with pytest.raises(KeptSetError, match=f"source run {replay.kept.source.run_id} \\(tme at 0.8 noise, seed 0\\) is not "
                                           "complete .*never run.*run it first"):
        replay_rows(replay.kept.source, ["a", "b"], ResultsStore(tmp_path / "results"))
