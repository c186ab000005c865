"""An example dataset plugin: ``squares``, a tiny generated benchmark (no files, no download).

Every image is one coloured square on a grey 32x32 canvas, at one of four positions. A
triplet's reference is a square, its text names a change of colour ("make it blue") and its
target is the same square in that colour: a query is solved only by reading the text. Run
it with ``cirbench run --plugin docs/examples/squares.py --dataset squares --epochs 1``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Mapping

import numpy as np

from cirbench.data.base import ArrayImages, CIRDataset, EvalProtocol, TripletSplit
from cirbench.data.loader import DatasetLoader

COLOURS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 70, 220), "yellow": (230, 210, 40),
           "purple": (150, 50, 190), "orange": (240, 140, 30)}
CORNERS = ((2, 2), (2, 18), (18, 2), (18, 18))
VERSION = "1"


def square(colour: str, corner: tuple[int, int], size: int) -> np.ndarray:
    """A 32x32 RGB image (uint8): a ``size`` x ``size`` square of ``colour`` at ``corner``."""
    image = np.full((32, 32, 3), 128, dtype=np.uint8)
    row, col = corner
    image[row:row + size, col:col + size] = COLOURS[colour]
    return image


def split(name: str, images: list[tuple[str, tuple[int, int], int]], rng: np.random.Generator, n: int,
          offset: int) -> TripletSplit:
    """``n`` triplets over ``images`` (indices shifted by ``offset``): a square, a new colour, that square recoloured."""
    index = {spec: offset + i for i, spec in enumerate(images)}
    refs, texts, targets = [], [], []
    for _ in range(n):
        colour, corner, size = images[int(rng.integers(len(images)))]
        new = str(rng.choice([c for c in COLOURS if c != colour]))
        refs.append(index[(colour, corner, size)])
        texts.append(f"make it {new}")
        targets.append(index[(new, corner, size)])
    return TripletSplit([f"{name}-{i}" for i in range(n)], np.array(refs), texts, np.array(targets))


class Squares(DatasetLoader):
    """The ``squares`` benchmark (see the module docstring): generated, so no options and no files."""

    name = "squares"
    description = "example plugin: coloured squares, recolour queries (docs/adding-a-dataset.md)"
    n_train, n_val = 400, 60

    def key(self) -> str:
        """The content key: everything that changes the generated data."""
        text = f"squares-v{VERSION}-{self.n_train}-{self.n_val}"
        return f"squares-{hashlib.sha1(text.encode()).hexdigest()[:8]}"

    def __call__(self, cache_dir: Path, data_root: Path | None, options: Mapping[str, str] | None = None,
                 allow_missing: bool = False) -> CIRDataset:
        """Generate the dataset (it is small: no cache needed)."""
        rng = np.random.default_rng(0)
        train_images = [(c, k, 12) for c in COLOURS for k in CORNERS]
        val_images = [(c, k, 10) for c in COLOURS for k in CORNERS]  # other sizes: unseen images
        pixels = np.stack([square(*spec) for spec in train_images + val_images])
        return CIRDataset(
            name=self.name, key=self.key(),
            image_ids=[f"{c}-{r}x{k}-{s}" for c, (r, k), s in train_images + val_images],
            images=ArrayImages(pixels),
            train=split("train", train_images, rng, self.n_train, 0),
            val=split("val", val_images, rng, self.n_val, len(train_images)),
            gallery={"all": np.arange(len(train_images), len(pixels))},
            protocol=EvalProtocol(name="squares", exclude_reference=True, recall_at=(1, 5, 10)),
        )
