"""The frozen-tower feature cache: patch tokens computed once per (dataset, tower) and
reused by every cell of a grid, stored as a ``.npy`` file that is memory-mapped on read so
a large dataset's cache never has to fit in memory. Also the two image accessors a cell
gives its method (:attr:`~cirbench.method.TrainingContext.pixels` and
:attr:`~cirbench.method.TrainingContext.encode_pixels`), for images a method builds."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from cirbench.backbones.base import Backbone
from cirbench.data.base import CIRDataset, ImageSource, TripletSplit
from cirbench.engine.cell.online import OnlineTokens
from cirbench.settings.kernels import signature

IMAGE_ROLES = ("reference", "target")


def cache_path(cache_dir: Path, dataset: CIRDataset, backbone: Backbone, device: torch.device | str = "cpu") -> Path:
    """Where the tokens of ``dataset``'s images under ``backbone``'s tower are cached, as the
    kernels that compute on ``device`` now write them (:func:`cirbench.settings.kernels.signature`:
    another thread count, unpinned kernels or another GPU write their own file, so a cell
    never reads tokens other kernels computed)."""
    return Path(cache_dir) / "features" / f"{dataset.key}--{backbone.tower_key()}--{signature(str(device))}.npy"


def encode_images(backbone: Backbone, dataset: CIRDataset, indices: np.ndarray, device: torch.device) -> torch.Tensor:
    """Frozen-tower tokens of the images at ``indices`` (computed now, not cached)."""
    pixels = backbone.preprocess([dataset.images.load(int(i)) for i in indices]).to(device)
    return backbone.encode_image_tokens(pixels).float().cpu()


def image_tokens(
    dataset: CIRDataset,
    backbone: Backbone,
    cache_dir: Path,
    device: torch.device = torch.device("cpu"),
    batch_size: int = 256,
    announce: Callable[[str], None] = lambda message: None,
) -> np.ndarray:
    """Tokens (N_images, P, D) for every image of ``dataset``, from the cache or computed
    now and cached (atomically, so a killed run never leaves a truncated cache)."""
    path = cache_path(cache_dir, dataset, backbone, device)
    if path.exists():
        try:
            return np.load(path, mmap_mode="r")
        except (ValueError, OSError) as exc:
            announce(f"feature cache {path} is unreadable ({exc}); recomputing it")
    n = len(dataset.image_ids)
    first = encode_images(backbone, dataset, np.arange(min(batch_size, n)), device).numpy()
    size = n * first[0].size * 4
    announce(f"caching frozen-tower tokens of {n} images: {n} x {tuple(first.shape[1:])} float32, {size / 2**20:.1f} MiB -> {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, *first.shape[1:]))
        out[: len(first)] = first
        for start in range(len(first), n, batch_size):
            index = np.arange(start, min(start + batch_size, n))
            out[index] = encode_images(backbone, dataset, index, device).numpy()
        out.flush()
        del out
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return np.load(path, mmap_mode="r")


class SamplePixels:
    """``TrainingContext.pixels`` of one cell: the tower input of the reference or target
    image of training samples of ``split`` (the noisy split the batches are made from)."""

    def __init__(self, split: TripletSplit, images: ImageSource, backbone: Backbone, device: torch.device) -> None:
        self.split, self.images, self.backbone, self.device = split, images, backbone, device

    def __call__(self, index: torch.Tensor, role: str) -> torch.Tensor:
        if role not in IMAGE_ROLES:
            raise ValueError(f"pixels: role must be one of {', '.join(IMAGE_ROLES)}, not {role!r}")
        image_ids = getattr(self.split, role)[np.asarray(index.detach().cpu(), dtype=np.int64).reshape(-1)]
        if (image_ids < 0).any():
            raise ValueError(f"pixels: some of these samples have no {role} image")
        return self.backbone.preprocess([self.images.load(int(i)) for i in image_ids]).to(self.device)


def pixel_encoder(backbone: Backbone, tokens: object) -> Callable[[torch.Tensor], torch.Tensor]:
    """``TrainingContext.encode_pixels`` for a cell whose batches read ``tokens``: online
    tokens come from the cell's own tower (its precision and sharding), so new pixels go
    through it too; the cache was written by the backbone class's plain float32 tower
    (:func:`image_tokens`, before the cell set its precision), so new pixels go through that."""
    online = isinstance(tokens, OnlineTokens)

    def encode(pixels: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out = backbone.encode_image_tokens(pixels) if online else type(backbone).encode_image_tokens(backbone, pixels)
        return out.float()

    return encode
