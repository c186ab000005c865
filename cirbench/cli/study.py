"""``cirbench study FILE``: a study file run by :class:`cirbench.api.study.StudyRunner` (every
grid built and checked first, then run in order into one results folder, the report built
last), each step shown: the grid it builds, a progress line per cell, each grid's summary,
the calibration checks and the report written."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from cirbench.cli.grid import calibration_checks, print_summary, run_here, shown_grid, write_report
from cirbench.cli.options import Opt, Plugins, console, fail
from cirbench.results.metrics import format_number


def study_runner(path: Path, jobs: int | None = None, plugin: list[Path] | None = None):
    """A :class:`~cirbench.api.study.StudyRunner` of the study ``path`` that shows each step on the console."""
    from cirbench.api.study import StudyRunner
    from cirbench.settings.config import ConfigError
    from cirbench.engine.planning.spec import GridError

    class ShownStudy(StudyRunner):
        """The study's steps, each shown (see the module docstring)."""

        def announce(self, message: str) -> None:
            console.print(f"[dim]{escape(message)}[/]")

        def build(self, entry, study):
            console.print(f"[dim]{path}: {entry.where}[/]")
            try:
                return super().build(entry, study)
            except (GridError, ConfigError) as exc:
                fail(str(exc))

        def check(self, built) -> None:
            shown_grid(built)

        def run(self, entry, built, jobs: int) -> list:
            console.print(f"[bold]{path}: {entry.where}[/]: {len(built.pending())} of {len(built.cells)} cells to run")
            done = run_here(built, jobs)
            print_summary(built, done)
            return done

        def calibrate(self, built) -> bool:
            return calibration_checks(built, ",".join(str(s) for s in built.spec.seeds))

        def report(self, study) -> bool:
            return write_report(study.output, study.report, readme=study.readme)

    return ShownStudy(jobs, plugin)


def run_study(path: Path, jobs: int | None = None, plugin: list[Path] | None = None) -> tuple[list, bool]:
    """Run the study ``path`` with each step shown (any error stops it before work; ``plugin``:
    files every grid registers): the outcomes of every grid, in order, and whether every
    calibration target was met and the report written."""
    from cirbench.settings.study import StudyError

    try:
        return study_runner(path, jobs, plugin)(path)
    except StudyError as exc:
        fail(str(exc))


def print_plan(path: Path, plugin: list[Path], tflops: float, jobs: int | None = None) -> None:
    """``--plan``: every grid of the study checked and costed (:mod:`cirbench.api.plan`), and
    its pending cells timed at its results folder's measured pace (:mod:`cirbench.api.pace`),
    nothing trained."""
    from rich.table import Table

    from cirbench.api.plan import PlanError, plan_study
    from cirbench.settings.config import ConfigError
    from cirbench.engine.planning.spec import GridError
    from cirbench.settings.study import StudyError

    try:
        plans = plan_study(path, plugin, announce=lambda message: console.print(f"[dim]{escape(message)}[/]"))
    except (StudyError, GridError, ConfigError, PlanError) as exc:
        fail(str(exc))
    total = 0.0
    for plan in plans:
        console.print(f"[bold]{path}: {plan.where}[/]: {escape(plan.setting)}; {plan.cells} cells, {plan.pending} to run")
        for note in plan.notes:
            console.print(f"  [dim]{escape(note)}[/]")
        table = Table(show_header=True)
        for column in ("row", "cells", "steps per cell", "GFLOP per step, first / last epoch", "PFLOP", "hours"):
            table.add_column(column, justify="left" if column == "row" else "right")
        for row in plan.rows:
            table.add_row(escape(row.label), str(row.cells), str(row.steps), f"{row.first_gflop:,.1f} / {row.step_gflop:,.1f}",
                          f"{row.pflop:,.3f}",
                          f"{row.pflop * 1e3 / tflops / 3600:,.2f}")
        console.print(table)
        total += plan.pflop
    console.print(f"{len(plans)} grids, {sum(p.cells for p in plans)} cells: {total:,.3f} PFLOP of training steps, "
                  f"{total * 1e3 / tflops / 3600:,.2f} hours at {tflops:g} TFLOP/s sustained (the tower's features, "
                  "evaluations and epoch-level passes come on top: docs/real-datasets.md)")
    print_pace(path, plans, jobs)


def print_pace(path: Path, plans: list, jobs: int | None) -> None:
    """The line timing the pending cells at the results folder's measured pace, when it has one."""
    from cirbench.api.pace import pace
    from cirbench.engine.running.worker import default_jobs
    from cirbench.settings.study import load_study

    study = load_study(path)
    measured = pace(study.output, plans)
    if measured is None or not measured.pending:
        return
    at_once = jobs or study.jobs or default_jobs("cpu")
    methods = ", ".join(f"{m} {format_number(s / 3600, 1)} h" for m, s in sorted(measured.by_method.items(), key=lambda x: -x[1]))
    unmeasured = f"; {measured.unmeasured} at the median of every cell (no cell of their method done yet)" \
        if measured.unmeasured else ""
    console.print(escape(f"at this results folder's measured pace (each method's median completed cell): the "
                         f"{measured.pending} pending cells take about {format_number(measured.hours(at_once), 1)} h, "
                         f"{at_once} at a time (cell-hours: {methods}{unmeasured})"), soft_wrap=True)


def study(
    path: Annotated[Path, typer.Argument(help="A study file (TOML): its grids, their options, the results and report folders.")],
    jobs: Annotated[Optional[int], Opt("--jobs", "-j", envvar="CIRBENCH_JOBS", help="Cells at once (default: the study's jobs, else "
                             "one per usable core on a CPU, one on a GPU).")] = None,
    plugin: Plugins = [],
    plan: Annotated[bool, Opt("--plan", help="Train nothing: resolve every cell, check the data files, the noise and the "
                              "backbone, and print the cells with their estimated cost (FLOP-counted steps).")] = False,
    tflops: Annotated[float, Opt("--tflops", help="With --plan: the sustained TFLOP/s the hours assume.")] = 100.0,
) -> None:
    """Run a study file's grids (run, calibrate, sweep, ablations) into one results folder,
    resumably (finished cells are skipped), then build its report; exit 1 if a cell failed,
    a calibration target was missed or the report could not be built. With --plan, check and
    cost it instead."""
    if plan:
        print_plan(path, list(plugin), tflops, jobs)
        return
    outcomes, met = run_study(path, jobs, list(plugin))
    if not met or any(o.status == "failed" for o in outcomes):
        raise typer.Exit(1)
