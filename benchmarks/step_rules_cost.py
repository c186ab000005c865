"""What checking every training step against the method contract costs
(:mod:`cirbench.engine.cell.step_rules`): per method, the median wall time of a step of a default
cell and of the checks of that step (its output's, and the batch's: the guard noted before
the step and checked after it), and their ratio (issues 58 and 66 ask for at most 1%).

    python benchmarks/step_rules_cost.py                          # sprc, conesep, hug at 50% noise
    python benchmarks/step_rules_cost.py --methods sprc --max-steps 40

The grid is the default ``cirbench run`` builds (``shapes``, ``tiny``, its held-out share);
each cell trains its first ``--max-steps`` steps (:mod:`cirbench.engine.cell.hooks`), and after
each step the checks of its output and of its batch are timed again on their own,
``--repeats`` times (the step's own time includes them once). One thread, as a cell in a worker process; run it by hand on
an idle machine (``tests/test_benchmarks.py`` runs it on ``shapes-mini`` only to see that
it works).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import torch

from _profiling import default_spec
from cirbench.engine.cell.life import run_cell
from cirbench.engine.running.grid import Grid
from cirbench.engine.cell.hooks import TrainingHooks
from cirbench.engine.cell.step_rules import BatchGuard, check_step
from cirbench.method import Batch, Method, StepOutput


class StepAndCheckTimer(TrainingHooks):
    """Each step's wall time, and the time of checking its output and its batch again (the
    mean of ``repeats``); the step's batch is handed over by :func:`showing_batches`."""

    def __init__(self, method: str, max_steps: int, repeats: int) -> None:
        self.method, self.max_steps, self.repeats = method, max_steps, repeats
        self.steps: list[float] = []
        self.checks: list[float] = []
        self._started = 0.0
        self.batch: Batch | None = None

    def epoch_batches(self, epoch: int, batches: list) -> list:
        """The epoch's first ``max_steps`` batches."""
        return batches[:self.max_steps]

    def step_start(self, epoch: int, step: int) -> None:
        """The step's start."""
        self._started = time.perf_counter()

    def step_end(self, epoch: int, step: int, out: StepOutput) -> None:
        """The step's time, then its output and its batch checked ``repeats`` times."""
        self.steps.append(time.perf_counter() - self._started)
        start = time.perf_counter()
        for _ in range(self.repeats):
            guard = BatchGuard(self.batch)  # before the step
            guard.check(self.method, epoch, step)  # after it
            check_step(self.method, out, self.batch, epoch, step)
        self.checks.append((time.perf_counter() - start) / self.repeats)


def showing_batches(cls: type[Method], timer: StepAndCheckTimer) -> type[Method]:
    """``cls`` unchanged but for handing each step's batch to ``timer``."""
    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        timer.batch = batch
        return cls.training_step(self, batch, epoch, step)

    return type(cls.__name__, (cls,), {"training_step": training_step, "__module__": cls.__module__})


def main(argv: list[str] | None = None) -> None:
    """Time the steps and their checks of the cells the arguments name; one line per method."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="sprc,conesep,hug")
    parser.add_argument("--noise", type=float, default=0.5)
    parser.add_argument("--dataset", default="shapes")
    parser.add_argument("--max-steps", type=int, default=20, help="Steps of each cell timed (its first).")
    parser.add_argument("--repeats", type=int, default=50, help="Checks of each step's output timed.")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache-dir", type=Path, default=Path("datasets"))
    parser.add_argument("--output", type=Path, default=None, help="Results folder (default: a temporary one).")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as scratch:
        output = args.output or Path(scratch) / "results"
        for method in args.methods.split(","):
            grid = Grid(default_spec([method], [args.noise], 1, args.cache_dir, output, dataset=args.dataset))
            timer = StepAndCheckTimer(method, args.max_steps, args.repeats)
            grid.resources.hooks = timer
            (cell,) = grid.cells
            cell = dataclasses.replace(cell, method_cls=showing_batches(cell.method_cls, timer))
            outcome = run_cell(grid.resources, cell, lambda info: None, announce=lambda message: None)
            step, check = statistics.median(timer.steps[1:] or timer.steps), statistics.median(timer.checks)
            print(f"{method} {args.noise:g}: {outcome.status}, {len(timer.steps)} steps, step {1e3 * step:.1f} ms, "
                  f"contract checks {1e6 * check:.1f} us, checks / step {check / step:.3%}")


if __name__ == "__main__":
    main()
