"""The results store: six parquet tables, each a directory of one part file per run.

``<root>/<table>/<run_id>.parquet`` for ``table`` in :data:`TABLES`; read a whole table with
``pandas.read_parquet("<root>/<table>")``. A run's parts are written atomically, the
``runs`` part last, so a ``runs`` row with status ``completed`` means every other part of
that run is in place: that is what lets a rerun of a grid skip finished cells, and a
killed run leave earlier cells untouched.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

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
        ("is_reference", pa.bool_()),
        ("partitions", pa.bool_()),
        ("package_version", pa.string()),
        ("git_commit", pa.string()),
        ("package_versions", pa.string()),
        ("torch_version", pa.string()),
        ("device", pa.string()),
        ("dataset_key", pa.string()),
        ("noise_manifest_hash", pa.string()),
        ("noise_manifest_path", pa.string()),
        ("eval_protocol", pa.string()),
        ("n_train", pa.int64()),
        ("n_noisy", pa.int64()),
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
        ("collapsed", pa.bool_()),  # cirbench.engine.collapse: a flag, not a failure
        ("collapse_reason", pa.string()),
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
    "ranks": [  # the final evaluation's rank of every validation query (cirbench.engine.evaluate)
        ("query", pa.int64()),
        ("group", pa.string()),
        ("rank", pa.int64()),
        ("subset_rank", pa.int64()),
    ],
}

MAIN_SCORE = "noise_score"
"""The ``score_name`` of a method's main per-sample score (``StepOutput.noise_score``); the
others are its ``extra_scores``. Parts written before the column existed read as this."""
_DEFAULTS: dict[str, object] = {"score_name": MAIN_SCORE, "collapsed": False, "collapse_reason": ""}
"""Values of columns a writer may leave out."""
_READ_DEFAULTS: dict[str, object] = {"score_name": MAIN_SCORE}
"""What parts written before a column existed read as. The collapse flag has none: a run
written before the guard reads as not judged (null), and the report judges it from its
tables (:func:`cirbench.report.load.load_results`)."""

SCHEMAS: dict[str, pa.Schema] = {name: pa.schema(KEY_FIELDS + fields) for name, fields in _TABLE_FIELDS.items()}
TABLES: tuple[str, ...] = tuple(SCHEMAS)
KEY_COLUMNS: list[str] = [name for name, _ in KEY_FIELDS]


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

    def is_complete(self, run_id: str) -> bool:
        """Whether every part of ``run_id`` was written and the run completed."""
        return self.status(run_id) == "completed"

    def write_run(self, key: CellKey, run_row: dict, tables: dict[str, pd.DataFrame]) -> None:
        """Write one run's parts atomically: every data table first, the ``runs`` row last.

        A failed run passes only the tables it has (possibly none); tables it lacks get an
        empty part so a stale part from an earlier attempt of the same run never survives.
        """
        for table in TABLES:
            if table == "runs":
                continue
            frame = tables.get(table)
            if frame is None or frame.empty:
                frame = pd.DataFrame(columns=[n for n, _ in _TABLE_FIELDS[table]])
            arrow = _with_keys(frame, key, table)
            atomic_write(self.part(table, key.run_id), lambda tmp, arrow=arrow: pq.write_table(arrow, tmp))
        arrow = _with_keys(pd.DataFrame([run_row]), key, "runs")
        atomic_write(self.part("runs", key.run_id), lambda tmp: pq.write_table(arrow, tmp))

    def read(self, table: str) -> pd.DataFrame:
        """A whole table (every run's part), or an empty frame with the table's columns."""
        if table not in SCHEMAS:
            raise ValueError(f"unknown table {table!r}; tables are {', '.join(TABLES)}")
        directory = self.root / table
        if not directory.is_dir() or not any(directory.glob("*.parquet")):
            return SCHEMAS[table].empty_table().to_pandas()
        frame = pd.read_parquet(directory, schema=SCHEMAS[table])  # a column a part lacks reads as null
        for column, value in _READ_DEFAULTS.items():
            if column in frame.columns:
                frame[column] = frame[column].fillna(value)
        return frame
