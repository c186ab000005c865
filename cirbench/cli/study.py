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


def study_runner(path: Path, jobs: int | None = None, plugin: list[Path] | None = None):
    """A :class:`~cirbench.api.study.StudyRunner` of the study ``path`` that shows each step on the console."""
    from cirbench.api.study import StudyRunner
    from cirbench.config import ConfigError
    from cirbench.engine.spec import GridError

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
    from cirbench.study import StudyError

    try:
        return study_runner(path, jobs, plugin)(path)
    except StudyError as exc:
        fail(str(exc))


def study(
    path: Annotated[Path, typer.Argument(help="A study file (TOML): its grids, their options, the results and report folders.")],
    jobs: Annotated[Optional[int], Opt("--jobs", "-j", envvar="CIRBENCH_JOBS", help="Cells at once (default: the study's jobs, else "
                             "two on a CPU with two or more cores).")] = None,
    plugin: Plugins = [],
) -> None:
    """Run a study file's grids (run, calibrate, sweep, ablations) into one results folder,
    resumably (finished cells are skipped), then build its report; exit 1 if a cell failed,
    a calibration target was missed or the report could not be built."""
    outcomes, met = run_study(path, jobs, list(plugin))
    if not met or any(o.status == "failed" for o in outcomes):
        raise typer.Exit(1)
