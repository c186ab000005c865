"""Worker processes: the entry point of a process that runs cells of a grid it was handed
as a spec (a worker process of ``--jobs``, a scheduler job of ``--launcher``), and the pool
of worker processes of ``--jobs`` on one machine.

A process builds the grid once (and so discovers the plugins once) and runs each cell it is
given by run id, which writes the cell's parts to the results store; it sends back plain
data, not the method class.

The pool. Several cells of a grid at once, one process each, on one machine.

Every cell computes with :data:`~cirbench.settings.kernels.CELL_THREADS` intra-op thread wherever it
runs (:func:`~cirbench.settings.kernels.cell_threads`: a reduction split over more threads adds in
another order, so a thread count that followed ``--jobs`` or the machine's cores changed the
numbers); the cores are kept busy by cells side by side instead: ``--jobs`` defaults to one
process per usable core on a CPU (a small model on a CPU uses two threads poorly anyway: two
cells in two single-threaded processes finish about a quarter sooner than the same cells one
after another with two threads each). Each worker builds the grid once from the same
:class:`~cirbench.engine.planning.spec.GridSpec` and runs its cells with :func:`run_cell_by_id`, which
writes each cell's parts to the results store atomically; the store is the only
coordination, as with the ``--launcher`` jobs.
Caches (data, pre-trained weights, tower tokens) must exist before the workers start, so
that they only read them: the caller runs the reference rows first.

On a GPU (``--device cuda --jobs N``) the N workers share the device: each computes on the
CPU with the same one thread and may allocate at most ``1/N`` of the GPU's memory
(``torch.cuda.set_per_process_memory_fraction``), so a cell that needs more than its share
fails alone with an out-of-memory error naming it, instead of starving the cells beside it.
"""

from __future__ import annotations

import copy
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Iterator

import torch

from cirbench.engine.cell.life import run_cell
from cirbench.engine.running.grid import Grid
from cirbench.engine.planning.spec import GridSpec
from cirbench.settings.kernels import CELL_THREADS

_built: list[tuple[GridSpec, Grid]] = []
"""The grid this process built, with the spec it was built from (at most one)."""


def grid_for(spec: GridSpec) -> Grid:
    """``spec``'s grid, built once per process (again only for another spec)."""
    if not _built or _built[0][0] != spec:
        key = copy.deepcopy(spec)  # Grid fills in the default weights of the spec it is given
        _built[:] = [(key, Grid(spec))]
    return _built[0][1]


def run_cell_by_id(spec: GridSpec, run_id: str, announce: Callable[[str], None]) -> dict[str, Any]:
    """Run the cell ``run_id`` of ``spec``'s grid and return its
    :meth:`~cirbench.engine.cell.life.CellOutcome.record`."""
    grid = grid_for(spec)
    return run_cell(grid.resources, grid.cell(run_id), progress=lambda info: None, announce=announce).record()


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform says, else all)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_jobs(device: str) -> int:
    """Cells at once when not told: one per usable core on a CPU (each cell computes with one
    thread, :data:`~cirbench.settings.kernels.CELL_THREADS`), one on a GPU."""
    return max(1, usable_cores() // CELL_THREADS) if device == "cpu" else 1


def memory_fraction(jobs: int) -> float:
    """The share of one GPU's memory each of ``jobs`` workers on it may allocate."""
    return 1.0 / max(1, jobs)


def _init_worker(device: str, jobs: int) -> None:
    torch.set_num_threads(CELL_THREADS)  # each cell sets it again (cirbench.settings.kernels.cell_threads)
    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index
        torch.cuda.set_per_process_memory_fraction(memory_fraction(jobs), torch.cuda.current_device() if index is None else index)


def _run_one(spec: GridSpec, run_id: str) -> dict[str, Any]:
    return run_cell_by_id(spec, run_id, announce=lambda message: None)


def run_in_processes(spec: GridSpec, run_ids: list[str], jobs: int) -> Iterator[dict[str, Any]]:
    """Run the cells ``run_ids`` of ``spec``'s grid, ``jobs`` at a time, each process on
    :data:`~cirbench.settings.kernels.CELL_THREADS` thread; yields each cell's outcome (``run_id``,
    ``status``, ``error``, ``final``) as it ends. A worker that dies is reported as a failed cell."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_init_worker, initargs=(spec.device, jobs)) as pool:
        futures = {pool.submit(_run_one, spec, run_id): run_id for run_id in run_ids}
        try:
            for future in as_completed(futures):
                try:
                    yield future.result()
                except Exception as exc:  # noqa: BLE001 - a crashed worker is a failed cell, not a crashed grid
                    yield {"run_id": futures[future], "status": "failed", "error": f"{type(exc).__name__}: {exc}", "final": {}}
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise

