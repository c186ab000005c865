"""The dataset registry: name -> :class:`~cirbench.data.loader.DatasetLoader`. A loader takes
the data root (where generated data and caches live, ``datasets/`` by default) and the
user's ``--data-root`` for datasets whose files the user provides, and returns a
:class:`~cirbench.data.base.CIRDataset`. Plugins (:mod:`cirbench.plugins`) add theirs here."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from cirbench.data.base import CIRDataset
from cirbench.data.loader import DatasetLoader
from cirbench.data.real import FileDatasetLoader
from cirbench.data.shapes import ShapesParams, load_shapes
from cirbench.registry import Registry

__all__ = ["DATASETS", "DatasetLoader", "FileDatasetLoader", "ShapesLoader"]


class ShapesLoader(DatasetLoader):
    """The embedded synthetic benchmark (generated on first use, cached): no files, no options."""

    def __init__(self, description: str, **params: int) -> None:
        self.description = description
        self.params = params

    def key(self) -> str:
        """The generated content's key (parameters and generator version), known before generating."""
        return ShapesParams(**self.params).key()

    def __call__(self, cache_dir: Path, data_root: Path | None, options: Mapping[str, str] | None = None,
                 allow_missing: bool = False) -> CIRDataset:
        """Generate the dataset (or read it from the cache)."""
        return load_shapes(Path(cache_dir) / "shapes", ShapesParams(**self.params))


DATASETS: Registry[DatasetLoader] = Registry("dataset")
DATASETS.add("shapes", ShapesLoader("embedded synthetic benchmark of coloured-shape scenes (generated, no download)"))
DATASETS.add(
    "shapes-mini",
    ShapesLoader("a small shapes benchmark (300 training scenes, 15 validation families), for tests and quick checks",
                 n_train_scenes=300, n_val_scenes=15),
)

# Datasets read from the user's files (--data-root): ``files`` True, typed options, a check.
DATASETS.add("fashioniq", FileDatasetLoader(
    "fashioniq", "FashionIQ dress/shirt/toptee from your files (--data-root; options: categories, train_captions, reference)",
    "cirbench.data.fashioniq",
))
DATASETS.add("cirr", FileDatasetLoader(
    "cirr", "CIRR from your files (--data-root); R@K, R_subset@K, test1 submissions with `cirbench predict`",
    "cirbench.data.cirr",
))
