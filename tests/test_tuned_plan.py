"""A sweep's tuned cells planned from its results (a study's ``tuned_seeds``, issue 76): each
method's pick on the sweep seed's held-out split, re-run on the other seeds as its trial's
label with the sweep's values (so the run ids a sweep cell of that trial and seed has; a pick
of the defaults is the headline grid's cell), one grid per noise rate; a (method, rate) whose
sweep is not done waits; the study runs the sweep, then its tuned cells. Nothing is trained:
the sweep's cells are written by hand."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from cirbench.api.grids import grid, sweep
from cirbench.api.study import StudyRunner
from cirbench.api.tuned import sweep_picks, tuned_plan
from cirbench.engine.running.grid import Grid
from cirbench.results.store import ResultsStore
from cirbench.settings.study import StudyError, load_study
from test_tuned import write_key

# held-out R@10 of each trial at each rate (validation: trial 1 always best, 0.9)
HELD = {("sprc", 0.5): [0.5, 0.3, 0.7], ("sprc", 0.8): [0.6, 0.3, 0.4], ("tme", 0.5): [0.5, 0.3, 0.45],
        ("tme", 0.8): [0.5, 0.3, 0.8]}
OPTIONS = dict(dataset="shapes-mini", epochs=2, batch_size=64)


def _sweep(output: Path, seeds: list[int] = [0]) -> Grid:
    return sweep(["sprc", "tme"], [0.5, 0.8], 3, seeds=seeds, output=output, **OPTIONS)


def _write_sweep(built: Grid, skip: set[str] = frozenset()) -> None:
    """Each sweep cell complete (but those of ``skip``'s labels), trial 1 best on validation."""
    store = ResultsStore(built.spec.output)
    for cell in built.cells:
        if cell.key.method in skip:
            continue
        base, _, trial = cell.key.method.partition(":trial")
        trial = int(trial or 0)
        write_key(store, cell.key, 0.9 if trial == 1 else 0.5, HELD[(base, cell.key.noise_rate)][trial],
                  json.loads(json.dumps(built.spec.overrides.get(cell.key.method, {}))))


def test_the_tuned_cells_are_the_picked_trials_with_the_sweeps_run_ids(tmp_path: Path) -> None:
    built = _sweep(tmp_path / "results")
    _write_sweep(built)
    assert sweep_picks(built) == {("sprc", 0.5): 2, ("sprc", 0.8): 0, ("tme", 0.5): 0, ("tme", 0.8): 2}
    plan = tuned_plan(built, [0, 1, 2])
    assert not plan.waiting and [g.spec.noise_rates for g in plan.grids] == [[0.5], [0.8]]
    at_50, at_80 = plan.grids
    assert at_50.spec.methods == ["sprc:trial2", "tme"] and at_80.spec.methods == ["sprc", "tme:trial2"]
    assert all(g.spec.seeds == [1, 2] for g in plan.grids)  # seed 0 is the sweep's own cell
    assert at_50.spec.overrides == {"sprc:trial2": built.spec.overrides["sprc:trial2"]}
    assert "tuned cells at 50% on seeds 1,2: sprc trial 2, tme the defaults" in plan.notes[0]
    # a tuned cell's run id is the sweep's cell of the same trial at the same seed ...
    swept = {(c.key.method, c.key.noise_rate, c.key.seed): c.key.run_id for c in built.cells}
    again = Grid(replace(at_50.spec, seeds=[0]), at_50.discovery)
    assert {c.key.run_id for c in again.cells} == {swept[("sprc:trial2", 0.5, 0)], swept[("tme", 0.5, 0)]}
    # ... and a pick of the defaults is the headline grid's cell (the same options: its held-out share)
    headline = grid(["sprc", "tme"], [0.5, 0.8], seeds=[1, 2], output=tmp_path / "results", **OPTIONS)
    ids = {(c.key.method, c.key.noise_rate, c.key.seed): c.key.run_id for c in headline.cells}
    assert {c.key.run_id for c in at_80.cells if c.key.method == "sprc"} == {ids[("sprc", 0.8, 1)], ids[("sprc", 0.8, 2)]}


def test_a_method_whose_sweep_is_not_done_waits_and_a_plan_costs_it_as_trial_1(tmp_path: Path) -> None:
    built = _sweep(tmp_path / "results")
    _write_sweep(built, skip={"tme:trial1"})
    plan = tuned_plan(built, [0, 1, 2])
    assert sorted(plan.waiting) == [("tme", 0.5), ("tme", 0.8)]
    assert [g.spec.methods for g in plan.grids] == [["sprc:trial2"], ["sprc"]]
    assert "not picked yet" in plan.notes[-1] and "tme at 50%" in plan.notes[-1]
    costed = tuned_plan(built, [0, 1, 2], provisional=True)
    assert [g.spec.methods for g in costed.grids] == [["sprc:trial2", "tme:trial1"], ["sprc", "tme:trial1"]]
    assert "tme trial 1 (not picked yet: costed as trial 1)" in costed.notes[0]
    assert tuned_plan(built, [0]).grids == []  # no seed beyond the sweep's: nothing to add


STUDY = """
[study]
output = "{output}"
report = ""

[defaults]
dataset = "shapes-mini"
epochs = 2
batch_size = 64
seeds = [0, 1, 2]

[[grid]]
kind = "sweep"
methods = ["sprc", "tme"]
noise = [0.5, 0.8]
trials = 3
seeds = [0]
tuned_seeds = [0, 1, 2]
"""


class _Recorded(StudyRunner):
    """A study that trains nothing: each grid's cells are written by hand, the grids recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[tuple[str, Grid]] = []

    def check(self, built: Grid) -> None:
        pass

    def run(self, entry, built: Grid, jobs: int) -> list:
        self.ran.append((entry.where, built))
        _write_sweep(built)
        return []


def test_the_study_runs_the_sweep_then_its_picks_on_the_tuned_seeds(tmp_path: Path) -> None:
    path = tmp_path / "study.toml"
    path.write_text(STUDY.format(output=(tmp_path / "results").as_posix()))
    study = load_study(path)
    assert study.grids[0].options["tuned_seeds"] == [0, 1, 2] and study.grids[0].options["seeds"] == [0]
    runner = _Recorded()
    runner(path)
    where = [w for w, _ in runner.ran]
    assert where == ["grid 1 (sweep)", "grid 1 (sweep), its tuned cells at 50%", "grid 1 (sweep), its tuned cells at 80%"]
    tuned = {(c.key.method, c.key.noise_rate, c.key.seed) for _, g in runner.ran[1:] for c in g.cells}
    assert tuned == {(m, r, s) for m, r in (("sprc:trial2", 0.5), ("tme", 0.5), ("sprc", 0.8), ("tme:trial2", 0.8))
                     for s in (1, 2)}
    runner(path)  # resumable: the same picks, every cell written already
    assert [w for w, _ in runner.ran[3:]] == where and all(not g.pending() for _, g in runner.ran[3:])


@pytest.mark.parametrize("seeds, wrong", [("[0, 1]\ntuned_seeds = [0, 1, 2]", "give the sweep one seed"),
                                         ("[0]\ntuned_seeds = [1, 1]", "each once")])
def test_tuned_seeds_need_a_sweep_on_one_seed(tmp_path: Path, seeds: str, wrong: str) -> None:
    path = tmp_path / "study.toml"
    path.write_text(STUDY.replace("seeds = [0]\ntuned_seeds = [0, 1, 2]", f"seeds = {seeds}").format(output="results"))
    with pytest.raises(StudyError, match=wrong):
        load_study(path)


def test_the_plan_lists_the_tuned_cells_before_the_sweep_has_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``cirbench study --plan``: after the sweep's own plan, one per rate of the cells its
    picks add (each method costed as trial 1 while its sweep is not done)."""
    from cirbench.api import plan as planning

    monkeypatch.setattr(planning, "plan_grid", lambda where, built, backbones, announce: planning.GridPlan(
        where, "", len(built.cells), len(built.pending())))
    path = tmp_path / "study.toml"
    path.write_text(STUDY.format(output=(tmp_path / "results").as_posix()))
    plans = planning.plan_study(path)
    assert [p.where for p in plans] == ["grid 1 (sweep)", "grid 1 (sweep), its tuned cells at 50%",
                                        "grid 1 (sweep), its tuned cells at 80%"]
    assert [p.cells for p in plans] == [12, 4, 4] and "sprc trial 1 (not picked yet: costed as trial 1)" in plans[1].notes[0]
