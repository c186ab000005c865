"""A noise instance exported, as ``cirbench noise export`` writes it: the dataset loaded as a
grid loads it, the protocol's instance at one rate and seed built (the same one a grid's
cell trains on), written as parquet (:mod:`cirbench.data.noise.instance_file`) and, for FashionIQ and
CIRR, as the release's training files with the noisy values in."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cirbench.data.noise.injection import inject_noise
from cirbench.data.noise.instance_file import moved_counts, write_instance, write_release_json
from cirbench.data.datasets.registry import DATASETS


@dataclass
class ExportedNoise:
    """What an export wrote: the parquet instance, the release's files (none for a dataset
    without release files), the triplet count and the noisy triplets per noise type."""

    instance: Path
    release_files: list[Path] = field(default_factory=list)
    n_triplets: int = 0
    noisy: dict[str, int] = field(default_factory=dict)


def export_noise(output: Path, dataset: str, protocol: str, rate: float, seed: int = 0, data_root: Path | None = None,
                 dataset_options: dict[str, str] | None = None, cache_dir: Path = Path("datasets"),
                 allow_missing: bool = False, release_json: bool = True) -> ExportedNoise:
    """Write the instance of ``protocol`` at ``rate`` and ``seed`` on ``dataset`` under
    ``output`` (``<dataset>-<protocol>-<rate>-seed<seed>.parquet``, and with ``release_json``
    the release's training files under ``release/<dataset>-<protocol>-<rate>-seed<seed>/``, one
    folder per instance, so that another rate or seed exported beside it overwrites nothing);
    ValueError when the protocol cannot build it (e.g. ``hard``, which needs a backbone's
    features) or the files cannot be written."""
    loader = DATASETS.get(dataset)
    loaded = loader(cache_dir, data_root, dataset_options or {}, allow_missing) if loader.files else loader(cache_dir, data_root)
    noisy, manifest = inject_noise(loaded, protocol, rate, seed)
    name = f"{loaded.name}-{protocol}-{rate:g}-seed{seed}"
    path = write_instance(output / f"{name}.parquet", loaded, noisy, manifest)
    files = write_release_json(output / "release" / name, loaded, manifest) if release_json and loader.files else []
    return ExportedNoise(path, files, len(noisy), moved_counts(manifest))
