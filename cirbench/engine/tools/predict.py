"""``cirbench predict``: CIRR test1 submission files from a run saved with ``--save``.

The CIRR evaluation server takes two JSON files (the layout of the official
``cirr_test_submission`` scripts of CLIP4Cir, SPRC and BLIP4CIR):
``recall_submission_<name>.json`` = ``{"version": "rc2", "metric": "recall", "<pairid>":
[top-50 image names], ...}`` (ranked against every test1 image, the reference excluded)
and ``recall_subset_submission_<name>.json`` with ``"metric": "recall_subset"`` and the
top 3 of each query's ``img_set.members`` (reference excluded).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from cirbench.backbones.base import TextBatch
from cirbench.method.checkpoint import CheckpointError, load_method, read_checkpoint
from cirbench.data.base import CIRDataset
from cirbench.data.datasets.registry import DATASETS
from cirbench.engine.cell.features import image_tokens
from cirbench.engine.planning.kept_plan import perfect_filter_name
from cirbench.engine.cell.kept_sets import KeptRows, kept_set_trainer
from cirbench.engine.planning.spec import GridError, base_method
from cirbench.method import Method
from cirbench.plugins import Discovery, discover
from cirbench.results.atomic import atomic_write_text
from cirbench.results.labels import KEPT_SETS
from cirbench.results.store import ResultsStore

RECALL_TOP_K = 50
SUBSET_TOP_K = 3


@dataclass
class Submission:
    """The two prediction dicts (pairid -> ranked image names)."""

    recall: dict[str, list[str]]
    recall_subset: dict[str, list[str]]


@torch.no_grad()
def rank_test_queries(
    method: Method,
    dataset: CIRDataset,
    tokens: np.ndarray,
    texts: TextBatch,
    device: torch.device,
    top_k: int = RECALL_TOP_K,
    subset_k: int = SUBSET_TOP_K,
    chunk: int = 512,
) -> Submission:
    """Rank every query of ``dataset.val`` against the ``all`` gallery (reference excluded)
    and within its subset; sample ids are the pairids."""
    method.eval()
    split = dataset.val
    if split.subset is None:
        raise ValueError(f"{dataset.name}: the queries have no img_set members; cannot write recall_subset")
    gallery = np.asarray(dataset.gallery["all"])
    names = np.asarray(dataset.image_ids, dtype=object)[gallery]
    column = np.full(len(dataset.image_ids), -1, dtype=np.int64)
    column[gallery] = np.arange(len(gallery))

    def images(index: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.asarray(tokens[index], dtype=np.float32)).to(device)

    targets = torch.cat([method.encode_targets(images(gallery[s : s + chunk])) for s in range(0, len(gallery), chunk)])
    recall: dict[str, list[str]] = {}
    subset: dict[str, list[str]] = {}
    for start in range(0, len(split), chunk):
        part = np.arange(start, min(start + chunk, len(split)))
        queries = method.encode_queries(images(split.reference[part]), texts.select(torch.from_numpy(part)).to(device))
        scores = method.similarity(queries, targets).float().cpu()
        rows = torch.arange(len(part))
        ref_col = torch.from_numpy(column[split.reference[part]])
        has = ref_col >= 0
        scores[rows[has], ref_col[has]] = float("-inf")
        top = scores.topk(min(top_k, scores.shape[1]), dim=1)

        members = [[column[m] for m in split.subset[i] if m != split.reference[i] and column[m] >= 0] for i in part]
        cols = torch.full((len(part), max(1, max(len(m) for m in members))), -1, dtype=torch.long)
        for i, m in enumerate(members):
            cols[i, : len(m)] = torch.as_tensor(m, dtype=torch.long)
        sub_scores = scores.gather(1, cols.clamp(min=0)).masked_fill(cols < 0, float("-inf"))
        sub_top = sub_scores.topk(min(subset_k, cols.shape[1]), dim=1)
        sub_cols = cols.gather(1, sub_top.indices)

        for i, q in enumerate(part):
            pairid = split.sample_ids[q]
            keep = torch.isfinite(top.values[i])
            recall[pairid] = names[top.indices[i][keep].numpy()].tolist()
            subset[pairid] = names[sub_cols[i][sub_cols[i] >= 0].numpy()].tolist()
    return Submission(recall, subset)


def write_submission(submission: Submission, directory: Path, name: str) -> tuple[Path, Path]:
    """Write ``recall_submission_<name>.json`` and ``recall_subset_submission_<name>.json``."""
    paths = []
    for metric, predictions in (("recall", submission.recall), ("recall_subset", submission.recall_subset)):
        blob = {"version": "rc2", "metric": metric, **predictions}
        path = Path(directory) / f"{metric}_submission_{name}.json"
        atomic_write_text(json.dumps(blob, sort_keys=True), path)
        paths.append(path)
    return paths[0], paths[1]


def _check_record(checkpoint: Path, meta: dict) -> None:
    """Refuse a checkpoint whose run's record, in the results folder it lies in
    (``<results>/checkpoints/<run_id>.pt``), is damaged or not completed."""
    results = Path(checkpoint).resolve().parent.parent
    if not (results / "runs" / f"{meta['run_id']}.parquet").exists():
        return  # a checkpoint outside its results folder: nothing to check it against
    record = ResultsStore(results).check(meta["run_id"])
    if record.problems:
        raise CheckpointError(f"run {meta['run_id']} in {results} has a damaged record: "
                              + "; ".join(str(p) for p in record.problems))
    if record.status != "completed":
        raise CheckpointError(f"run {meta['run_id']} in {results} did not complete (status {record.status})")


def checkpoint_method_class(checkpoint: Path, meta: dict, discovery: Discovery) -> type[Method]:
    """The class that rebuilds the checkpoint's model: its method's, or for a kept-set cell
    (``frontier:p0.8``, ``replay:tme``) the perfect filter's class as that cell trained it."""
    label = str(meta["method"])
    try:
        if base_method(label) in KEPT_SETS:
            oracle = discovery.methods.get(perfect_filter_name(discovery.methods))
            return kept_set_trainer(oracle, KeptRows(), str(meta["method_name"]))
        return discovery.methods.get(base_method(label))
    except (KeyError, GridError) as exc:
        raise CheckpointError(f"{checkpoint}: cannot rebuild its method {label!r}: {exc}; if it is a plugin, pass "
                              "its file with --plugin") from None


