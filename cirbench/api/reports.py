"""What a grid's results give, from Python as the command line gives it: a calibration
grid's checks, written to ``calibration.md`` in its results folder, and the report of a
results folder (with a README's generated block rewritten from it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cirbench.engine.running.grid import Grid
from cirbench.engine.planning.spec import backbone_label, dataset_label
from cirbench.report import ReportError, build_report
from cirbench.report.analysis.verdicts.calibration import Check, checks_markdown, run_calibration_checks
from cirbench.report.analysis.verdicts.published import PublishedFileError
from cirbench.report.render.readme import ReadmeError, update_readme
from cirbench.results.atomic import atomic_write_text
from cirbench.results.store import ResultsFolderError

REPORT_ERRORS: tuple[type[Exception], ...] = (ReportError, PublishedFileError, ResultsFolderError, ReadmeError, OSError)
"""What :func:`write_report` raises for results, a published file or a README it cannot use."""


@dataclass(frozen=True)
class Calibration:
    """A calibration grid's checks (:mod:`cirbench.report.analysis.verdicts.calibration`) and the file they were written to."""

    checks: list[Check]
    path: Path

    @property
    def passed(self) -> bool:
        """Whether no check failed (one not measurable from these results does not fail)."""
        return all(c.passed is not False for c in self.checks)


def check_calibration(grid: Grid) -> Calibration:
    """The calibration checks of ``grid``'s setting, read from its results folder and written
    to ``calibration.md`` there. ValueError when the folder holds no run of the setting."""
    spec = grid.spec
    checks = run_calibration_checks(spec.output, dataset_label(spec), backbone_label(spec), spec.noise_protocol)
    path = spec.output / "calibration.md"
    atomic_write_text(checks_markdown(checks) + "\n", path)
    return Calibration(checks, path)


@dataclass(frozen=True)
class WrittenReport:
    """A built report: its HTML page, and whether a README's generated block changed (None: no README given)."""

    page: Path
    readme_changed: bool | None


def write_report(results: Path, output: Path, published: Sequence[Path] = (), readme: Path | None = None) -> WrittenReport:
    """Build the report of ``results`` into ``output`` (:func:`cirbench.report.build_report`,
    with the ``published`` CSV files) and, with ``readme``, rewrite that file's generated
    results block from it. Raises one of :data:`REPORT_ERRORS`."""
    page = build_report(results, output, list(published))
    return WrittenReport(page, update_readme(readme, output) if readme is not None else None)
