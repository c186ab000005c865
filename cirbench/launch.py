"""A grid larger than one machine: one scheduler job per cell, through ``submitit``.

Each (method, noise rate, seed) cell of a grid becomes an independent job (a Slurm array
task, or a local process with the ``local`` launcher) that rebuilds the grid from the same
:class:`~cirbench.engine.grid.GridSpec` and runs only its own cell with
:meth:`~cirbench.engine.grid.Grid.run_cell`, which writes the cell's parts to the results
store atomically. The store is the only coordination: jobs share nothing else, a
submission leaves out every cell the store already holds as completed, and so the same
command, run again after failures, timeouts or preemption, submits only what is missing.
A running job holds its cell's lock (:mod:`cirbench.results.locks`), so a copy of it
submitted meanwhile skips the cell (``locked``), and a copy that starts after it finished
finds the cell complete (``skipped``): each cell is trained once.

A job with ``gpus_per_cell`` > 1 runs one task per GPU, and the tasks train their cell
together with distributed data parallel (:mod:`cirbench.engine.distributed`).
Paths in the spec are made absolute before submission; jobs must see the same file
system (results, data, caches, weights, plugin files).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cirbench.engine.grid import Cell, Grid, GridSpec

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
    out because the store holds them as completed, and the jobs' log folder."""

    jobs: list[tuple[Cell, Any]]
    skipped: list[Cell]
    folder: Path
    outcomes: list[dict[str, Any]] = field(default_factory=list)

    def wait(self) -> list[dict[str, Any]]:
        """Block until every job ends; one outcome dict per job (``status`` is ``failed``
        with the error when a job died before writing its cell)."""
        self.outcomes = []
        for cell, job in self.jobs:
            try:
                self.outcomes.append(job.result())
            except Exception as exc:  # noqa: BLE001 - a crashed job is reported, not raised
                self.outcomes.append({"run_id": cell.key.run_id, "status": "failed", "error": f"{type(exc).__name__}: {exc}"})
        return self.outcomes


def absolute_spec(spec: GridSpec) -> GridSpec:
    """``spec`` with every path absolute, so that a job started elsewhere finds the files."""
    resolve = lambda p: None if p is None else Path(p).expanduser().resolve()  # noqa: E731
    return dataclasses.replace(
        spec, output=resolve(spec.output), cache_dir=resolve(spec.cache_dir), data_root=resolve(spec.data_root),
        plugin_files=[resolve(p) for p in spec.plugin_files],
    )


def pending_cells(grid: Grid) -> tuple[list[Cell], list[Cell]]:
    """The grid's cells split into (to run, already complete); with ``overwrite`` every
    cell is to run."""
    todo, done = [], []
    for cell in grid.cells:
        (done if not grid.spec.overwrite and grid.store.is_complete(cell.key.run_id) else todo).append(cell)
    return todo, done


def run_cell_job(spec: GridSpec, run_id: str) -> dict[str, Any]:
    """The body of one job (of each of its tasks): join the job's process group when it has
    several tasks, then run the cell ``run_id`` of ``spec``'s grid."""
    submitit = _require_submitit()
    from cirbench.engine.distributed import init_distributed, is_main_process

    environment = submitit.JobEnvironment()
    if environment.num_tasks > 1:
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        _, device = init_distributed(spec.device)
        spec = dataclasses.replace(spec, device=device)
    grid = Grid(spec)
    cell = next((c for c in grid.cells if c.key.run_id == run_id), None)
    if cell is None:
        raise RuntimeError(f"cell {run_id} is not in this grid any more (did a method version or the code change?)")
    outcome = grid.run_cell(cell, progress=lambda info: None, announce=print if is_main_process() else lambda m: None)
    return {"run_id": run_id, "status": outcome.status, "error": outcome.error, "final": outcome.final}


def submit_grid(
    spec: GridSpec,
    launcher: str,
    folder: Path | None = None,
    gpus_per_cell: int = 0,
    timeout_min: int = 24 * 60,
    options: dict[str, Any] | None = None,
    job: Callable[[GridSpec, str], dict[str, Any]] = run_cell_job,
) -> Submission:
    """Submit one job per incomplete cell of ``spec``'s grid (validated first, so a bad
    grid submits nothing). ``launcher`` is ``slurm`` or ``local``; ``folder`` holds the
    jobs' logs (default ``<output>/jobs``); ``options`` are extra submitit parameters,
    e.g. ``{"slurm_partition": "gpu", "mem_gb": 64}``."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher {launcher!r} is not one of {', '.join(LAUNCHERS)}")
    if gpus_per_cell < 0:
        raise ValueError(f"gpus per cell must be >= 0, not {gpus_per_cell}")
    submitit = _require_submitit()
    spec = absolute_spec(spec)
    grid = Grid(spec)
    todo, done = pending_cells(grid)
    folder = Path(folder or spec.output / "jobs").resolve()
    if not todo:
        return Submission([], done, folder)
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
    return Submission(list(zip(todo, jobs)), done, folder)


def parse_scheduler_options(entries: list[str]) -> dict[str, Any]:
    """``["slurm_partition=gpu", "mem_gb=64"]`` -> ``{"slurm_partition": "gpu", "mem_gb": 64}``
    (values that read as JSON numbers or booleans become them)."""
    options: dict[str, Any] = {}
    for entry in entries:
        key, eq, value = entry.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--scheduler-option {entry!r}: expected key=value, e.g. slurm_partition=gpu")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value.strip()
    return options


def submit_from_cli(spec: GridSpec, launcher: str, gpus_per_cell: int, option_entries: list[str], console: Any) -> int:
    """``cirbench run --launcher ...``: submit, list the jobs, and with the ``local``
    launcher wait for them; returns the exit code (1 if a cell failed)."""
    from rich.table import Table

    submission = submit_grid(spec, launcher, gpus_per_cell=gpus_per_cell, options=parse_scheduler_options(option_entries))
    if not submission.jobs:
        console.print(f"nothing to submit: all {len(submission.skipped)} cells are complete in {spec.output} (--overwrite redoes them)")
        return 0
    table = Table(title=f"cirbench run --launcher {launcher}: {len(submission.jobs)} submitted, "
                        f"{len(submission.skipped)} already complete (logs: {submission.folder})")
    for column in ("method", "noise", "seed", "job", "status"):
        table.add_column(column)
    rows = {cell.key.run_id: [cell.key.method, f"{cell.key.noise_rate:g}", str(cell.key.seed), job.job_id, "submitted"]
            for cell, job in submission.jobs}
    if launcher == "local" and submission.jobs:
        with console.status(f"waiting for {len(submission.jobs)} local jobs"):
            for outcome in submission.wait():
                rows[outcome["run_id"]][-1] = outcome["status"] + (f": {outcome['error']}" if outcome.get("error") else "")
    for row in rows.values():
        table.add_row(*row)
    console.print(table)
    if launcher == "slurm" and submission.jobs:
        console.print("Rerun the same command to resubmit only the cells that are not complete (after these jobs end).")
    return int(any(o["status"] not in ("completed", "skipped", "locked") for o in submission.outcomes))
