"""One runner for every way a grid runs: grid -> :class:`~cirbench.engine.cell.life.CellOutcome` s.

:func:`run_grid` runs the grid's reference rows first (they build the caches every cell
reads), then its cells: here, one after another (also under ``torchrun``, where every rank
runs each cell together), or ``jobs`` at a time in worker processes
(:mod:`cirbench.engine.running.worker`) for the cells :meth:`~cirbench.engine.running.grid.Grid.pending`
names (every cell on one thread, wherever it runs: :func:`cirbench.settings.kernels.cell_threads`).
:func:`cirbench.engine.running.launch.submit` runs them as scheduler jobs instead. Every
path returns the same outcomes and reports what happens through one callback taking an
:class:`Event`, which the CLI turns into its progress display.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cirbench.data.datasets.registry import DATASETS
from cirbench.engine.cell.distributed import world_size
from cirbench.engine.cell.life import CellOutcome, run_cell, run_reference
from cirbench.engine.running.grid import Grid
from cirbench.engine.running.grid_checks import check_grid
from cirbench.engine.planning.kept_plan import waves
from cirbench.engine.cell.resources import refuse_another_start
from cirbench.engine.running.reuse import refuse_another_evaluation
from cirbench.engine.planning.spec import Cell, backbone_label
from cirbench.engine.running.worker import default_jobs, run_in_processes
from cirbench.settings.kernels import cell_threads
from cirbench.results.locks import live_holder


@dataclass
class Event:
    """One thing the runner reports. ``kind`` is one of

    - ``announce``: a message (``message``), e.g. a feature cache being written;
    - ``damaged``: a finished ``cell`` is redone because its record is damaged (``info``:
      its ``problems`` and the ``quarantine`` folder its files move to);
    - ``references``: the reference rows start (``info["cells"]``: their cells);
    - ``reference``: a reference row ended (``outcome``);
    - ``queued``: ``cell`` waits for a worker process (``info["jobs"]``: processes at once);
    - ``start``: ``cell`` starts here;
    - ``step``: a training step or an epoch's validation of ``cell`` (``info``: the
      training loop's progress dict: ``epoch``, ``step``, ``total_steps`` and ``loss`` or ``recall``);
    - ``done``: ``cell`` ended (``outcome``).
    """

    kind: str
    cell: Cell | None = None
    outcome: CellOutcome | None = None
    info: dict[str, Any] = field(default_factory=dict)
    message: str = ""


Report = Callable[[Event], None]


def _quiet(event: Event) -> None:
    """A report that shows nothing."""


def resolve_jobs(jobs: int, device: str) -> int:
    """Cells at once: ``jobs``, or with 0 :func:`~cirbench.engine.running.worker.default_jobs`;
    one under ``torchrun`` (all ranks train each cell together)."""
    if jobs < 0:
        raise ValueError("--jobs must be 0 (automatic) or more")
    return 1 if world_size() > 1 else (jobs or default_jobs(device))


def report_damaged(grid: Grid, cells: list[Cell], report: Report) -> None:
    """A ``damaged`` event for each finished cell among ``cells`` that is redone because its
    record is damaged (its files are moved aside when it is redone), naming each problem."""
    if grid.spec.overwrite:
        return
    for cell in cells:
        record = grid.store.check(cell.key.run_id)
        if record.problems and live_holder(grid.store.root, cell.key.run_id) is None:
            report(Event("damaged", cell, info={"problems": [str(p) for p in record.problems],
                                                "quarantine": grid.store.root / "quarantine"}))


@dataclass
class Preflight:
    """What loading a dataset read from the user's files found before any cell ran."""

    n_warnings: int
    dropped: list[dict[str, str]]
    dropped_path: Path | None


