"""The tuned cells of a sweep (a study's sweep grid with ``tuned_seeds``, docs/selection.md):
once the sweep's cells are done, each method's trial picked on the sweep's one seed's held-out
split at each noise rate (:func:`cirbench.report.analysis.rankings.tuned.picked_trials`, the report's
own pick, never the validation queries) re-run on the other seeds of ``tuned_seeds``.

A tuned cell is an ordinary grid cell: the picked trial's label (``<method>:trial<k>``, the
method's own name for trial 0, the defaults) with the sweep's ``--set`` values of that trial,
one grid per noise rate (picks differ between rates), on the sweep grid's options. So its run
id is the one a sweep cell of the same trial and seed has, a pick of the defaults is the
headline grid's cell (run already, skipped), and a rerun resumes like any grid. A (method,
rate) whose sweep cells are not all complete is not picked: it waits for the next run of
the study (a plan costs it as trial 1, :func:`tuned_plan` with ``provisional``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pandas as pd

from cirbench.engine.running.grid import Grid
from cirbench.engine.planning.spec import Cell, base_method
from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.loading.numbers import rate_label
from cirbench.report.analysis.rankings.tuned import picked_trials
from cirbench.results.labels import trial_label


@dataclass
class TunedPlan:
    """The tuned cells of a sweep: the ``picks`` (``{(method, rate): trial}``), the (method,
    rate) still ``waiting`` for their sweep cells, the ``grids`` to run (one per rate with a
    pick) and a line per rate saying what each runs."""

    picks: dict[tuple[str, float], int] = field(default_factory=dict)
    waiting: list[tuple[str, float]] = field(default_factory=list)
    grids: list[Grid] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _sweep_cells(sweep: Grid) -> dict[tuple[str, float], list[Cell]]:
    """The sweep's cells by (method, noise rate)."""
    found: dict[tuple[str, float], list[Cell]] = {}
    for cell in sweep.cells:
        if cell.kept is None:
            found.setdefault((base_method(cell.key.method), float(cell.key.noise_rate)), []).append(cell)
    return found


def sweep_picks(sweep: Grid) -> dict[tuple[str, float], int]:
    """Each (method, rate) of ``sweep`` whose cells are all complete, and the trial its held-out
    split picks (the report's :func:`~cirbench.report.analysis.rankings.tuned.picked_trials`, read on
    exactly these cells: an older run of the same label elsewhere in the folder is not read)."""
    store = sweep.store
    done = [cells for cells in _sweep_cells(sweep).values() if all(store.is_complete(c.key.run_id) for c in cells)]
    ids = [c.key.run_id for cells in done for c in cells]
    if not ids:
        return {}
    runs = store.read("runs", ids)
    first = runs.iloc[0]
    empty = pd.DataFrame()
    setting = Setting(str(first.dataset), str(first.backbone), str(first.noise_protocol), runs=runs,
                      metrics=store.read("metrics", ids), purity=empty, scores=empty, losses=empty)
    return {(str(p.method), float(p.noise_rate)): int(p.trial) for p in picked_trials(setting).itertuples(index=False)}


def tuned_plan(sweep: Grid, seeds: list[int], provisional: bool = False) -> TunedPlan:
    """The tuned cells of ``sweep`` on ``seeds`` (those of them it did not run itself): one
    grid per noise rate of the picks made so far (:func:`sweep_picks`). With ``provisional``
    (a plan before the sweep is done), a (method, rate) still waiting is costed as its trial 1
    (a pick of the defaults would add nothing: its cells are the headline grid's)."""
    spec = sweep.spec
    extra = [int(s) for s in seeds if s not in spec.seeds]
    cells = _sweep_cells(sweep)
    plan = TunedPlan(picks=sweep_picks(sweep))
    plan.waiting = [key for key in cells if key not in plan.picks]
    trials = max(len(group) for group in cells.values()) // max(len(spec.seeds), 1) if cells else 1
    chosen = dict(plan.picks)
    if provisional:
        chosen.update({key: min(1, trials - 1) for key in plan.waiting})
    methods = list(dict.fromkeys(base_method(label) for label in spec.methods))
    for rate in spec.noise_rates:
        picked = [(m, chosen[(m, float(rate))]) for m in methods if (m, float(rate)) in chosen]
        if not picked or not extra:
            continue
        labels = [trial_label(m, t) for m, t in picked]
        overrides = {label: spec.overrides[label] for label in labels if label in spec.overrides}
        plan.grids.append(Grid(replace(spec, methods=labels, noise_rates=[float(rate)], seeds=extra, overrides=overrides),
                               sweep.discovery))
        words = [f"{m} " + ("the defaults (the headline grid's cells)" if t == 0 else f"trial {t}")
                 + (" (not picked yet: costed as trial 1)" if (m, float(rate)) in plan.waiting else "") for m, t in picked]
        on = f"seed{'s' * (len(extra) > 1)} {','.join(map(str, extra))}"
        plan.notes.append(f"tuned cells at {rate_label(float(rate))} on {on}: {', '.join(words)}")
    if plan.waiting and not provisional:
        plan.notes.append("not picked yet (the sweep's cells are not all complete): "
                          + ", ".join(f"{m} at {rate_label(r)}" for m, r in plan.waiting)
                          + "; their tuned cells are planned by the study's next run")
    return plan
