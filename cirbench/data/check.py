"""``cirbench data check``: validate a dataset's files before anyone trains on them.

A check returns a structured list of :class:`Problem` (file, entry, what is wrong). Fatal
problems (a missing or malformed file, a path leading out of the root) make a dataset
unloadable; the others (entries missing fields, names absent from the split files, missing,
unreadable or truncated images, duplicates) cost samples, which a run accepts only with
``--allow-missing``; the dropped samples are then listed and recorded with the run.

Decoding every image is the slow part of a check, so its verdict per file is cached under
the cache directory, keyed by the file's size and modification time.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping

from cirbench.data.files import decode_image

DATA_ROOT_ENV = "CIRBENCH_DATA_ROOT"
_DECODE_CACHE_VERSION = 1


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset: ``file`` relative to the root, ``entry`` the entry
    (``#12``, an image name or a key; empty for the whole file), ``kind`` a short category
    (``malformed-json``, ``missing-file``, ``missing-field``, ``not-in-split``,
    ``missing-image``, ``unreadable-image``, ``duplicate``, ``path-escape``) and ``problem``
    the explanation."""

    file: str
    entry: str
    kind: str
    problem: str
    fatal: bool = False

    def __str__(self) -> str:
        entry = f" [{self.entry}]" if self.entry else ""
        return f"{self.file}{entry}: {self.problem}"

    def as_dict(self) -> dict[str, object]:
        """A JSON-friendly form."""
        return asdict(self)


@dataclass
class CheckReport:
    """The outcome of a check: the problems and a few counts of what was read."""

    dataset: str
    root: Path
    problems: list[Problem] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.problems

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
            "problems": [p.as_dict() for p in self.problems],
        }


class DatasetProblemsError(ValueError):
    """A dataset that failed its check; raised by a loader unless the losses were accepted."""

    def __init__(self, report: CheckReport) -> None:
        self.report = report
        problems = report.problems
        shown = "\n".join(f"  {p}" for p in problems[:10])
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        if report.fatal:
            advice = f"{len(report.fatal)} of them make the dataset unreadable; fix the files"
        else:
            advice = "pass --allow-missing to drop the affected samples (they are listed and recorded with the run)"
        super().__init__(
            f"{report.dataset} at {report.root}: {len(problems)} problem(s) ({advice}; "
            f"`cirbench data check {report.dataset} --data-root {report.root}` lists them all):\n{shown}{more}"
        )


def resolve_data_root(dataset: str, data_root: Path | str | None) -> Path:
    """The root of a dataset's files: ``data_root``, else ``$CIRBENCH_<DATASET>_ROOT``, else
    ``$CIRBENCH_DATA_ROOT``; an error naming the option when none is set or it is no folder."""
    specific = f"CIRBENCH_{dataset.upper().replace('-', '_')}_ROOT"
    chosen = data_root or os.environ.get(specific) or os.environ.get(DATA_ROOT_ENV)
    if not chosen:
        raise ValueError(
            f"dataset {dataset!r} reads files you provide: pass --data-root PATH (or set {specific} or {DATA_ROOT_ENV})"
        )
    root = Path(chosen).expanduser()
    if not root.is_dir():
        raise ValueError(f"the {dataset} data root {root} is not a directory (from --data-root, {specific} or {DATA_ROOT_ENV})")
    return root


def _decode_cache_path(cache_dir: Path, root: Path) -> Path:
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return Path(cache_dir) / "checks" / f"images-{digest}.json"


def unreadable_images(images: Mapping[str, Path], root: Path, cache_dir: Path | None) -> dict[str, str]:
    """Decode every image in ``images`` (name -> path) fully; return name -> error for
    those that cannot be read. Verdicts are cached per file (size, mtime) under ``cache_dir``."""
    cache_file = _decode_cache_path(cache_dir, root) if cache_dir is not None else None
    cached: dict[str, list] = {}
    if cache_file is not None and cache_file.exists():
        try:
            blob = json.loads(cache_file.read_text())
            if blob.get("version") == _DECODE_CACHE_VERSION:
                cached = blob["files"]
        except (OSError, ValueError, KeyError):
            cached = {}
    base = root.resolve()
    bad: dict[str, str] = {}
    updated = dict(cached)
    for name, path in images.items():
        rel = str(Path(path).relative_to(base)) if Path(path).is_relative_to(base) else str(path)
        try:
            stat = os.stat(path)
        except OSError as exc:
            bad[name] = f"cannot stat: {exc}"
            continue
        seen = cached.get(rel)
        if seen is not None and seen[0] == stat.st_size and seen[1] == stat.st_mtime_ns:
            error = seen[2]
        else:
            try:
                decode_image(Path(path))
                error = None
            except OSError as exc:
                error = str(exc.__cause__ or exc)
            updated[rel] = [stat.st_size, stat.st_mtime_ns, error]
        if error is not None:
            bad[name] = error
    if cache_file is not None and updated != cached:
        from cirbench.results.atomic import atomic_write_text

        atomic_write_text(json.dumps({"version": _DECODE_CACHE_VERSION, "root": str(base), "files": updated}), cache_file)
    return bad


def check_dataset(
    dataset: str, data_root: Path | str | None, options: Mapping[str, str] | None = None, cache_dir: Path | None = None
) -> CheckReport:
    """Check a registered dataset whose files the user provides (FashionIQ, CIRR)."""
    from cirbench.data.registry import DATASETS

    loader = DATASETS.get(dataset)
    if not hasattr(loader, "check"):
        raise ValueError(f"dataset {dataset!r} is generated by cirbench; there are no files to check")
    return loader.check(data_root, options or {}, cache_dir)
