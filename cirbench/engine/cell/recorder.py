"""What a cell's training records (:class:`EpochRecorder`): every step's losses and, per
epoch, the validation metrics and the method's per-sample view, with its clean-set purity
(ConeSep, Appendix C.3) and noise-detection quality per noise type (:func:`purity_rows`)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import roc_auc_score

from cirbench.data.base import TripletSplit
from cirbench.data.noise.injection import NoiseManifest
from cirbench.engine.cell import distributed
from cirbench.engine.cell.evaluate import Evaluation, metrics_frame
from cirbench.method import Partition, StepOutput
from cirbench.results.selection import selected_epochs
from cirbench.results.store import MAIN_SCORE

ProgressFn = Callable[[dict], None]
"""What a cell reports after each step and each epoch's validation (a dict of the loop's progress)."""


def _auroc(score: np.ndarray, positive: np.ndarray) -> float:
    if positive.all() or not positive.any() or not np.isfinite(score).all():
        return float("nan")
    return float(roc_auc_score(positive, score))


def purity_rows(
    selected_clean: np.ndarray | None,
    noise_score: np.ndarray | None,
    is_noisy: np.ndarray,
    noise_type: np.ndarray,
) -> pd.DataFrame:
    """One row for all samples and one per noise type present in the data.

    ``all``: ``n_selected`` kept as clean, of which ``n_selected_clean`` truly clean
    ("Real Positive") and ``n_selected_noisy`` truly noisy ("Wrong Positive"); ``purity`` =
    clean share of the kept set; ``clean_recall`` = share of clean samples kept;
    ``noise_recall`` = share of noisy samples caught (not kept); ``auroc`` of the noise score
    against the true flag. A noise-type row restricts the counts to samples of that type and
    computes its AUROC on the clean samples plus that type (clean vs this kind of noise).
    ``selected_clean`` None (a method that only scores) leaves the count columns empty.
    """
    is_noisy = np.asarray(is_noisy, dtype=bool)
    noise_type = np.asarray(noise_type, dtype=object)
    clean = ~is_noisy
    rows = []
    types = ["all"] + [t for t in ("reference", "caption", "target") if (noise_type == t).any()]
    types += sorted(set(noise_type[is_noisy]) - set(types))
    for kind in types:
        members = np.ones_like(is_noisy) if kind == "all" else noise_type == kind
        roc_members = members if kind == "all" else (members | clean)
        row: dict[str, float | int | str] = {"noise_type": kind, "n_samples": int(members.sum())}
        if selected_clean is not None:
            kept = np.asarray(selected_clean, dtype=bool) & members
            n_sel = int(kept.sum())
            n_sel_clean = int((kept & clean).sum())
            n_noisy = int((members & is_noisy).sum())
            n_clean = int((members & clean).sum())
            row.update(
                n_selected=n_sel,
                n_selected_clean=n_sel_clean,
                n_selected_noisy=n_sel - n_sel_clean,
                purity=n_sel_clean / n_sel if n_sel else float("nan"),
                clean_recall=n_sel_clean / n_clean if n_clean else float("nan"),
                noise_recall=1.0 - (n_sel - n_sel_clean) / n_noisy if n_noisy else float("nan"),
            )
        else:
            row.update(n_selected=None, n_selected_clean=None, n_selected_noisy=None,
                       purity=float("nan"), clean_recall=float("nan"), noise_recall=float("nan"))
        row["auroc"] = (
            _auroc(np.asarray(noise_score, dtype=float)[roc_members], is_noisy[roc_members])
            if noise_score is not None
            else float("nan")
        )
        rows.append(row)
    frame = pd.DataFrame(rows)
    counts = ["n_selected", "n_selected_clean", "n_selected_noisy"]
    frame[counts] = frame[counts].astype("Int64")
    return frame


def noise_tables(
    epoch: int,
    score_name: str,
    selected: np.ndarray | None,
    score: np.ndarray | None,
    sample_ids: list[str],
    is_noisy: np.ndarray,
    noise_type: np.ndarray,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``purity`` and ``scores`` rows of one epoch's per-sample view under ``score_name``
    (``selected`` None: no partition; ``score`` None: no score)."""
    n = len(sample_ids)
    rows = purity_rows(selected, score, is_noisy, noise_type)
    rows.insert(0, "epoch", epoch)
    rows.insert(1, "score_name", score_name)
    per_sample = pd.DataFrame({
        "sample_id": sample_ids, "epoch": epoch, "score_name": score_name,
        "score": score if score is not None else np.full(n, np.nan),
        "selected_clean": selected if selected is not None else pd.array([pd.NA] * n, dtype="boolean"),
        "is_noisy": is_noisy, "noise_type": noise_type,
    })
    return rows, per_sample


def _on_cpu(values) -> np.ndarray:
    """A partition's array (numpy, a list, or a tensor on any device: checked) as a numpy copy."""
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy().copy()
    return np.array(values)


def _record_extra_scores(out: StepOutput, index: np.ndarray, extra: dict[str, np.ndarray], n: int) -> None:
    """Copy a step's ``extra_scores`` (checked: :mod:`cirbench.engine.cell.step_rules`) into the
    epoch's per-name arrays (NaN where unseen)."""
    for name, values in out.extra_scores.items():
        extra.setdefault(name, np.full(n, np.nan))[index] = values.detach().float().cpu().numpy()


