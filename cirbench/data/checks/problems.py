"""What a dataset check finds: :class:`Problem` (file, entry, what is wrong, and how bad),
the :class:`CheckReport` of a whole root, and :class:`DatasetProblemsError`, which a loader
raises for a dataset with errors.

Two severities. An *error* (malformed JSON, a missing file or field, a name absent from its
split file, a missing or unreadable image, a path leading out of the root) makes a sample
unusable; ``fatal`` errors make the whole dataset unreadable. A *warning* is something the
public loaders (CLIP4Cir, SPRC, TME, ConeSep) read as it is, such as an entry that exactly
repeats an earlier one: it is listed, counted in the ``runs`` table, and never blocks a run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset: ``file`` relative to the root, ``entry`` the entry
    (``#12``, an image name or a key; empty for the whole file), ``kind`` a short category
    (``malformed-json``, ``missing-file``, ``missing-field``, ``not-in-split``,
    ``missing-image``, ``unreadable-image``, ``duplicate``, ``path-escape``, ``repeat``),
    ``problem`` the explanation, ``fatal`` for errors that make the dataset unreadable and
    ``severity`` ``error`` or ``warning``."""

    file: str
    entry: str
    kind: str
    problem: str
    fatal: bool = False
    severity: Severity = "error"

    def __str__(self) -> str:
        entry = f" [{self.entry}]" if self.entry else ""
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{prefix}{self.file}{entry}: {self.problem}"

    def as_dict(self) -> dict[str, object]:
        """A JSON-friendly form."""
        return asdict(self)


@dataclass
class CheckReport:
    """The outcome of a check: the problems (errors and warnings) and counts of what was read."""

    dataset: str
    root: Path
    problems: list[Problem] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> list[Problem]:
        """The problems that cost samples (or, when fatal, the whole dataset)."""
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        """The problems the public loaders accept: listed, never blocking."""
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        """True when there is no error (warnings allowed)."""
        return not self.errors

    @property
    def fatal(self) -> list[Problem]:
        """The problems that make the dataset unloadable."""
        return [p for p in self.problems if p.fatal]

    def kinds(self) -> dict[str, int]:
        """Number of problems of each kind."""
        return dict(sorted(Counter(p.kind for p in self.problems).items()))

    def as_dict(self) -> dict[str, object]:
        """A JSON-friendly form (for ``cirbench data check --json``)."""
        return {
            "dataset": self.dataset, "root": str(self.root), "counts": self.counts, "kinds": self.kinds(),
            "errors": len(self.errors), "warnings": len(self.warnings),
            "problems": [p.as_dict() for p in self.problems],
        }


class DatasetProblemsError(ValueError):
    """A dataset with errors; raised by a loader unless the losses were accepted."""

    def __init__(self, report: CheckReport) -> None:
        self.report = report
        errors = report.errors
        shown = "\n".join(f"  {p}" for p in errors[:10])
        more = f"\n  ... and {len(errors) - 10} more" if len(errors) > 10 else ""
        if report.fatal:
            advice = f"{len(report.fatal)} of them make the dataset unreadable; fix the files"
        else:
            advice = "pass --allow-missing to drop the affected samples (they are listed and recorded with the run)"
        warned = f", {len(report.warnings)} warning(s)" if report.warnings else ""
        super().__init__(
            f"{report.dataset} at {report.root}: {len(errors)} error(s){warned} ({advice}; "
            f"`cirbench data check {report.dataset} --data-root {report.root}` lists them all):\n{shown}{more}"
        )
