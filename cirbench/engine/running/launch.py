"""A grid larger than one machine: one scheduler job per cell, through ``submitit``.

Each (method, noise rate, seed) cell of a grid becomes an independent job (a Slurm array
task, or a local process with the ``local`` launcher) that builds the grid from the same
:class:`~cirbench.engine.planning.spec.GridSpec` and runs only its own cell with
:func:`~cirbench.engine.running.worker.run_cell_by_id`, which writes the cell's parts to the results
store atomically. The store is the only coordination: jobs share nothing else, a
submission leaves out every cell the store already holds as completed, and so the same
command, run again after failures, timeouts or preemption, submits only what is missing.
A running job holds its cell's lock (:mod:`cirbench.results.locks`), so a copy of it
submitted meanwhile skips the cell (``locked``), and a copy that starts after it finished
finds the cell complete (``skipped``): each cell is trained once.

A job with ``gpus_per_cell`` > 1 runs one task per GPU, and the tasks train their cell
together with distributed data parallel (:mod:`cirbench.engine.cell.distributed`).
Paths in the spec are made absolute before submission; jobs must see the same file
system (results, data, caches, weights, plugin files).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cirbench.settings.config import ConfigError, parse_key_values
from cirbench.engine.cell.distributed import init_distributed, is_main_process
from cirbench.engine.cell.life import CellOutcome
from cirbench.engine.running.grid import Grid
from cirbench.engine.planning.kept_plan import waiting_replays
from cirbench.engine.planning.spec import Cell, GridSpec, absolute_spec
from cirbench.engine.running.worker import run_cell_by_id

LAUNCHERS = ("local", "slurm")


def _require_submitit() -> Any:
    try:
        import submitit
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("--launcher needs submitit: pip install 'cirbench[scale]'") from exc
    return submitit


@dataclass
class Submission:
    """What one submission did: the jobs it submitted (with their cells), the cells it left
    out because the store holds them as completed, the jobs' log folder, and the replays it
    held back because their sources are not complete yet (jobs run at once: the same command
    submits them once their sources are)."""

    jobs: list[tuple[Cell, Any]]
    skipped: list[Cell]
    folder: Path
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    waiting: list[Cell] = field(default_factory=list)

    def wait(self) -> list[dict[str, Any]]:
        """Block until every job ends; one :meth:`~cirbench.engine.cell.life.CellOutcome.record`
        per job (``status`` is ``failed`` with the error when a job died before writing its cell)."""
        self.outcomes = []
        for cell, job in self.jobs:
            try:
                self.outcomes.append(job.result())
            except Exception as exc:  # noqa: BLE001 - a crashed job is reported, not raised
                self.outcomes.append(CellOutcome(cell, "failed", error=f"{type(exc).__name__}: {exc}").record())
        return self.outcomes


def pending_cells(grid: Grid) -> tuple[list[Cell], list[Cell]]:
    """The grid's cells split into (to run: :meth:`~cirbench.engine.running.grid.Grid.pending`,
    already complete)."""
    todo = grid.pending()
    pending = {c.key.run_id for c in todo}
    return todo, [c for c in grid.cells if c.key.run_id not in pending]


def run_cell_job(spec: GridSpec, run_id: str) -> dict[str, Any]:
    """The body of one job (of each of its tasks): join the job's process group when it has
    several tasks, then run the cell ``run_id`` of ``spec``'s grid."""
    submitit = _require_submitit()
    environment = submitit.JobEnvironment()
    if environment.num_tasks > 1:
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        _, device = init_distributed(spec.device)
        spec = dataclasses.replace(spec, device=device)
    return run_cell_by_id(spec, run_id, announce=print if is_main_process() else lambda m: None)


def submit_grid(
    grid: Grid,
    launcher: str,
    folder: Path | None = None,
    gpus_per_cell: int = 0,
    timeout_min: int = 24 * 60,
    options: dict[str, Any] | None = None,
    job: Callable[[GridSpec, str], dict[str, Any]] = run_cell_job,
) -> Submission:
    """Submit one job per incomplete cell of ``grid`` (validated already, so a bad grid
    submits nothing; rebuilt, with its plugins, only when its spec's paths are relative).
    ``launcher`` is ``slurm`` or ``local``; ``folder`` holds the
    jobs' logs (default ``<output>/jobs``); ``options`` are extra submitit parameters,
    e.g. ``{"slurm_partition": "gpu", "mem_gb": 64}``."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher {launcher!r} is not one of {', '.join(LAUNCHERS)}")
    if gpus_per_cell < 0:
        raise ValueError(f"gpus per cell must be >= 0, not {gpus_per_cell}")
    submitit = _require_submitit()
    spec = absolute_spec(grid.spec)
    if spec != grid.spec:  # the jobs' run ids are those of the absolute paths
        grid = Grid(spec, grid.discovery)
    todo, done = pending_cells(grid)
    waiting = waiting_replays(todo, {c.key.run_id for c in todo})  # a job runs at once: not before its source ends
    held = {c.key.run_id for c in waiting}
    todo = [c for c in todo if c.key.run_id not in held]
    folder = Path(folder or spec.output / "jobs").resolve()
    if not todo:
        return Submission([], done, folder, waiting=waiting)
    executor = submitit.AutoExecutor(folder=folder, cluster=launcher)
    parameters: dict[str, Any] = {"name": "cirbench", "timeout_min": timeout_min, "tasks_per_node": max(1, gpus_per_cell)}
    if gpus_per_cell:
        parameters["gpus_per_node"] = gpus_per_cell
    parameters.update(options or {})
    try:
        executor.update_parameters(**parameters)
    except (ValueError, TypeError, NameError) as exc:  # submitit names an unknown option with NameError
        raise ValueError(f"scheduler options {sorted(options or {})}: {exc}") from None
    jobs = executor.map_array(job, [spec] * len(todo), [cell.key.run_id for cell in todo])
    return Submission(list(zip(todo, jobs)), done, folder, waiting=waiting)


def parse_scheduler_options(entries: list[str]) -> dict[str, Any]:
    """``["slurm_partition=gpu", "mem_gb=64"]`` -> ``{"slurm_partition": "gpu", "mem_gb": 64}``
    (values that read as JSON numbers or booleans become them)."""
    try:
        texts = parse_key_values(entries, "slurm_partition=gpu")
    except ConfigError as exc:
        raise ValueError(f"--scheduler-option {exc}") from None
    options: dict[str, Any] = {}
    for key, value in texts.items():
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def submit(grid: Grid, launcher: str, gpus_per_cell: int, scheduler_options: list[str]) -> Submission:
    """One scheduler job per pending cell of ``grid`` (``launcher`` ``local`` or ``slurm``;
    ``scheduler_options`` as ``key=value`` entries); nothing runs here."""
    return submit_grid(grid, launcher, gpus_per_cell=gpus_per_cell, options=parse_scheduler_options(scheduler_options))


def wait(submission: Submission) -> list[CellOutcome]:
    """Block until every job of ``submission`` ends: one outcome per job."""
    cells = {cell.key.run_id: cell for cell, _ in submission.jobs}
    return [CellOutcome.from_record(cells[record["run_id"]], record) for record in submission.wait()]


def launch_failed(outcomes: list[CellOutcome]) -> bool:
    """Whether a job's cell failed (a cell skipped or held elsewhere is not a failure)."""
    return any(o.status not in ("completed", "skipped", "locked") for o in outcomes)
