"""Validation: encode the queries and each gallery once, score them with the method's
similarity in chunks of queries, and turn target ranks into recall rows (and, for the
final evaluation of a cell, keep each query's ranks for the ``ranks`` table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import torch

from cirbench.backbones.base import TextBatch
from cirbench.data.base import CIRDataset, TripletSplit
from cirbench.engine.cell.retrieval import rank_and_ties, recall_at, subset_scores
from cirbench.method import Method
from cirbench.results.metrics import recall_name


METRICS_VERSION = "1"
"""The version of the metric code: the ranks, ties and recalls of this module and of
:mod:`cirbench.engine.cell.retrieval`, and the datasets' summary rows. Bump it with any change
that moves a metric: every run records it (``runs.metrics_version``) and a results folder's
finished cells measured under another version are refused, not reused
(:mod:`cirbench.engine.running.reuse`; docs/benchmark.md#run-ids). Runs written before it was
recorded read as version 1."""


def _encode_in_chunks(fn, n: int, chunk: int) -> torch.Tensor:
    return torch.cat([fn(slice(s, min(s + chunk, n))) for s in range(0, n, chunk)])


NO_SUBSET_RANK = -1
"""``subset_rank`` of a query whose protocol has no subset recall."""
RANK_COLUMNS: list[str] = ["query", "group", "rank", "subset_rank", "ties", "subset_ties"]
KeepTargets = Callable[[str, np.ndarray, torch.Tensor], None]
"""``keep(group, images, features)``: told the gallery features an evaluation encoded, per group."""


@dataclass
class Evaluation:
    """One evaluation: ``results`` (``{group: {metric: value}}``) and ``ranks``, one row per
    query (``query``: its position in the split, ``group``, ``rank``: the 0-based rank of
    its target in the group's gallery, a hit at K iff ``rank < K``; ``subset_rank``: the
    same within its subset, :data:`NO_SUBSET_RANK` where there is no subset recall;
    ``ties`` and ``subset_ties``: the columns scored exactly as the target, recall counting
    a tie at its expected value: :func:`~cirbench.engine.cell.retrieval.hit_probability`) and
    ``n_nonfinite_queries``, the queries with a NaN or infinite score (misses where the
    target's score is one)."""

    results: dict[str, dict[str, float]]
    ranks: pd.DataFrame
    n_nonfinite_queries: int = 0


def _subset_rank(scores: torch.Tensor, split: TripletSplit, part: np.ndarray, column: dict[int, int],
                 target_col: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rank and ties of each query of ``part`` within its subset (its members once each,
    without its reference), from its ``scores`` against the whole gallery (columns: ``column``)."""
    members = [split.subset[i] for i in part]
    width = max(len(m) for m in members)
    cols = torch.full((len(part), width), -1, dtype=torch.long)
    for i, m in enumerate(members):
        kept = [column.get(x, -1) for x in dict.fromkeys(map(int, m)) if x != int(split.reference[part[i]])]
        cols[i, : len(kept)] = torch.tensor(kept, dtype=torch.long)
    sub = subset_scores(scores, cols)
    position = (cols == target_col[:, None]).float().argmax(dim=1)
    found = (cols == target_col[:, None]).any(dim=1)
    return rank_and_ties(sub, torch.where(found, position, torch.full_like(position, -1)))


def _rank_frame(rows: np.ndarray, group: str, ranks: torch.Tensor, subset_ranks: torch.Tensor, ties: torch.Tensor,
                subset_ties: torch.Tensor) -> pd.DataFrame:
    """The ``ranks`` rows of one gallery group's queries (see :class:`Evaluation`)."""
    return pd.DataFrame({
        "query": rows.astype(np.int64), "group": group,
        "rank": ranks.numpy().astype(np.int64), "subset_rank": subset_ranks.numpy().astype(np.int64),
        "ties": ties.numpy().astype(np.int64), "subset_ties": subset_ties.numpy().astype(np.int64),
    })


@torch.inference_mode()
def evaluate(method: Method, dataset: CIRDataset, split: TripletSplit, tokens: np.ndarray, texts: TextBatch,
             device: torch.device, chunk: int = 512, gallery: dict[str, np.ndarray] | None = None,
             keep_targets: KeepTargets | None = None) -> Evaluation:
    """The recall rows (``.results``: ``{group: {metric: value}}``) and per-query ranks
    (``.ranks``) of ``split`` ranked against ``gallery`` (default ``dataset.gallery``).

    ``tokens`` are the frozen-tower tokens of every image of the dataset, ``texts`` the
    split's tokenised texts. Recall@K counts a query as a hit if fewer than K gallery images
    score strictly higher than its target, a tie at its expected value under a random
    tie-break, a non-finite target score as a miss; the reference is excluded from the ranking when
    the dataset's protocol says so. Subset recall (CIRR) ranks within each query's subset.
    ``keep_targets``, if given, is handed each group's gallery images and their features.
    """
    was_training = method.training
    method.eval()
    protocol = dataset.protocol
    groups = np.asarray(split.groups, dtype=object)
    results: dict[str, dict[str, float]] = {}
    rank_frames: list[pd.DataFrame] = []
    nonfinite = 0

    def image_batch(index: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.asarray(tokens[index], dtype=np.float32)).to(device)

    for group, images in (dataset.gallery if gallery is None else gallery).items():
        rows = np.flatnonzero(groups == group)
        if len(rows) == 0:
            continue
        images = np.asarray(images)
        targets = _encode_in_chunks(lambda s: method.encode_targets(image_batch(images[s])), len(images), chunk)
        if keep_targets is not None:
            keep_targets(str(group), images, targets)
        column = {int(image): col for col, image in enumerate(images)}
        ranks, subset_ranks = [], []
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            queries = method.encode_queries(image_batch(split.reference[part]), texts.select(torch.from_numpy(part)).to(device))
            scores = method.similarity(queries, targets).float().cpu()
            nonfinite += int((~torch.isfinite(scores)).any(dim=1).sum())
            target_col = torch.tensor([column.get(int(t), -1) for t in split.target[part]])
            exclude = torch.tensor([column.get(int(r), -1) for r in split.reference[part]]) if protocol.exclude_reference else None
            ranks.append(rank_and_ties(scores, target_col, exclude))
            if split.subset is not None and protocol.subset_recall_at:
                subset_ranks.append(_subset_rank(scores, split, part, column, target_col))
        all_ranks, all_ties = (torch.cat(t) for t in zip(*ranks))
        metrics = {recall_name(k): v for k, v in recall_at(all_ranks, protocol.recall_at, all_ties).items()}
        sub_ranks, sub_ties = ((torch.cat(t) for t in zip(*subset_ranks)) if subset_ranks
                               else (torch.full_like(all_ranks, NO_SUBSET_RANK), torch.zeros_like(all_ranks)))
        if subset_ranks:
            metrics.update({recall_name(k, subset=True): v
                            for k, v in recall_at(sub_ranks, protocol.subset_recall_at, sub_ties).items()})
        results[str(group)] = metrics
        rank_frames.append(_rank_frame(rows, str(group), all_ranks, sub_ranks, all_ties, sub_ties))
    if dataset.summarize is not None:
        results.update(dataset.summarize(results))
    method.train(was_training)
    ranks_table = pd.concat(rank_frames, ignore_index=True) if rank_frames else pd.DataFrame(columns=RANK_COLUMNS)
    return Evaluation(results, ranks_table, nonfinite)


def metrics_frame(results: dict[str, dict[str, float]], epoch: int, split: str, protocol: str) -> pd.DataFrame:
    """Long-format metrics rows: ``epoch, split, group, metric, value, eval_protocol``."""
    rows = [
        {"epoch": epoch, "split": split, "group": group, "metric": metric, "value": value, "eval_protocol": protocol}
        for group, metrics in results.items()
        for metric, value in metrics.items()
    ]
    return pd.DataFrame(rows)


class EvaluatedTargets:
    """``TrainingContext.evaluated_targets`` of one cell: the gallery features (the method's
    ``encode_targets``) that the held-out evaluation just encoded, looked up by training
    sample. The training gallery holds every training sample's target, so the epoch-level
    pass that follows the evaluation (TME's) may read its targets here instead of encoding
    them again with the same weights; the features are dropped before the next step."""

    def __init__(self, split: TripletSplit) -> None:
        self.groups = np.asarray(split.groups, dtype=object)
        self.target = np.asarray(split.target, dtype=np.int64)
        self.kept: dict[str, tuple[np.ndarray, np.ndarray, torch.Tensor]] = {}

    def keep(self, group: str, images: np.ndarray, features: torch.Tensor) -> None:
        """Keep a gallery group's ``images`` (ids) and their ``features`` (one row each)."""
        images = np.asarray(images, dtype=np.int64)
        order = np.argsort(images, kind="stable")
        self.kept[group] = (images[order], order, features)

    def clear(self) -> None:
        """Drop what was kept (the weights it was encoded with are about to change)."""
        self.kept = {}

    def __call__(self, index: torch.Tensor) -> torch.Tensor | None:
        """The kept features of the target of each training sample at ``index``, or None
        where one of them was not kept (no held-out evaluation since the last step)."""
        rows = np.asarray(index.detach().cpu(), dtype=np.int64).reshape(-1)
        found = []
        for group in dict.fromkeys(self.groups[rows]):
            if group not in self.kept:
                return None
            images, order, features = self.kept[group]
            mine = np.flatnonzero(self.groups[rows] == group)
            wanted = self.target[rows[mine]]
            at = np.searchsorted(images, wanted).clip(max=len(images) - 1)
            if not np.array_equal(images[at], wanted):
                return None
            found.append((mine, features[torch.from_numpy(order[at]).to(features.device)]))
        first = found[0][1]
        out = first.new_empty((len(rows), *first.shape[1:]))
        for mine, values in found:
            out[torch.from_numpy(mine).to(out.device)] = values
        return out


def keeps_exactly(device: torch.device) -> bool:
    """Whether features kept from an evaluation equal, bit for bit, those a method's own pass
    would encode on ``device``: they come from batches of another size and make-up, and only
    the CPU's kernels are checked to give each row the same bits in any batch
    (``tests/test_eval_cuts.py``); an accelerator's may pick another kernel for another size."""
    return device.type == "cpu"
