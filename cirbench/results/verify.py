"""Checking a cell's record: every part of a run against what its ``runs`` row recorded.

The ``runs`` row of a cell (written last) records, in its ``parts`` column, each of the
cell's other parts with its row count, size and sha256 (and the checkpoint of a run saved
with ``--save``). A part that is missing, unreadable, of another size or with another hash
than recorded makes the cell *damaged*: not complete, redone by the next ``run``, listed by
the report with the reason. Rows written before parts were recorded (``parts`` empty) are
checked for readability only. A table whose folder is absent as a whole is one the writer
did not have yet (only ``ranks``, which came later: :data:`OPTIONAL_TABLES`).

This module reads with pyarrow alone (no torch), so ``cirbench results verify`` is quick.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

RUNS = "runs"
DATA_TABLES: tuple[str, ...] = ("metrics", "purity", "scores", "losses", "ranks")
"""The tables whose parts a ``runs`` row records (kept equal to ``store.TABLES`` minus ``runs``)."""
OPTIONAL_TABLES: tuple[str, ...] = ("ranks",)
"""Tables added after the first release: a folder without such a table's folder predates it."""
CHECKPOINT = "checkpoint"
QUARANTINE = "quarantine"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a cell's record: the file, the cell's run id, and what is wrong."""

    file: Path
    run_id: str
    what: str

    def __str__(self) -> str:
        return f"{self.file}: cell {self.run_id}: {self.what}"


@dataclass
class FolderCheck:
    """What :func:`check_folder` found: the run ids with a readable ``runs`` part, every
    problem, and the cells skipped because a live process holds their lock."""

    run_ids: list[str]
    problems: list[Problem] = field(default_factory=list)
    busy: dict[str, str] = field(default_factory=dict)

    def damaged(self) -> dict[str, list[Problem]]:
        """The problems grouped by run id."""
        out: dict[str, list[Problem]] = {}
        for problem in self.problems:
            out.setdefault(problem.run_id, []).append(problem)
        return out


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def part_record(path: Path, rows: int | None) -> dict:
    """What a ``runs`` row records of one part file: ``rows`` (None for a checkpoint), ``bytes``, ``sha256``."""
    return {"rows": rows, "bytes": path.stat().st_size, "sha256": file_sha256(path)}


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def unreadable(path: Path) -> str | None:
    """Why the parquet file ``path`` cannot be read whole, or None if it can."""
    try:
        pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        return _one_line(exc)
    return None


def read_runs_row(root: Path, run_id: str) -> tuple[dict | None, Problem | None]:
    """The ``runs`` row of ``run_id`` (None if it has no ``runs`` part), or the problem that
    keeps it from being read."""
    path = root / RUNS / f"{run_id}.parquet"
    if not path.exists():
        return None, None
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # noqa: BLE001
        return None, Problem(path, run_id, f"unreadable runs part: {_one_line(exc)}")
    if len(rows) != 1:
        return None, Problem(path, run_id, f"runs part holds {len(rows)} rows, expected 1")
    return rows[0], None


def recorded_parts(row: dict) -> dict | None:
    """The ``parts`` a ``runs`` row records, or None for a row written before they were."""
    text = row.get("parts") or ""
    return json.loads(text) if text else None


def _check_part(root: Path, run_id: str, table: str, entry: dict | None) -> Problem | None:
    path = root / table / f"{run_id}.parquet"
    if not path.exists():
        if table in OPTIONAL_TABLES and not (root / table).is_dir():
            return None
        recorded = f" (recorded: {entry['rows']} rows)" if entry else ""
        return Problem(path, run_id, f"missing{recorded}")
    if entry is None:  # nothing recorded: readability only
        reason = unreadable(path)
        return Problem(path, run_id, f"unreadable: {reason}") if reason else None
    return _compare(path, run_id, entry, parquet=True)


def _compare(path: Path, run_id: str, entry: dict, parquet: bool) -> Problem | None:
    size = path.stat().st_size
    if size == entry["bytes"] and file_sha256(path) == entry["sha256"]:
        return None
    sizes = f"{size} bytes on disk, {entry['bytes']} recorded" + (" (truncated)" if size < entry["bytes"] else "")
    reason = unreadable(path) if parquet else None
    if reason:
        return Problem(path, run_id, f"unreadable ({reason}); {sizes}")
    rows = f"{pq.ParquetFile(path).metadata.num_rows} rows, {entry['rows']} recorded; " if parquet else ""
    return Problem(path, run_id, f"content differs from the recorded sha256 (changed since it was written): {rows}{sizes}")


def check_cell(root: Path | str, run_id: str, row: dict | None = None) -> list[Problem]:
    """Every problem of the parts of ``run_id`` (its ``runs`` row is read unless given)."""
    root = Path(root)
    if row is None:
        row, problem = read_runs_row(root, run_id)
        if problem is not None:
            return [problem]
        if row is None:
            return []
    recorded = recorded_parts(row)
    problems = []
    for table in DATA_TABLES:
        entry = None if recorded is None else recorded.get(table)
        problem = _check_part(root, run_id, table, entry)
        if problem is not None:
            problems.append(problem)
    checkpoint = (recorded or {}).get(CHECKPOINT)
    if checkpoint:
        path = root / checkpoint["file"]
        problem = Problem(path, run_id, "missing (recorded as the run's checkpoint)") if not path.exists() else \
            _compare(path, run_id, checkpoint, parquet=False)
        if problem is not None:
            problems.append(problem)
    return problems


def check_folder(root: Path | str, skip: dict[str, str] | None = None) -> FolderCheck:
    """Check every cell under ``root``: each ``runs`` part and the parts it records, and
    every data part that has no ``runs`` part (a cell whose record is incomplete). Cells
    in ``skip`` (run id -> why, e.g. held by a live process) are left out."""
    root = Path(root)
    skip = skip or {}
    result = FolderCheck([], busy=dict(skip))
    seen = set()
    for path in sorted((root / RUNS).glob("*.parquet")):
        run_id = path.stem
        seen.add(run_id)
        if run_id in skip:
            continue
        row, problem = read_runs_row(root, run_id)
        if problem is not None:
            result.problems.append(problem)
            continue
        result.run_ids.append(run_id)
        result.problems += check_cell(root, run_id, row)
    for table in DATA_TABLES:
        for path in sorted((root / table).glob("*.parquet")):
            if path.stem not in seen and path.stem not in skip:
                result.problems.append(Problem(path, path.stem, "no runs part: the cell's record is incomplete "
                                                               "(a write that was cut short, or a deleted runs part)"))
    return result


def cell_files(root: Path, run_id: str) -> list[Path]:
    """Every file of ``run_id``'s record that exists: its part in each table and its checkpoint."""
    files = [root / table / f"{run_id}.parquet" for table in (*DATA_TABLES, RUNS)]
    files.append(root / "checkpoints" / f"{run_id}.pt")
    return [f for f in files if f.exists()]


def quarantine(root: Path | str, run_ids: list[str], stamp: str | None = None) -> list[tuple[Path, Path]]:
    """Move every file of the cells ``run_ids`` under ``<root>/quarantine/<stamp>/`` (same
    relative paths; never deleted, never overwritten), so that the next ``run`` redoes
    them. Returns the (from, to) pairs."""
    root = Path(root)
    stamp = stamp or dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    moved = []
    for run_id in run_ids:
        for source in cell_files(root, run_id):
            target = root / QUARANTINE / stamp / source.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            n = 0
            while target.exists():
                n += 1
                target = target.with_name(f"{source.name}.{n}")
            os.replace(source, target)
            moved.append((source, target))
    return moved