def preflight(grid: Grid, announce: Callable[[str], None] = print) -> Preflight | None:
    """Before any cell runs: refuse a results folder holding runs from another start of the
    backbone (:class:`~cirbench.engine.cell.resources.StartMismatchError`), then load the dataset and
    apply the static checks of :mod:`cirbench.engine.running.grid_checks` (the dataset's rules, the
    methods' needs of the backbone, every manifest of the grid), then refuse finished cells
    of the grid measured under another evaluation (:mod:`cirbench.engine.running.reuse`), so that a
    failure stops the run here (PluginCheckError, DatasetProblemsError, ValueError or
    OSError). What a dataset read from the user's files dropped or warned of; None for a
    generated one."""
    spec = grid.spec
    refuse_another_start(grid.store, backbone_label(spec), spec.backbone, spec.seeds[0], spec.cache_dir, spec.weights)
    check_grid(grid, announce)
    refuse_another_evaluation(grid)
    if not DATASETS.get(grid.spec.dataset).files:
        return None
    dataset = grid.resources.dataset()
    return Preflight(int(dataset.info.get("n_warnings") or 0), list(dataset.info.get("dropped") or []),
                     grid.resources.dropped_path)


def run_references(grid: Grid, references: list[Cell], report: Report = _quiet) -> list[CellOutcome]:
    """Evaluate the reference rows ``references`` of the grid (those not recorded yet), one
    ``reference`` event each."""
    report(Event("references", info={"cells": references}))
    outcomes = []
    for cell in references:
        outcome = run_reference(grid.resources, cell, announce=lambda m: report(Event("announce", message=m)))
        report(Event("reference", cell, outcome))
        outcomes.append(outcome)
    return outcomes


def run_here(grid: Grid, cells: list[Cell], report: Report = _quiet) -> list[CellOutcome]:
    """Run ``cells`` in this process, one after another (under ``torchrun``: on every rank)."""
    outcomes = []
    for cell in cells:
        report(Event("start", cell))
        outcome = run_cell(grid.resources, cell, lambda info, cell=cell: report(Event("step", cell, info=info)),
                                announce=lambda m: report(Event("announce", message=m)))
        report(Event("done", cell, outcome))
        outcomes.append(outcome)
    return outcomes


def run_pool(grid: Grid, cells: list[Cell], pending: list[Cell], jobs: int, report: Report = _quiet) -> list[CellOutcome]:
    """Run the ``pending`` ones among ``cells`` in ``jobs`` worker processes (the caches exist
    already: the reference rows built them), the replays after the others (their sources:
    :func:`~cirbench.engine.planning.kept_plan.waves`); the others are ``skipped``."""
    todo = {c.key.run_id for c in pending}
    outcomes, by_id = [], {c.key.run_id: c for c in cells}
    for cell in cells:
        if cell.key.run_id in todo:
            report(Event("queued", cell, info={"jobs": jobs}))
        else:
            outcomes.append(CellOutcome(cell, "skipped"))
            report(Event("done", cell, outcomes[-1]))
    for wave in waves([c for c in cells if c.key.run_id in todo]):
        for record in run_in_processes(grid.spec, [c.key.run_id for c in wave], jobs):
            outcomes.append(CellOutcome.from_record(by_id[record["run_id"]], record))
            report(Event("done", outcomes[-1].cell, outcomes[-1]))
    return outcomes


def run_grid(grid: Grid, jobs: int = 1, report: Report = _quiet) -> list[CellOutcome]:
    """The grid's reference rows, then its cells: ``jobs`` at a time in worker processes when
    more than one is pending and ``jobs`` > 1, else here (see the module docstring)."""
    references = grid.reference_cells()
    report_damaged(grid, [*references, *grid.cells], report)
    outcomes = run_references(grid, references, report)
    pending = grid.pending() if jobs > 1 and grid.cells else []
    if min(jobs, len(pending)) > 1:
        with cell_threads():  # the tokens the cells read, computed as a cell computes them
            grid.resources.prepare_caches(announce=lambda m: report(Event("announce", message=m)))
        return outcomes + run_pool(grid, grid.cells, pending, jobs, report)
    return outcomes + run_here(grid, grid.cells, report)
