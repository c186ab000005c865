"""The results store: six parquet tables, each a directory of one part file per run.

``<root>/<table>/<run_id>.parquet`` for ``table`` in :data:`TABLES`; read a whole table with
``pandas.read_parquet("<root>/<table>")``. A run's parts are written atomically, the
``runs`` part last, so a ``runs`` row with status ``completed`` means every other part of
that run is in place: that is what lets a rerun of a grid skip finished cells, and a
killed run leave earlier cells untouched. The ``runs`` row also records each other part's
row count, size and sha256 (``parts``), so a part damaged later is found
(:mod:`cirbench.results.verify`): such a cell is not complete, and its files are moved
aside (never deleted) before it is redone.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from cirbench.results import verify
from cirbench.results.atomic import atomic_write

KEY_FIELDS = [
    ("run_id", pa.string()),
    ("method", pa.string()),
    ("dataset", pa.string()),
    ("backbone", pa.string()),
    ("noise_protocol", pa.string()),
    ("noise_rate", pa.float64()),
    ("seed", pa.int64()),
]

_TABLE_FIELDS: dict[str, list[tuple[str, pa.DataType]]] = {
    "runs": [
        ("status", pa.string()),
        ("error", pa.string()),
        ("config", pa.string()),
        ("method_version", pa.string()),
        ("method_source", pa.string()),
        ("is_oracle", pa.bool_()),
        ("reads_noise_rate", pa.bool_()),  # Method.reads_noise_rate: told the configured noise rate (False before it)
        ("is_reference", pa.bool_()),
        ("role", pa.string()),  # Method.role (cirbench.results.roles): "" for none, null in runs written before it
        ("partitions", pa.bool_()),
        ("package_version", pa.string()),
        ("git_commit", pa.string()),
        ("package_versions", pa.string()),
        ("torch_version", pa.string()),
        ("device", pa.string()),
        # the kernels that computed the cell (cirbench.settings.kernels.cell_record; "" and 0 in runs written before them): the
        # CPU's model name, ATen's instruction set (what torch reports), torch's intra-op threads, and JSON of what each
        # library computed with ({"aten", "mkl", "onednn", "openblas", "numpy", "deterministic", "pinned"})
        ("cpu_model", pa.string()),
        ("cpu_isa", pa.string()),
        ("threads", pa.int64()),
        ("kernels", pa.string()),
        ("start_key", pa.string()),  # Backbone.start_key: the weights the fine-tune started from ("" before it was recorded)
        ("dataset_key", pa.string()),
        ("noise_manifest_hash", pa.string()),
        ("noise_manifest_path", pa.string()),
        ("eval_protocol", pa.string()),
        ("metrics_version", pa.string()),  # cirbench.engine.cell.evaluate.METRICS_VERSION ("1" in runs written before it)
        ("n_train", pa.int64()),
        ("n_noisy", pa.int64()),  # of the samples trained on (a held-out share excluded)
        ("holdout", pa.float64()),  # the share of the noisy training split held out (cirbench.data.noise.holdout)
        ("n_holdout", pa.int64()),
        ("epochs", pa.int64()),
        ("started", pa.string()),
        ("finished", pa.string()),
        ("wall_seconds", pa.float64()),
        ("steps", pa.int64()),
        ("model_seconds", pa.float64()),
        ("seconds_per_step", pa.float64()),
        ("n_dropped", pa.int64()),
        ("dropped_path", pa.string()),
        ("checkpoint_path", pa.string()),
        ("n_warnings", pa.int64()),
        ("collapsed", pa.bool_()),  # cirbench.results.collapse: a flag, not a failure
        ("collapse_reason", pa.string()),
        ("below_chance", pa.bool_()),  # cirbench.results.chance: the final kept set less clean than chance (a flag)
        ("below_chance_reason", pa.string()),
        ("n_nonfinite_queries", pa.int64()),  # final validation queries with a NaN or infinite score (misses)
        # a kept-set cell (cirbench.engine.planning.kept_plan), "" for any other: frontier, noise_type or replay; a reference
        # cell, never ranked nor read by a claim
        ("kept_set", pa.string()),
        ("kept_set_purity", pa.float64()),  # the frontier's purity (NaN for the others)
        ("kept_set_noise_type", pa.string()),  # the noise type cell's type
        ("kept_set_source", pa.string()),  # the run id a replay replays
        ("kept_set_source_sha256", pa.string()),  # that run's scores part as its runs row recorded it
        # that run's kept/dropped decisions per epoch, JSON {epoch: digest} (cirbench.results.replays); "" before it
        ("kept_set_source_decisions", pa.string()),
        ("parts", pa.string()),  # JSON {table: {rows, bytes, sha256}} of the other parts (cirbench.results.verify)
    ],
    "metrics": [
        ("epoch", pa.int64()),
        ("split", pa.string()),
        ("group", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("eval_protocol", pa.string()),
    ],
    "purity": [
        ("epoch", pa.int64()),
        ("score_name", pa.string()),
        ("noise_type", pa.string()),
        ("n_samples", pa.int64()),
        ("n_selected", pa.int64()),
        ("n_selected_clean", pa.int64()),
        ("n_selected_noisy", pa.int64()),
        ("purity", pa.float64()),
        ("clean_recall", pa.float64()),
        ("noise_recall", pa.float64()),
        ("auroc", pa.float64()),
    ],
    "scores": [
        ("sample_id", pa.string()),
        ("epoch", pa.int64()),
        ("score_name", pa.string()),
        ("score", pa.float64()),
        ("selected_clean", pa.bool_()),
        ("is_noisy", pa.bool_()),
        ("noise_type", pa.string()),
    ],
    "losses": [
        ("epoch", pa.int64()),
        ("step", pa.int64()),
        ("name", pa.string()),
        ("value", pa.float64()),
    ],
    "ranks": [  # every validation query's rank (cirbench.engine.cell.evaluate) at each epoch a selection rule picks
        ("epoch", pa.int64()),  # null in parts written before it was recorded: those hold the final epoch
        ("query", pa.int64()),
        ("group", pa.string()),
        ("rank", pa.int64()),
        ("subset_rank", pa.int64()),
        ("ties", pa.int64()),  # other gallery columns scored exactly as the target (cirbench.engine.cell.retrieval)
        ("subset_ties", pa.int64()),
    ],
}

MAIN_SCORE = "noise_score"
"""The ``score_name`` of a method's main per-sample score (``StepOutput.noise_score``); the
others are its ``extra_scores``. Parts written before the column existed read as this."""
_DEFAULTS: dict[str, object] = {"score_name": MAIN_SCORE, "n_nonfinite_queries": 0, "parts": "", "ties": 0, "subset_ties": 0,
                                "collapsed": False, "collapse_reason": "", "below_chance": False, "below_chance_reason": "",
                                "start_key": "", "holdout": 0.0, "n_holdout": 0, "role": "",
                                "reads_noise_rate": False, "metrics_version": "1", "kept_set": "",
                                "kept_set_purity": float("nan"), "kept_set_noise_type": "", "kept_set_source": "",
                                "kept_set_source_sha256": "", "kept_set_source_decisions": "",
                                "cpu_model": "", "cpu_isa": "", "threads": 0, "kernels": ""}
"""Values of columns a writer may leave out."""
_JUDGED_ON_READ: tuple[str, ...] = ("collapsed", "collapse_reason", "below_chance", "below_chance_reason")
"""The flags a run written before them lacks: it reads as not judged (null), and the reader
judges it from its tables (:func:`cirbench.report.analysis.loading.load.load_results`,
:func:`cirbench.results.chance.judge_below_chance`)."""
_READ_DEFAULTS: dict[str, object] = {k: v for k, v in _DEFAULTS.items() if k not in _JUDGED_ON_READ}
"""What parts written before a column existed read as (the flags: nothing)."""

SCHEMAS: dict[str, pa.Schema] = {name: pa.schema(KEY_FIELDS + fields) for name, fields in _TABLE_FIELDS.items()}
TABLES: tuple[str, ...] = tuple(SCHEMAS)
KEY_COLUMNS: list[str] = [name for name, _ in KEY_FIELDS]
assert set(verify.DATA_TABLES) == set(TABLES) - {"runs"}, "cirbench.results.verify.DATA_TABLES is out of date"


@dataclass(frozen=True)
class CellKey:
    """The identity of one cell of a grid; repeated in every row of every table."""

    run_id: str
    method: str
    dataset: str
    backbone: str
    noise_protocol: str
    noise_rate: float
    seed: int


def _with_keys(frame: pd.DataFrame, key: CellKey, table: str) -> pa.Table:
    frame = frame.copy()
    for column, value in asdict(key).items():
        frame[column] = value
    schema = SCHEMAS[table]
    for column, value in _DEFAULTS.items():
        if column in schema.names and column not in frame.columns:
            frame[column] = value
    missing = [f.name for f in schema if f.name not in frame.columns]
    if missing:
        raise ValueError(f"table {table!r} is missing columns {missing}")
    return pa.Table.from_pandas(frame[schema.names], schema=schema, preserve_index=False)


class ResultsFolderError(ValueError):
    """A results folder that cannot be written, or a part that cannot be read (named)."""


@dataclass(frozen=True)
class CellRecord:
    """A cell's record as found on disk: the ``runs`` status (None: no readable ``runs``
    part) and every problem of its parts (:func:`cirbench.results.verify.check_cell`)."""

    status: str | None
    problems: list[verify.Problem]

    @property
    def complete(self) -> bool:
        """Completed, with every part as recorded."""
        return self.status == "completed" and not self.problems


class ResultsStore:
    """Reads and writes the parquet tables under one output directory."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def part(self, table: str, run_id: str) -> Path:
        """The part file of ``run_id`` in ``table``."""
        return self.root / table / f"{run_id}.parquet"

    def status(self, run_id: str) -> str | None:
        """The recorded status of a run (``completed``, ``failed``), or None if never finished."""
        path = self.part("runs", run_id)
        if not path.exists():
            return None
        try:
            return str(pq.read_table(path, columns=["status"]).column("status")[0].as_py())
        except (OSError, pa.ArrowInvalid, IndexError):
            return None

    def check(self, run_id: str) -> CellRecord:
        """The cell's status and the problems of its record: a completed cell's parts
        against the hashes its ``runs`` row recorded, or the ``runs`` part's own problem."""
        row, problem = verify.read_runs_row(self.root, run_id)
        if problem is not None:
            return CellRecord(None, [problem])
        if row is None:
            return CellRecord(None, [])
        status = str(row.get("status"))
        return CellRecord(status, verify.check_cell(self.root, run_id, row) if status == "completed" else [])

    def is_complete(self, run_id: str) -> bool:
        """Whether the run completed and every part of it is as its ``runs`` row recorded."""
        return self.check(run_id).complete

    def set_aside(self, run_id: str) -> list[tuple[Path, Path]]:
        """Move every file of ``run_id`` under ``<root>/quarantine/`` (never deleted), so
        that it is redone; returns the (from, to) pairs."""
        return verify.quarantine(self.root, [run_id])

    def start_keys(self, backbone: str) -> set[str]:
        """The start keys (:meth:`cirbench.backbones.base.Backbone.start_key`) that the
        completed runs of ``backbone`` (its results label) recorded; runs written before the
        key was recorded add none."""
        runs = self.read("runs")
        done = runs[(runs["backbone"] == backbone) & (runs["status"] == "completed")]
        return {str(k) for k in done["start_key"] if k}

    def check_writable(self) -> None:
        """Write and remove a probe file in the folder (created if needed) and in each of
        its table folders; raises :class:`ResultsFolderError` naming the one that fails."""
        folders = [self.root] + [self.root / t for t in TABLES if (self.root / t).is_dir()]
        for folder in folders:
            try:
                folder.mkdir(parents=True, exist_ok=True)
                fd, name = tempfile.mkstemp(prefix=".cirbench-probe-", dir=folder)
                os.close(fd)
                os.unlink(name)
            except OSError as exc:
                raise ResultsFolderError(
                    f"results folder {self.root} cannot be written ({folder}: {exc.strerror or exc}); "
                    "choose another --output or fix its permissions. Nothing was run."
                ) from None

    def write_run(self, key: CellKey, run_row: dict, tables: dict[str, pd.DataFrame]) -> None:
        """Write one run's parts atomically: every data table first, the ``runs`` row last,
        with each part's row count, size and sha256 (and the checkpoint's) in its ``parts``.

        A failed run passes only the tables it has (possibly none); tables it lacks get an
        empty part so a stale part from an earlier attempt of the same run never survives.
        """
        parts: dict[str, dict] = {}
        for table in TABLES:
            if table == "runs":
                continue
            frame = tables.get(table)
            if frame is None or frame.empty:
                frame = pd.DataFrame(columns=[n for n, _ in _TABLE_FIELDS[table]])
            arrow = _with_keys(frame, key, table)

            def write(tmp: Path, arrow: pa.Table = arrow, table: str = table) -> None:
                pq.write_table(arrow, tmp)
                parts[table] = verify.part_record(tmp, arrow.num_rows)

            atomic_write(self.part(table, key.run_id), write)
        checkpoint = Path(run_row.get("checkpoint_path") or "")
        if run_row.get("checkpoint_path") and checkpoint.is_file():
            try:
                relative = checkpoint.resolve().relative_to(self.root.resolve())
            except ValueError:
                relative = None
            if relative is not None:
                parts[verify.CHECKPOINT] = {"file": relative.as_posix(), **verify.part_record(checkpoint, None)}
        arrow = _with_keys(pd.DataFrame([{**run_row, "parts": json.dumps(parts, sort_keys=True)}]), key, "runs")
        atomic_write(self.part("runs", key.run_id), lambda tmp: pq.write_table(arrow, tmp))

    def read(self, table: str, run_ids: list[str] | None = None) -> pd.DataFrame:
        """A whole table (every run's part, or those of ``run_ids`` that exist), or an empty
        frame with the table's columns. A part that cannot be read raises
        :class:`ResultsFolderError` naming it."""
        if table not in SCHEMAS:
            raise ValueError(f"unknown table {table!r}; tables are {', '.join(TABLES)}")
        directory = self.root / table
        if run_ids is None:
            paths = sorted(directory.glob("*.parquet")) if directory.is_dir() else []
        else:
            paths = [p for p in (self.part(table, r) for r in dict.fromkeys(run_ids)) if p.exists()]
        if not paths:
            return SCHEMAS[table].empty_table().to_pandas()
        try:  # a column a part lacks reads as null
            frame = pd.read_parquet([str(p) for p in paths], schema=SCHEMAS[table])
        except (OSError, pa.ArrowException) as exc:
            bad = next(((p, r) for p in paths if (r := verify.unreadable(p))), (directory, str(exc)))
            raise ResultsFolderError(
                f"{bad[0]}: unreadable part ({bad[1]}); `cirbench results verify --repair --results {self.root}` "
                "moves the damaged cells aside so that the next run redoes them"
            ) from None
        for column, value in _READ_DEFAULTS.items():
            if column in frame.columns and frame[column].isna().any():
                frame[column] = frame[column].fillna(value)
                if isinstance(value, int):  # bool is an int: a flag stays a flag
                    frame[column] = frame[column].astype(bool if isinstance(value, bool) else "int64")
        return frame
