"""The dataset registry: name -> :class:`~cirbench.data.datasets.loader.DatasetLoader` (an instance of
each registered class, built with no arguments). A loader takes the data root (where
generated data and caches live, ``datasets/`` by default) and the user's ``--data-root`` for
datasets whose files the user provides, and returns a :class:`~cirbench.data.base.CIRDataset`.
The built-in loaders are classes registered with ``DATASETS.register`` as a plugin's are
(:mod:`cirbench.plugins`)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from cirbench.data.base import CIRDataset
from cirbench.data.datasets.loader import DATASET_CONTRACT, DatasetLoader
from cirbench.data.datasets.real import FileDatasetLoader
from cirbench.data.datasets.shapes import ShapesParams, load_shapes
from cirbench.registry import Registry

__all__ = ["DATASETS", "DATASET_CONTRACT", "DatasetLoader", "FileDatasetLoader", "ShapesLoader"]


class ShapesLoader(DatasetLoader):
    """The embedded synthetic benchmark (generated on first use, cached): no files, no options.
    A subclass sets ``name``, ``description`` and its generator ``params``."""

    params: dict[str, int] = {}

    def __init__(self, description: str | None = None, **params: int) -> None:
        """With no arguments, the class's ``description`` and ``params``."""
        self.description = description if description is not None else type(self).description
        self.params = params or dict(type(self).params)

    def key(self) -> str:
        """The generated content's key (parameters and generator version), known before generating."""
        return ShapesParams(**self.params).key()

    def __call__(self, cache_dir: Path, data_root: Path | None, options: Mapping[str, str] | None = None,
                 allow_missing: bool = False) -> CIRDataset:
        """Generate the dataset (or read it from the cache)."""
        return load_shapes(Path(cache_dir) / "shapes", ShapesParams(**self.params))


class Shapes(ShapesLoader):
    name = "shapes"
    description = "embedded synthetic benchmark of coloured-shape scenes (generated, no download)"


class ShapesMini(ShapesLoader):
    name = "shapes-mini"
    description = "a small shapes benchmark (300 training scenes, 15 validation families), for tests and quick checks"
    params = {"n_train_scenes": 300, "n_val_scenes": 15}


class FashionIQ(FileDatasetLoader):
    """Datasets read from the user's files (--data-root): ``files`` True, typed options, a check."""

    name = "fashioniq"
    description = "FashionIQ dress/shirt/toptee from your files (--data-root; options: categories, train_captions, reference)"
    dataset_module = "cirbench.data.datasets.fashioniq"


class CIRR(FileDatasetLoader):
    name = "cirr"
    description = "CIRR from your files (--data-root); R@K, R_subset@K, test1 submissions with `cirbench predict`"
    dataset_module = "cirbench.data.datasets.cirr"


DATASETS: Registry[DatasetLoader] = Registry("dataset", (DATASET_CONTRACT,))
for _builtin in (Shapes, ShapesMini, FashionIQ, CIRR):  # as a plugin's class is (cirbench.plugins)
    DATASETS.register(_builtin)
