"""What a kept-set cell (:mod:`cirbench.engine.planning.kept_plan`) trains on, built when it runs, and
what trains it (docs/kept-sets.md):

- :func:`kept_rows`: the rows of the training split kept in each epoch. For a replay, the
  source run's ``scores`` table (its main score's ``selected_clean`` of each epoch; an epoch
  without one, such as TME's or HABIT's warm-up, keeps every row, as the baseline trains):
  a replay reads no ground truth. For the frontier and the noise types, the manifest's flags:
  every clean triplet plus, for the frontier at purity p, the first k of a seeded
  permutation of the noisy ones (k the count that makes the purity p, so that the kept sets
  of one seed are nested: p = 0.4 holds p = 0.6's noisy triplets), for a noise type every
  noisy triplet of that type; the same in every epoch.
- :func:`kept_set_trainer`: the perfect filter's class with a training step that takes its
  ``sprc_step`` on the kept rows of each batch (every target of the batch a negative), where
  the perfect filter takes it on the truly clean rows, and reports the kept rows as its
  kept set. It is given no noise flags (it is no oracle to the harness).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch

from cirbench.data.noise.injection import NoiseManifest
from cirbench.engine.planning.spec import KeptSet
from cirbench.method import Batch, Method, StepOutput
from cirbench.results.labels import FRONTIER, REPLAY
from cirbench.results.replays import decisions_digest, encoded
from cirbench.results.store import MAIN_SCORE, CellKey, ResultsStore
from cirbench.results.verify import read_runs_row, recorded_parts

FRONTIER_DRAW = 56
"""Beside the cell's seed, the seed of the frontier's draw of noisy triplets (``default_rng([seed, 56])``)."""


class KeptSetError(RuntimeError):
    """A kept-set cell that cannot be built: a replay whose source is not complete or was
    trained on another split, a frontier purity out of reach."""


@dataclass
class KeptRows:
    """The rows of the training split a kept-set cell keeps: ``by_epoch`` (epoch -> boolean
    mask in split order), else ``always`` (None: every row). A replay's: ``source_sha256``,
    its source ``scores`` part as its ``runs`` row recorded it; ``source_decisions``, the
    digest of the decisions replayed (:func:`cirbench.results.replays.decisions_digest`,
    JSON); ``privileged``, what the source read beside the data (``is_oracle``,
    ``reads_noise_rate``: the replay inherits the marks)."""

    by_epoch: dict[int, np.ndarray] = field(default_factory=dict)
    always: np.ndarray | None = None
    source_sha256: str = ""
    source_decisions: str = ""
    privileged: dict[str, bool] = field(default_factory=dict)

    def recorded(self) -> dict[str, Any]:
        """What a kept-set cell's ``runs`` row says of its rows: a replay's source's record and
        the source's marks (a mark the cell has already stands)."""
        if not self.source_decisions:
            return {}
        return {"kept_set_source_sha256": self.source_sha256, "kept_set_source_decisions": self.source_decisions}

    def at(self, epoch: int) -> np.ndarray | None:
        """The mask of ``epoch`` (None: every row)."""
        return self.by_epoch.get(epoch, self.always)


def frontier_rows(is_noisy: np.ndarray, purity: float, seed: int) -> np.ndarray:
    """Every clean sample and the first k noisy ones of a permutation seeded by ``seed``, k
    making the kept set's clean share ``purity`` (rounded to a whole sample)."""
    is_noisy = np.asarray(is_noisy, dtype=bool)
    noisy = np.flatnonzero(is_noisy)
    n_clean = int((~is_noisy).sum())
    k = int(round(n_clean * (1.0 - purity) / purity))
    if k > len(noisy):
        raise KeptSetError(f"a kept set of purity {purity:g} needs {k} noisy triplets beside the {n_clean} clean ones; "
                           f"the split has {len(noisy)} (its clean share {n_clean / max(1, len(is_noisy)):.3f} is above "
                           "the purity)")
    keep = ~is_noisy
    keep[np.random.default_rng([seed, FRONTIER_DRAW]).permutation(noisy)[:k]] = True
    return keep


def noise_type_rows(is_noisy: np.ndarray, noise_type: np.ndarray, kind: str) -> np.ndarray:
    """Every clean sample and the noisy samples of type ``kind``."""
    is_noisy = np.asarray(is_noisy, dtype=bool)
    return ~is_noisy | (np.asarray(noise_type, dtype=object) == kind)


