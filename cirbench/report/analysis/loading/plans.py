"""A study's planned cells, kept in its results folder (``<results>/plans/<study>.parquet``)
so that a report knows which cells the study meant to run: a results folder alone cannot
tell two grids' variants of one method apart (``<method>:release`` on seeds 0-2 beside an
ablation ``<method>:<variant>`` on seeds 0-4), nor see a grid none of whose cells ever ran.
``cirbench study`` writes its plan before it runs a cell; the report lists every planned cell
without a completed run as missing, and expects a planned variant at its planned seeds only."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, fields
from pathlib import Path

import pandas as pd

from cirbench.results.atomic import atomic_write_parquet
from cirbench.results.store import CellKey

PLANS_FOLDER = "plans"
PLAN_COLUMNS: list[str] = [f.name for f in fields(CellKey) if f.name != "run_id"] + ["study"]
"""A cell's key (without its run id, which a later config may change) and the study that planned it."""


class PlanFileError(ValueError):
    """A plan file that cannot be read, or lacks a column: names the file."""


def write_plan(results: Path | str, study: str, keys: Iterable[CellKey]) -> Path:
    """Write the cells ``keys`` (reference rows, without a noise rate, left out) as the plan of
    the study named ``study`` under ``results``, replacing its earlier plan; the file's path."""
    rows = [{**asdict(k), "study": study} for k in keys if not math.isnan(k.noise_rate)]
    path = Path(results) / PLANS_FOLDER / f"{study}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_parquet(pd.DataFrame(rows, columns=PLAN_COLUMNS).astype({"noise_rate": float, "seed": int}).drop_duplicates(), path)
    return path


def read_plans(results: Path | str) -> pd.DataFrame:
    """Every study plan under ``results`` (:data:`PLAN_COLUMNS`; empty where none was
    written). Raises :class:`PlanFileError` naming a file that cannot be read or lacks a column."""
    frames = []
    for path in sorted((Path(results) / PLANS_FOLDER).glob("*.parquet")):
        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise PlanFileError(f"{path}: not a readable plan file ({exc})") from None
        lacking = [c for c in PLAN_COLUMNS if c not in frame.columns]
        if lacking:
            raise PlanFileError(f"{path}: a plan file needs the columns {', '.join(lacking)}")
        frames.append(frame[PLAN_COLUMNS])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=PLAN_COLUMNS)
