"""Does this machine reproduce a report? From Python as ``cirbench reproduce`` asks it: the
reference's cells of a setting (:mod:`cirbench.report.analysis.loading.reproduce_check`) re-run here on the
default backbone with its released start, into a scratch folder, each final metric judged
against the spread of the reference's seeds."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from cirbench.settings import defaults
from cirbench.api.grids import run
from cirbench.backbones import tiny_release
from cirbench.backbones.registry import BACKBONES
from cirbench.engine.cell.life import CellOutcome
from cirbench.engine.running.grid import Grid
from cirbench.engine.planning.spec import GridSpec, backbone_label, dataset_label
from cirbench.report.analysis.loading.reproduce_check import (
    Verdict, Wanted, check_same_start, compare, final_metrics, load_reference, setting_of,
)
from cirbench.results.metrics import REPRODUCED
from cirbench.results.store import ResultsStore


@dataclass
class Reproduction:
    """What a re-run found: each cell and metric's verdict, the starts of the reference and
    of here, and the cells that failed (then no verdict is given)."""

    verdicts: list[Verdict] = field(default_factory=list)
    reference_starts: list[str] = field(default_factory=list)
    starts_here: list[str] = field(default_factory=list)
    failed: list[CellOutcome] = field(default_factory=list)


def reproduced_setting(methods: Sequence[str], noise: Sequence[float], seeds: Sequence[int], dataset: str) -> tuple[Wanted, dict]:
    """The cells a reproduction compares (a :class:`~cirbench.report.analysis.loading.reproduce_check.Wanted`)
    and the grid fields that name them, on the default backbone with its default weights."""
    fields = dict(methods=list(methods), noise_rates=list(noise), seeds=list(seeds), dataset=dataset)
    probe = GridSpec(**fields)
    probe.weights = getattr(BACKBONES.get(probe.backbone), "default_weights", None)  # as the grid records it
    wanted = Wanted(probe.methods, probe.noise_rates, dataset_label(probe), backbone_label(probe), probe.noise_protocol)
    return wanted, fields


def _rerun(fields: dict, jobs: int, metrics: list[str]) -> tuple[pd.DataFrame, pd.DataFrame, list[CellOutcome]]:
    """Run the grid of ``fields`` here: its completed runs, their final metrics and the failed outcomes."""
    grid = Grid(GridSpec(**fields))
    outcomes = run(grid, jobs)
    store = ResultsStore(fields["output"])
    done = store.read("runs")
    done = done[done.run_id.isin([c.key.run_id for c in grid.cells])]
    return done, final_metrics(store, done, metrics), [o for o in outcomes if o.status == "failed"]


def reproduce(reference: Path, methods: Sequence[str] = defaults.REPRODUCE_METHODS,
              noise: Sequence[float] = defaults.REPRODUCE_RATES, seeds: Sequence[int] = (0,), dataset: str = "shapes",
              epochs: int | None = None, holdout: float | None = None, batch_size: int = defaults.BATCH_SIZE,
              metrics: Sequence[str] = REPRODUCED, spread: float = defaults.REPRODUCE_SPREAD, scratch: Path | None = None,
              cache_dir: Path = Path("datasets"), jobs: int = 0,
              announce: Callable[[str], None] = lambda message: None) -> Reproduction:
    """Re-run the ``reference``'s cells of ``methods`` x ``noise`` x ``seeds`` here (``epochs``
    and ``holdout`` default to the reference runs') into ``scratch`` (default: a new temporary
    folder) and judge each final metric against the reference's seeds within ``spread``
    std. :class:`~cirbench.report.analysis.loading.reproduce_check.ReferenceFolderError` when the reference
    cannot answer (no such cells, one seed, another start)."""
    wanted, grid_fields = reproduced_setting(methods, noise, seeds, dataset)
    runs, table = load_reference(reference, wanted, list(metrics))
    check_same_start(runs, tiny_release.START_KEY)  # the default backbone and weights: the released tiny start
    epochs, holdout = int(setting_of(runs, "epochs", epochs)), setting_of(runs, "holdout", holdout)
    scratch = scratch or Path(tempfile.mkdtemp(prefix="cirbench-reproduce-"))
    announce(f"re-running cells ({epochs} epochs, held-out share {holdout:g}) into {scratch}")
    done, here, failed = _rerun({**grid_fields, "epochs": epochs, "holdout": holdout, "batch_size": batch_size,
                                 "output": scratch, "cache_dir": cache_dir}, jobs, list(metrics))
    found = Reproduction(reference_starts=sorted(set(runs.start_key) - {""}), starts_here=sorted(set(done.start_key)),
                         failed=failed)
    if not failed:
        found.verdicts = compare(table, here, spread)
    return found
