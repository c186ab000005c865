"""Small hand-made datasets for the core tests (no rendering, no cache)."""

from __future__ import annotations

import numpy as np

from cirbench.data.base import ArrayImages, CIRDataset, EvalProtocol, TripletSplit


def toy_dataset(n_train: int = 30, n_val: int = 6, duplicate_texts: bool = False) -> CIRDataset:
    """A dataset whose images are random 32x32 pixels; train sample i maps image 2i -> 2i+1."""
    rng = np.random.default_rng(0)
    n_images = 2 * (n_train + n_val)
    pixels = rng.integers(0, 255, size=(n_images, 32, 32, 3), dtype=np.uint8)
    ids = [f"img{i}" for i in range(n_images)]
    texts = [("same text" if duplicate_texts and i < 4 else f"change number {i}") for i in range(n_train)]
    train = TripletSplit(
        sample_ids=[f"t{i}" for i in range(n_train)],
        reference=np.arange(0, 2 * n_train, 2),
        texts=texts,
        target=np.arange(1, 2 * n_train, 2),
    )
    offset = 2 * n_train
    val = TripletSplit(
        sample_ids=[f"v{i}" for i in range(n_val)],
        reference=offset + np.arange(0, 2 * n_val, 2),
        texts=[f"val change {i}" for i in range(n_val)],
        target=offset + np.arange(1, 2 * n_val, 2),
    )
    return CIRDataset(
        name="toy", key="toy-v1", image_ids=ids, images=ArrayImages(pixels), train=train, val=val,
        gallery={"all": np.arange(offset, n_images)}, protocol=EvalProtocol("toy", exclude_reference=True),
    )
