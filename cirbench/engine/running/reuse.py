"""A finished cell is reused only under the evaluation it was measured with.

A cell's run id names everything that changes what it trains (docs/benchmark.md#run-ids),
but not the evaluation: the dataset's protocol is known only once the dataset is loaded,
and the metric code is the harness's. Every run records both (``runs.eval_protocol``,
``runs.metrics_version``), and before any work :func:`refuse_another_evaluation` compares
the finished cells of a grid with the loaded dataset's protocol and this code's
:data:`~cirbench.engine.cell.evaluate.METRICS_VERSION`: a cell measured under another one would
be reported with its old numbers beside new ones, so the grid is refused, naming the cells,
both evaluations and the way out (``--overwrite`` reruns them; another ``--output`` keeps
them apart).
"""

from __future__ import annotations

import pandas as pd

from cirbench.engine.cell.evaluate import METRICS_VERSION
from cirbench.engine.running.grid import Grid


class EvaluationChangedError(ValueError):
    """Finished cells of a grid were measured under another evaluation than this code's;
    raised before any work."""


def measured_elsewhere(runs: pd.DataFrame, protocol: str) -> pd.DataFrame:
    """The completed ``runs`` rows measured under another evaluation than ``protocol`` (an
    ``EvalProtocol.describe()``) and :data:`METRICS_VERSION` (a row that recorded no
    protocol is not compared)."""
    done = runs[runs.status == "completed"]
    recorded = done.eval_protocol.fillna("").astype(str)
    other = ((recorded != "") & (recorded != protocol)) | (done.metrics_version.astype(str) != METRICS_VERSION)
    return done[other]


def refuse_another_evaluation(grid: Grid) -> None:
    """Refuse ``grid`` (:class:`EvaluationChangedError`) when its results folder holds finished
    cells of it, reference rows included, measured under another evaluation than its loaded
    dataset's protocol and this code's metrics; nothing to refuse with ``--overwrite``."""
    if grid.spec.overwrite:
        return
    ids = [cell.key.run_id for cell in grid.cells + grid.reference_cells()]
    protocol = grid.resources.dataset().protocol.describe()
    other = measured_elsewhere(grid.store.read("runs", ids), protocol)
    if other.empty:
        return
    first = other.iloc[0]
    raise EvaluationChangedError(
        f"{grid.spec.output}: {len(other)} finished cell(s) of this grid were measured under another evaluation "
        f"(e.g. {first.run_id}: protocol {first.eval_protocol!r}, metrics v{first.metrics_version}; this code and "
        f"dataset evaluate with {protocol!r}, metrics v{METRICS_VERSION}), so their numbers would not compare with new "
        "cells'. Rerun them under this evaluation with --overwrite, or write to another --output. Nothing was run."
    )
