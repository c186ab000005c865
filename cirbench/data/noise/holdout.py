"""The held-out noisy split: a share of the *noisy* training triplets, noise included, kept
out of training and evaluated after every epoch like validation, so that a model can be
selected without ever looking at the reported queries (``docs/selection.md``).

The held-out rows are drawn from the split's positions with ``(seed, HOLDOUT_STREAM)``,
so they are the same samples at every noise rate of a seed, and drawn after noise
injection, so they carry their noise as a user's own annotations would. Each held-out
triplet is a query (its reference and text, as annotated) whose answer is its target, as
annotated, ranked against the *training gallery*: per gallery group, every distinct image
the (noisy) training split uses as a reference or a target, held-out rows included. The
dataset's protocol applies (reference excluded where validation excludes it); a subset
recall is computed where the training split carries subsets (no shipped loader's does).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from cirbench.data.base import TripletSplit
from cirbench.data.noise.injection import NoiseManifest

HOLDOUT_STREAM = 0x401D
"""The second half of the holdout draw's seed, so it is independent of the noise draw."""
HOLDOUT_COLUMN = "held_out"
"""The manifest column naming the held-out samples (present only when a share is held out)."""


@dataclass
class HoldoutSplit:
    """A noisy training split cut in two: ``train`` (what the method sees), ``holdout``
    (the queries, noise included), the positions of each in the noisy split, the training
    gallery per group, and the full manifest with its :data:`HOLDOUT_COLUMN`."""

    train: TripletSplit
    holdout: TripletSplit
    train_rows: np.ndarray
    holdout_rows: np.ndarray
    gallery: dict[str, np.ndarray]
    manifest: NoiseManifest

    @property
    def train_manifest(self) -> NoiseManifest:
        """The manifest rows of the training part, in its order (what purity is computed on)."""
        table = self.manifest.table.iloc[self.train_rows].reset_index(drop=True)
        return replace(self.manifest, table=table)


def split_rows(split: TripletSplit, rows: np.ndarray) -> TripletSplit:
    """The triplets of ``split`` at positions ``rows``, every column (subsets, extras) kept."""
    rows = np.asarray(rows, dtype=np.int64)
    return TripletSplit(
        sample_ids=[split.sample_ids[i] for i in rows], reference=split.reference[rows],
        texts=[split.texts[i] for i in rows], target=split.target[rows],
        group=None if split.group is None else [split.group[i] for i in rows],
        subset=None if split.subset is None else [split.subset[i] for i in rows],
        extra={k: [v[i] for i in rows] for k, v in split.extra.items()},
    )


def training_gallery(split: TripletSplit) -> dict[str, np.ndarray]:
    """Per group, the sorted distinct images ``split`` uses as a reference or a target."""
    groups = np.asarray(split.groups, dtype=object)
    gallery = {}
    for group in dict.fromkeys(groups):
        own = groups == group
        images = np.concatenate([split.reference[own], split.target[own]])
        gallery[str(group)] = np.unique(images[images >= 0])
    return gallery


def hold_out(noisy: TripletSplit, manifest: NoiseManifest, share: float, seed: int) -> HoldoutSplit:
    """Hold out ``round(share * n)`` samples of the noisy split ``noisy`` (at least one, and
    at least one left to train on); ``manifest`` gains :data:`HOLDOUT_COLUMN`."""
    n = len(noisy)
    if not 0.0 < share < 1.0:
        raise ValueError(f"holdout share must be in (0, 1), got {share}")
    size = int(round(share * n))
    if not 1 <= size < n:
        raise ValueError(f"holdout share {share} of {n} training samples holds out {size}: need at least 1 and fewer than {n}")
    if len(manifest.table) != n:
        raise ValueError(f"the manifest has {len(manifest.table)} rows for a split of {n} samples")
    chosen = np.zeros(n, dtype=bool)
    chosen[np.random.default_rng([int(seed), HOLDOUT_STREAM]).choice(n, size=size, replace=False)] = True
    train_rows, holdout_rows = np.flatnonzero(~chosen), np.flatnonzero(chosen)
    table = manifest.table.copy()
    table[HOLDOUT_COLUMN] = chosen
    return HoldoutSplit(
        train=split_rows(noisy, train_rows), holdout=split_rows(noisy, holdout_rows), train_rows=train_rows,
        holdout_rows=holdout_rows, gallery=training_gallery(noisy), manifest=replace(manifest, table=table),
    )
