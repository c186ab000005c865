"""A replay's binding to the kept sets it replayed (docs/kept-sets.md).

A replay (a kept-set cell of kind ``replay``) records in its ``runs`` row the digest of its
source's kept/dropped decisions, per epoch (``kept_set_source_decisions``: the boolean
partition each epoch of the source's ``scores`` part holds, by sample id; not its float
scores). Every reader checks it against what the source's record holds now
(:func:`stale_replay`): ``cirbench run`` redoes a stale replay, ``cirbench results verify``
reports it and exits non-zero, the report leaves it out of what a kept set is worth. A
source re-run to the same decisions (its floats a little different) leaves its replay
valid. A replay recorded before the digest was (the column empty) is checked as it was
then: against the sha256 of the source's ``scores`` part; one that records neither (written
by other tools) cannot be checked, and stands.

This module reads with pyarrow and pandas alone (no torch), like :mod:`cirbench.results.verify`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from cirbench.results.verify import read_runs_row, recorded_parts

REPLAY_KIND = "replay"
"""The ``kept_set`` of a replay (:data:`cirbench.results.labels.REPLAY`)."""
MAIN_SCORE_NAME = "noise_score"
"""The main score's ``score_name`` (:data:`cirbench.results.store.MAIN_SCORE`), whose ``selected_clean`` is the kept set."""


def decisions_digest(scores: pd.DataFrame) -> dict[str, str]:
    """Per epoch (as a string), the sha256 of the kept/dropped decisions a ``scores`` table
    holds: its main score's ``selected_clean``, ordered by sample id. Epochs without a
    decision are absent."""
    rows = scores[(scores.score_name.fillna(MAIN_SCORE_NAME) == MAIN_SCORE_NAME) & scores.selected_clean.notna()]
    digests = {}
    for epoch, group in rows.groupby("epoch"):
        group = group.sort_values("sample_id")
        digest = hashlib.sha256("\x1f".join(group.sample_id.astype(str)).encode())
        digest.update(b"\x00" + np.asarray(group.selected_clean, dtype=bool).tobytes())
        digests[str(int(epoch))] = digest.hexdigest()[:16]
    return digests


def encoded(digests: dict[str, str]) -> str:
    """``digests`` as the ``runs`` column holds them (JSON)."""
    return json.dumps(digests, sort_keys=True)


def source_decisions(root: Path, run_id: str) -> dict[str, str]:
    """The decisions' digest of ``run_id``'s ``scores`` part under ``root`` as it is now."""
    columns = ["sample_id", "epoch", "score_name", "selected_clean"]
    table = pq.read_table(root / "scores" / f"{run_id}.parquet")
    frame = table.select([c for c in columns if c in table.column_names]).to_pandas()
    if "score_name" not in frame.columns:
        frame["score_name"] = MAIN_SCORE_NAME
    return decisions_digest(frame)


def _source_complete(root: Path, run_id: str) -> dict | None:
    """The source's ``runs`` row when it is a completed run (its parts' hashes are the
    verifier's business), else None."""
    row, problem = read_runs_row(root, run_id)
    return row if problem is None and row is not None and row.get("status") == "completed" else None


def stale_replay(root: Path | str, run_id: str, row: dict | None = None) -> str | None:
    """Why the recorded replay ``run_id`` (its ``runs`` row, read unless given) no longer
    replays its source, or None: its source, completed under ``root``, now holds other
    kept/dropped decisions than those it replayed. Not a replay, the same decisions, or a
    source absent or not completed: None (the replay's record stands as it was made)."""
    root = Path(root)
    if row is None:
        row, _ = read_runs_row(root, run_id)
    if not row or row.get("kept_set") != REPLAY_KIND or not row.get("kept_set_source"):
        return None
    source = str(row["kept_set_source"])
    source_row = _source_complete(root, source)
    if source_row is None or not (root / "scores" / f"{source}.parquet").exists():
        return None
    recorded = str(row.get("kept_set_source_decisions") or "")
    if recorded:
        then, now = json.loads(recorded), source_decisions(root, source)
        changed = sorted(set(then) ^ set(now) | {e for e in set(then) & set(now) if then[e] != now[e]}, key=int)
        if not changed:
            return None
        return (f"stale replay: its source {source} was re-run since and now records other kept/dropped decisions at "
                f"epoch(s) {', '.join(changed)} than the replay {run_id} trained on")
    now_sha = str((recorded_parts(source_row) or {}).get("scores", {}).get("sha256", ""))
    then_sha = str(row.get("kept_set_source_sha256") or "")
    if not then_sha or now_sha == then_sha:  # nothing recorded to compare with: the record stands
        return None
    return (f"stale replay: its source {source} was re-run since and recorded another kept set (scores sha256 "
            f"{then_sha[:12]} when replayed, {now_sha[:12]} now; the replay {run_id} predates the decisions' digest)")


def stale_replays(root: Path | str, run_ids: list[str]) -> dict[str, str]:
    """The stale replays among ``run_ids`` under ``root`` (run id -> :func:`stale_replay`'s reason)."""
    found = {}
    for run_id in run_ids:
        reason = stale_replay(root, run_id)
        if reason:
            found[run_id] = reason
    return found
