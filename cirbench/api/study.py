"""A study file run from Python, as ``cirbench study FILE`` runs it: every grid of the study
(:mod:`cirbench.settings.study`) built as its command would build it from the same options and
checked first, all of them, their cells written as the study's plan
(:mod:`cirbench.report.analysis.loading.plans`), then run in order into one results folder
(finished cells skipped, so a rerun resumes), a calibration grid's checks written after it, a sweep's tuned
cells (``tuned_seeds``) planned from its results and run after it (:mod:`cirbench.api.tuned`),
and the report built last. :class:`StudyRunner` does each step plainly; the command line subclasses it to
show them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from cirbench.settings import defaults
from cirbench.api.grids import Announce, calibration, check, grid, kept_set_fields, run, sweep
from cirbench.api.reports import check_calibration, write_report
from cirbench.api.tuned import tuned_plan
from cirbench.settings.config import parse_overrides
from cirbench.engine.cell.life import CellOutcome
from cirbench.engine.running.grid import Grid
from cirbench.report.analysis.loading.plans import write_plan
from cirbench.results.labels import rate_label
from cirbench.settings.study import Study, StudyGrid, load_study

SPEC_FIELDS = ("seeds", "dataset", "backbone", "weights", "noise_protocol", "epochs", "batch_size", "device", "precision",
               "holdout")
"""The study options that are :class:`~cirbench.engine.planning.spec.GridSpec` fields of the same name."""


def _silent(message: str) -> None:
    """An announce that shows nothing."""


def _floats(values: list | None) -> list[float] | None:
    """A study's list of numbers as the command line reads it (``0`` -> ``0.0``: a run id names the float)."""
    return None if values is None else [float(v) for v in values]


def study_grid(entry: StudyGrid, study: Study, plugins: list[Path] | None = None, announce: Announce = _silent) -> Grid:
    """The validated grid of one study entry, as its command (``run``, ``sweep``,
    ``calibrate``) would build it from the same options, with ``plugins`` after the entry's
    own; ``announce`` is told an ablation's rows."""
    options = entry.options
    files = [Path(p) for p in options.get("plugins", [])] + list(plugins or [])
    fields: dict[str, Any] = {key: options[key] for key in SPEC_FIELDS if key in options}
    fields.update(output=study.output, cache_dir=study.cache_dir, dataset_options=dict(options.get("dataset_options", {})),
                  data_root=Path(options["data_root"]) if "data_root" in options else None, plugin_files=files)
    noise = _floats(options.get("noise"))
    if entry.kind == "calibrate":
        return calibration(**fields)
    if entry.kind == "sweep":
        return sweep(options["methods"], noise, int(options.get("trials", defaults.TRIALS)), **fields)
    fields.update(kept_set_fields(options.get("frontier", False), _floats(options.get("frontier_purity")),
                                  options.get("noise_types", False), options.get("replay")))
    return grid(options.get("methods"), noise, ablate=options.get("ablate"), overrides=parse_overrides(options.get("set", [])),
                announce=announce, **fields)


class StudyRunner:
    """Runs a study file: :meth:`__call__` builds and checks every grid, runs them in order,
    checks each calibration grid and builds the report. Each step is a method doing it
    plainly, which a subclass may override to show it (the command line's does)."""

    def __init__(self, jobs: int | None = None, plugins: list[Path] | None = None) -> None:
        self.jobs = jobs
        self.plugins = list(plugins or [])

    def announce(self, message: str) -> None:
        """A message of a step (an ablation's rows, a cache being written); shown nowhere here."""

    def build(self, entry: StudyGrid, study: Study) -> Grid:
        """The validated grid of ``entry`` (:func:`study_grid`)."""
        return study_grid(entry, study, self.plugins, self.announce)

    def check(self, built: Grid) -> None:
        """The grid's pre-flight (:func:`cirbench.api.grids.check`)."""
        check(built, self.announce)

    def run(self, entry: StudyGrid, built: Grid, jobs: int) -> list[CellOutcome]:
        """Run the grid ``jobs`` cells at a time; its outcomes."""
        return run(built, jobs)

    def tuned(self, entry: StudyGrid, built: Grid) -> list[Grid]:
        """The tuned cells' grids of a sweep entry with ``tuned_seeds``, planned from its
        results once its cells have run (:func:`cirbench.api.tuned.tuned_plan`); each plan
        line is announced."""
        plan = tuned_plan(built, list(entry.options["tuned_seeds"]))
        for line in plan.notes:
            self.announce(line)
        return plan.grids

    def calibrate(self, built: Grid) -> bool:
        """Check a calibration grid's results and write calibration.md; whether every target was met."""
        return check_calibration(built).passed

    def report(self, study: Study) -> bool:
        """Build the study's report (and rewrite its README's block); whether it was written."""
        write_report(study.output, study.report, readme=study.readme)
        return True

    def __call__(self, path: Path | str) -> tuple[list[CellOutcome], bool]:
        """Run the study ``path`` (a bad file or grid stops it before any work,
        :class:`~cirbench.settings.study.StudyError` or :class:`~cirbench.engine.planning.spec.GridError`): the
        outcomes of every grid, in order, and whether every calibration target was met and
        the report written."""
        study = load_study(path)
        grids = []
        for entry in study.grids:
            built = self.build(entry, study)
            self.check(built)
            grids.append((entry, built))
        write_plan(study.output, Path(path).stem, [cell.key for _, built in grids for cell in built.cells])
        outcomes, met = [], True
        for entry, built in grids:
            done = self.run(entry, built, study.jobs if self.jobs is None else self.jobs)
            if entry.kind == "calibrate":
                met &= self.calibrate(built)
            if entry.kind == "sweep" and "tuned_seeds" in entry.options:  # then the picked trials on more seeds
                for tuned in self.tuned(entry, built):
                    self.check(tuned)
                    where = replace(entry, where=f"{entry.where}, its tuned cells at {rate_label(tuned.spec.noise_rates[0])}")
                    done += self.run(where, tuned, study.jobs if self.jobs is None else self.jobs)
            outcomes += done
        if study.report is not None:
            met &= self.report(study)
        return outcomes, met


def run_study(path: Path | str, jobs: int | None = None, plugins: list[Path] | None = None) -> tuple[list[CellOutcome], bool]:
    """Run the study file ``path`` (:class:`StudyRunner`; ``jobs``: cells at once, default
    the study's; ``plugins``: files every grid registers): every grid's outcomes and whether
    every calibration target was met and the report written."""
    return StudyRunner(jobs, plugins)(path)
