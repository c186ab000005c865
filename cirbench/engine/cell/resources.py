"""What the cells of one grid share in a process: the dataset, loaded once (the samples it
dropped under ``--allow-missing`` listed beside the results), the frozen-tower tokens,
cached on disk and in memory (or computed on the fly with ``--features online``), and the
start they fine-tune from, checked against the results folder.

The start. Two caches of the same backbone can hold different pre-trained starts (the
``tiny`` start once came out differently on one thread and on two; it is now released as a
file, but ``stage1`` is still pre-trained on first use), and two cirbench releases may ship
two starts; a grid's numbers mean something only against cells from the same start. Every
cell records its backbone's :meth:`~cirbench.backbones.base.Backbone.start_key` in
``runs``; a grid refuses a results folder whose completed runs of the same backbone record
another one.

A profiler watches the cells' training through :attr:`CellResources.hooks`
(:mod:`cirbench.engine.cell.hooks`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from cirbench.backbones.registry import BACKBONES
from cirbench.data.base import CIRDataset
from cirbench.data.datasets.registry import DATASETS
from cirbench.engine.cell.distributed import is_main_process, main_process_first
from cirbench.engine.cell.features import cache_path, image_tokens
from cirbench.engine.cell.hooks import TrainingHooks
from cirbench.engine.cell.online import OnlineTokens, check_cache_fits
from cirbench.engine.planning.spec import GridSpec
from cirbench.results.atomic import atomic_write_text
from cirbench.results.store import ResultsStore


def pooled_features(tokens: np.ndarray) -> np.ndarray:
    """One pooled frozen-tower feature per image (a noise protocol's ``context.image_features()``)."""
    return np.asarray(tokens, dtype=np.float32).mean(axis=1)


class CellResources:
    """The spec, the results store, the dataset and the tower tokens a grid's cells read."""

    def __init__(self, spec: GridSpec, store: ResultsStore) -> None:
        self.spec = spec
        self.store = store
        self._dataset: CIRDataset | None = None
        self._tokens: dict[str, np.ndarray] = {}
        self.dropped_path: Path | None = None
        self.hooks = TrainingHooks()
        """The training loop's events of every cell run with these resources (none by default)."""

    def dataset(self) -> CIRDataset:
        """The grid's dataset, loaded once."""
        if self._dataset is None:
            spec = self.spec
            self._dataset = DATASETS.get(spec.dataset)(
                spec.cache_dir, spec.data_root, options=spec.dataset_options, allow_missing=spec.allow_missing)
            dropped = self._dataset.info.get("dropped")
            if dropped:  # accepted with --allow-missing: list them beside the results
                self.dropped_path = spec.output / "dropped" / f"{self._dataset.key}.json"
                record = {"dataset": spec.dataset, "dataset_key": self._dataset.key, "data_root": str(spec.data_root or ""),
                          "problems": self._dataset.info.get("problems", []), "dropped": dropped}
                if is_main_process():
                    atomic_write_text(json.dumps(record, indent=1), self.dropped_path)
        return self._dataset

    def tokens(self, backbone, announce: Callable[[str], None]) -> np.ndarray:
        """The frozen-tower tokens of every image: cached on disk (after checking that the
        cache fits) and in memory, or computed on the fly with ``features="online"``."""
        spec = self.spec
        backbone.to(torch.device(spec.device))  # the tower runs where the cell will
        if spec.features == "online":  # no cache: tokens computed from the images when indexed
            return OnlineTokens(self.dataset(), backbone, workers=spec.decode_workers)
        key = backbone.tower_key()
        if key not in self._tokens:
            if not cache_path(spec.cache_dir, self.dataset(), backbone, spec.device).exists():
                announce(f"feature cache: {check_cache_fits(self.dataset(), backbone, spec.cache_dir) / 2**30:.2f} GiB to write")
            with main_process_first():  # under torchrun, rank 0 builds the cache and the others read it
                self._tokens[key] = image_tokens(self.dataset(), backbone, spec.cache_dir, torch.device(spec.device),
                                                 announce=announce)
        return self._tokens[key]

    def prepare_caches(self, announce: Callable[[str], None] = print) -> None:
        """Build what every cell reads (the data, the start, the tower tokens) here, so that
        worker processes only read them, also when the recorded reference rows are skipped."""
        spec = self.spec
        self.tokens(BACKBONES.get(spec.backbone)(spec.seeds[0], spec.cache_dir, spec.weights), announce)


class StartMismatchError(ValueError):
    """The results folder holds runs of the same backbone fine-tuned from another start:
    their numbers cannot be pooled with this grid's."""


def check_start(store: ResultsStore, label: str, backbone, cache_dir: Path, recorded: set[str] | None = None) -> str:
    """``backbone``'s start key, once ``store`` is known to hold no completed run of the
    backbone labelled ``label`` from another start (:class:`StartMismatchError` if it does);
    ``recorded``: the store's start keys of ``label`` when already read."""
    key = backbone.start_key()
    others = sorted((store.start_keys(label) if recorded is None else recorded) - {key})
    if others:
        origin = getattr(backbone, "start_origin", "") or f"from the caches in {cache_dir}"
        raise StartMismatchError(
            f"results folder {store.root} holds runs of {label} fine-tuned from another start "
            f"({', '.join(others)}; this grid's is {key}, {origin}): their numbers cannot be pooled. "
            "Run with the start those runs used (the --cache-dir of a start pre-trained on first use; the cirbench "
            "release of a shipped start), or write to another --output."
        )
    return key


def refuse_another_start(store: ResultsStore, label: str, backbone: str, seed: int, cache_dir: Path, weights: str | None) -> None:
    """:func:`check_start` before any cell runs, building the backbone (``backbone``,
    ``seed``, ``weights``) only when ``store`` already records a start for it."""
    recorded = store.start_keys(label)
    if recorded:
        check_start(store, label, BACKBONES.get(backbone)(seed, cache_dir, weights), cache_dir, recorded)
