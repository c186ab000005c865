"""Frozen-tower tokens without a cache: computed from the images whenever they are indexed.

The default (:mod:`cirbench.engine.cell.features`) caches every image's patch tokens once per
(dataset, tower). For a real tower that cache can be large (BLIP-2's ViT-g gives 257 x
1408 floats, about 1.4 MiB per image: some 100 GiB for FashionIQ), so the user can choose
``--features online`` instead: :class:`OnlineTokens` is a drop-in for the cache's array
(indexing, ``shape``, ``np.asarray``) that decodes the requested images in DataLoader
workers and runs the tower on the run's device each time. :func:`cache_bytes` is the
estimate a user needs to choose, and :func:`check_cache_fits` refuses a cache that the
disk cannot hold before any of it is computed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from cirbench.backbones.base import Backbone
from cirbench.data.base import CIRDataset, ImageSource

FEATURE_MODES = ("cache", "online")


class _Decoded(Dataset):
    """The images at ``indices``, decoded (by DataLoader workers when there are any)."""

    def __init__(self, images: ImageSource, indices: np.ndarray) -> None:
        self.images, self.indices = images, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.images.load(int(self.indices[i]))


def _as_list(batch: list[np.ndarray]) -> list[np.ndarray]:
    return batch


class OnlineTokens:
    """An array-like (N_images, P, D) float32 view of the frozen tower's tokens, computed
    on the backbone's device when indexed (see the module docstring)."""

    def __init__(self, dataset: CIRDataset, backbone: Backbone, workers: int = 0, batch_size: int = 128) -> None:
        if workers < 0:
            raise ValueError(f"decode workers must be >= 0, not {workers}")
        self.dataset, self.backbone = dataset, backbone
        self.workers, self.batch_size = workers, batch_size
        first = self._encode(np.zeros(1, dtype=np.int64))
        self.shape: tuple[int, ...] = (len(dataset.image_ids), *first.shape[1:])
        self.dtype = np.dtype(np.float32)
        self.ndim = 3

    def __len__(self) -> int:
        return self.shape[0]

    @torch.no_grad()
    def _encode(self, indices: np.ndarray) -> np.ndarray:
        loader = DataLoader(_Decoded(self.dataset.images, indices), batch_size=self.batch_size,
                            num_workers=self.workers, collate_fn=_as_list,
                            generator=torch.Generator().manual_seed(0))  # leave the global random stream alone
        device = next(self.backbone.parameters()).device  # wherever the backbone is now
        parts = [
            self.backbone.encode_image_tokens(self.backbone.preprocess(images).to(device)).float().cpu().numpy()
            for images in loader
        ]
        return np.concatenate(parts)

    def __getitem__(self, index: Any) -> np.ndarray:
        requested = np.asarray(index, dtype=np.int64)
        flat = requested.reshape(-1)
        if flat.size and (flat.min() < -len(self) or flat.max() >= len(self)):
            raise IndexError(f"image index out of range for {len(self)} images")
        unique, inverse = np.unique(flat % len(self), return_inverse=True)
        tokens = self._encode(unique)[inverse] if unique.size else np.zeros((0, *self.shape[1:]), np.float32)
        return tokens.reshape(*requested.shape, *self.shape[1:])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        tokens = self[np.arange(len(self))]
        return tokens if dtype is None else tokens.astype(dtype)


def cache_bytes(dataset: CIRDataset, backbone: Backbone) -> int:
    """The size of ``dataset``'s token cache under ``backbone``'s tower (one image encoded)."""
    one = OnlineTokens(dataset, backbone)
    return int(np.prod(one.shape)) * one.dtype.itemsize


def check_cache_fits(dataset: CIRDataset, backbone: Backbone, cache_dir: Path, reserve: float = 1.1) -> int:
    """The cache's size in bytes; raise before computing it if ``cache_dir``'s disk lacks
    room for it (with a 10% reserve), naming ``--features online`` as the way out."""
    size = cache_bytes(dataset, backbone)
    directory = Path(cache_dir)
    directory.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(directory).free
    if size * reserve > free:
        raise OSError(
            f"the frozen-tower feature cache of {dataset.name} under {backbone.tower_key()} needs {size / 2**30:.1f} GiB "
            f"but {directory} has {free / 2**30:.1f} GiB free; free some space, use another --cache-dir, or run with "
            "--features online (tokens computed from the images at every step, no cache)"
        )
    return size