class EpochRecorder:
    """The bookkeeping of one cell's training: every step's losses and, per epoch, the
    validation metrics and the method's per-sample view (``purity`` and ``scores`` rows of
    its main noise score and of each extra score, and the held-out split's metrics where
    there is one); reports progress after each step and each epoch's validation. The tables
    of :class:`TrainResult` come from here."""

    def __init__(self, noisy_train: TripletSplit, manifest: NoiseManifest, protocol: str, total_steps: int,
                 progress: ProgressFn, parallel: bool) -> None:
        self.n, self.sample_ids = len(noisy_train), noisy_train.sample_ids
        self.is_noisy, self.noise_type = manifest.is_noisy, manifest.noise_type
        self.protocol, self.total_steps, self.progress, self.parallel = protocol, total_steps, progress, parallel
        self.losses: list[dict] = []
        self.metrics: list[pd.DataFrame] = []
        self.purity: list[pd.DataFrame] = []
        self.scores: list[pd.DataFrame] = []
        self.final: dict[str, dict[str, float]] = {}
        self.epoch_ranks: dict[int, pd.DataFrame] = {}
        self.nonfinite = 0

    def start_epoch(self, partition: Partition | None) -> None:
        """Begin an epoch from the method's epoch-level ``partition`` (checked against the
        contract: a boolean mask and a float score per sample; or none: per-step views)."""
        n = self.n
        self.score = np.full(n, np.nan) if partition is None else _on_cpu(partition.noise_score).astype(float)
        self.selected = None if partition is None else _on_cpu(partition.selected_clean)
        self.seen_selected = np.zeros(n, dtype=bool) if partition is None else np.ones(n, dtype=bool)
        self.extra: dict[str, np.ndarray] = {}

    def decided(self) -> tuple[int, int]:
        """The rows the method has decided on so far this epoch (its partition's, then its
        steps' last decisions) and how many of those it kept."""
        if self.selected is None:
            return 0, 0
        return int(self.seen_selected.sum()), int(self.selected[self.seen_selected].sum())

    def record_step(self, epoch: int, step: int, index: np.ndarray, out: StepOutput) -> None:
        """A step's per-sample view of its batch ``index`` and its losses, as the step gave them
        (checked against the contract before: :mod:`cirbench.engine.cell.step_rules`; nothing is cast)."""
        if out.noise_score is not None:
            self.score[index] = out.noise_score.detach().float().cpu().numpy()
        if out.selected_clean is not None:
            if self.selected is None:
                self.selected = np.ones(self.n, dtype=bool)
            self.selected[index] = out.selected_clean.detach().cpu().numpy()
            self.seen_selected[index] = True
        _record_extra_scores(out, index, self.extra, self.n)
        self.losses.append({"epoch": epoch, "step": step, "name": "total", "value": float(out.loss.detach())})
        self.losses.extend({"epoch": epoch, "step": step, "name": k, "value": float(v)} for k, v in out.components.items())
        self.progress({"epoch": epoch, "step": step, "total_steps": self.total_steps, "loss": float(out.loss.detach())})

    def end_epoch(self, epoch: int, step: int, evaluation: Evaluation, held_out: Evaluation | None = None) -> None:
        """The epoch's validation ``evaluation``, its ``held_out`` one (if any) and its
        per-sample views (a view is recorded only where every sample has a value)."""
        results = evaluation.results
        if self.parallel:
            distributed.check_same_on_all_ranks(self.score, "per-sample noise scores")
            for name in sorted(self.extra):
                distributed.check_same_on_all_ranks(self.extra[name], f"per-sample {name} scores")
        self.final, self.nonfinite = results, evaluation.n_nonfinite_queries
        self.epoch_ranks[epoch] = evaluation.ranks
        self.metrics.append(metrics_frame(results, epoch, "val", self.protocol))
        if held_out is not None:
            self.metrics.append(metrics_frame(held_out.results, epoch, "holdout", self.protocol))
        has_partition = self.selected is not None and self.seen_selected.all()
        has_scores = bool(np.isfinite(self.score).all())
        views = []  # (score name, partition, score) recorded for this epoch
        if has_partition or has_scores:
            views.append((MAIN_SCORE, self.selected if has_partition else None, self.score if has_scores else None))
        views += [(name, None, values) for name, values in sorted(self.extra.items()) if np.isfinite(values).all()]
        for name, kept, values in views:
            rows, per_sample = noise_tables(epoch, name, kept, values, self.sample_ids, self.is_noisy, self.noise_type)
            self.purity.append(rows)
            self.scores.append(per_sample)
        self.progress({"epoch": epoch, "step": step, "total_steps": self.total_steps, "recall": results})

    def tables(self) -> dict[str, pd.DataFrame]:
        """The ``losses``, ``metrics``, ``purity`` and ``scores`` tables, and the ``ranks`` of
        the epochs a selection rule picks (:mod:`cirbench.results.selection`), each once."""
        def concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
            return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

        metrics = concat(self.metrics)
        kept = sorted({e for e in selected_epochs(metrics).values() if e is not None}) if len(metrics) else []
        ranks = concat([self.epoch_ranks[e].assign(epoch=e) for e in kept])
        return {"losses": pd.DataFrame(self.losses), "metrics": metrics, "purity": concat(self.purity),
                "scores": concat(self.scores), "ranks": ranks}
