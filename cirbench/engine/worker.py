"""The entry point of a process that runs cells of a grid it was handed as a spec: a worker
process of ``--jobs``, a scheduler job of ``--launcher``. The process builds the grid once
(and so discovers the plugins once) and runs each cell it is given by run id, which writes
the cell's parts to the results store; it sends back plain data, not the method class."""

from __future__ import annotations

import copy
from typing import Any, Callable

from cirbench.engine.cell import run_cell
from cirbench.engine.grid import Grid
from cirbench.engine.spec import GridSpec

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
    :meth:`~cirbench.engine.cell.CellOutcome.record`."""
    grid = grid_for(spec)
    return run_cell(grid.resources, grid.cell(run_id), progress=lambda info: None, announce=announce).record()