def predict_cirr(
    checkpoint: Path,
    data_root: Path | None,
    cache_dir: Path,
    output: Path,
    device: str = "cpu",
    plugin_files: list[Path] | None = None,
    allow_missing: bool = False,
    announce: Callable[[str], None] = lambda message: None,
) -> tuple[Path, Path]:
    """Load a saved CIRR run and write its test1 submission files under ``output``."""
    meta, _ = read_checkpoint(checkpoint)
    _check_record(checkpoint, meta)
    if meta["dataset"] != "cirr":
        raise CheckpointError(f"{checkpoint} was trained on {meta['dataset']!r}; test submissions exist for CIRR only")
    plugins = list(plugin_files or []) + [Path(p) for p in meta.get("plugin_files", []) if Path(p).is_file()]
    discovery = discover(plugins)
    if discovery.errors:
        raise CheckpointError("; ".join(discovery.errors))
    method_cls = checkpoint_method_class(checkpoint, meta, discovery)
    torch_device = torch.device(device)
    loaded = load_method(checkpoint, method_cls, cache_dir, torch_device)
    root = data_root or (Path(meta["data_root"]) if meta.get("data_root") else None)
    test = DATASETS.get("cirr").load_test(cache_dir, root, options=meta.get("dataset_options") or {}, allow_missing=allow_missing)
    dropped = test.info.get("dropped", [])
    if dropped:
        announce(f"warning: {len(dropped)} test1 queries or images dropped (accepted with --allow-missing); "
                 "the submission is incomplete for those pairids")
    backbone = loaded.method.backbone
    tokens = image_tokens(test, backbone, cache_dir, torch_device, announce=announce)
    submission = rank_test_queries(loaded.method, test, tokens, backbone.tokenize(test.val.texts), torch_device)
    return write_submission(submission, output, meta["run_id"])