def _describe(source: CellKey) -> str:
    return f"{source.run_id} ({source.method} at {source.noise_rate:g} noise, seed {source.seed})"


def replay_rows(source: CellKey, sample_ids: list[str], store: ResultsStore) -> KeptRows:
    """The kept set ``source`` recorded in each epoch (its ``scores`` table's main score's
    ``selected_clean``), as masks over ``sample_ids``; KeptSetError when the source is not
    complete in ``store`` or names other samples."""
    record = store.check(source.run_id)
    if not record.complete:
        state = "; ".join(str(p) for p in record.problems) or f"status {record.status or 'never run'}"
        raise KeptSetError(f"the replay's source run {_describe(source)} is not complete in {store.root} ({state}): run it "
                           "first (a grid runs its own sources before their replays)")
    scores = store.read("scores", [source.run_id])
    digest = encoded(decisions_digest(scores))
    scores = scores[(scores.score_name == MAIN_SCORE) & scores.selected_clean.notna()]
    position, by_epoch = pd.Index(sample_ids), {}
    for epoch, rows in scores.groupby("epoch"):
        where = position.get_indexer(rows.sample_id)
        if len(rows) != len(sample_ids) or (where < 0).any() or len(np.unique(where)) != len(where):
            raise KeptSetError(f"the kept set that {_describe(source)} recorded at epoch {epoch} is not over this cell's "
                               f"{len(sample_ids)} training triplets: the source was trained on another split")
        mask = np.zeros(len(sample_ids), dtype=bool)
        mask[where] = rows.selected_clean.to_numpy(dtype=bool)
        by_epoch[int(epoch)] = mask
    row, _ = read_runs_row(store.root, source.run_id)
    row = row or {}
    recorded = recorded_parts(row) or {}
    privileged = {flag: bool(row.get(flag)) for flag in ("is_oracle", "reads_noise_rate")}
    return KeptRows(by_epoch, None, str(recorded.get("scores", {}).get("sha256", "")), digest, privileged)


def kept_rows(kept: KeptSet, manifest: NoiseManifest, sample_ids: list[str], seed: int, store: ResultsStore) -> KeptRows:
    """The rows ``kept`` keeps of a training split (``sample_ids``, with its ``manifest``):
    the replayed run's record for a replay, the manifest's flags for the others."""
    if kept.kind == REPLAY:
        return replay_rows(kept.source, sample_ids, store)
    if kept.kind == FRONTIER:
        return KeptRows(always=frontier_rows(manifest.is_noisy, float(kept.purity), seed))
    return KeptRows(always=noise_type_rows(manifest.is_noisy, manifest.noise_type, kept.noise_type))


class KeptSetStep:
    """The training step of a kept-set cell, mixed in before the perfect filter's class
    (:func:`kept_set_trainer`): its ``sprc_step`` on the kept rows of the batch (every row
    in an epoch without a kept set), the kept rows reported as the kept set."""

    kept_rows: ClassVar[KeptRows]

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        """``sprc_step`` on the rows of ``batch`` kept in ``epoch`` (see the class docstring)."""
        rows = self.kept_rows.at(epoch)
        if rows is None:
            keep = torch.ones(len(batch), dtype=torch.bool, device=batch.index.device)
            out = self.sprc_step(batch)
        else:
            keep = torch.as_tensor(rows, device=batch.index.device)[batch.index]
            out = self.sprc_step(batch, rows=keep)
        out.selected_clean = keep
        return out


def kept_set_trainer(base: type[Method], rows: KeptRows, label: str) -> type[Method]:
    """``base`` (the perfect filter's class) training on ``rows`` instead of the truly clean
    rows, named ``label``: no oracle (given no flags), no role, a method that partitions."""
    attributes = {"name": label, "kept_rows": rows, "oracle": False, "partitions": True, "role": "",
                  "same_at_no_noise": "", "__module__": __name__}
    return type(f"KeptSet{base.__name__}", (KeptSetStep, base), attributes)


def kept_set_fields(kept: KeptSet | None) -> dict[str, Any]:
    """What a kept-set cell's ``runs`` row says of it (nothing for another cell): its kind,
    purity, noise type and source, no role, and an oracle's flag where the ground truth built it."""
    if kept is None:
        return {}
    return {"kept_set": kept.kind, "kept_set_purity": math.nan if kept.purity is None else float(kept.purity),
            "kept_set_noise_type": kept.noise_type, "kept_set_source": kept.source.run_id if kept.source else "",
            "is_oracle": kept.kind != REPLAY, "role": "", "partitions": True}
