"""What the file-backed datasets (FashionIQ, CIRR) share: typed ``--dataset-option``
parsing, the scan record a dataset module produces from its root (with the reading and
entry-validation steps both modules use), and its assembly into a
:class:`~cirbench.data.base.CIRDataset` that drops (and lists) every sample an error costs.

A dataset module (``cirbench.data.datasets.fashioniq``, ``cirbench.data.datasets.cirr``) provides an
``Options`` dataclass (a :class:`FileOptions`), ``scan(root, options) -> Scan`` and
``protocol(options) -> (EvalProtocol, summarize)``; :class:`FileDatasetLoader` turns that
into a registry entry with ``check`` for ``cirbench data check``.

Entries that exactly repeat an earlier one are warnings, not errors (the public loaders
read them as they are): validation keeps them, as the official protocol counts them, and
training keeps them unless ``--dataset-option train_repeats=drop``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, Mapping, TypeVar

import numpy as np

from cirbench.data.base import CIRDataset, TripletSplit
from cirbench.settings.config import ConfigError, typed_values
from cirbench.data.checks.files import FileImages, JsonEntryError, read_json_entries, resolve_data_root
from cirbench.data.checks.imagecheck import Level, unreadable_images
from cirbench.data.datasets.loader import DatasetLoader
from cirbench.data.checks.problems import CheckReport, DatasetProblemsError, Problem, Severity

O = TypeVar("O")


def parse_options(cls: type[O], options: Mapping[str, str], dataset: str) -> O:
    """``--dataset-option key=value`` strings -> an instance of the dataclass ``cls``, each
    value converted to its field's type; an unknown key or a bad value raises ConfigError."""
    values = typed_values(
        cls, options, lambda key: f"--dataset-option {key}",
        lambda key, names: f"--dataset-option {key}: unknown option for {dataset}; valid options: {', '.join(names)}",
    )
    try:
        return cls(**values)
    except ValueError as exc:
        raise ConfigError(f"--dataset-option for {dataset}: {exc}") from None


@dataclass
class FileOptions:
    """The ``--dataset-option`` settings every file-backed dataset has. ``image_size``:
    images are resized to this square (0: native sizes). ``train_repeats``: ``keep`` the
    training entries that exactly repeat an earlier entry (as the public loaders do) or
    ``drop`` them; validation always keeps them."""

    image_size: int = 224
    train_repeats: Literal["keep", "drop"] = "keep"

    def __post_init__(self) -> None:
        if self.image_size < 0:
            raise ValueError(f"image_size must be >= 0, got {self.image_size}")


@dataclass
class Query:
    """One well-formed triplet (or CIRR test query, ``target`` None) as read from the files,
    by image name; ``origin`` names the file and entry it came from; ``repeat_of`` the
    entry it exactly repeats, if any."""

    sample_id: str
    reference: str
    text: str
    target: str | None
    group: str
    origin: str
    subset: tuple[str, ...] | None = None
    repeat_of: str | None = None


@dataclass
class Dropped:
    """A sample (or gallery image) left out of the dataset, and why."""

    split: str
    sample: str
    reason: str


@dataclass
class Scan:
    """What reading a dataset root found: the well-formed queries of each split, each
    validation group's gallery (image names), the path of every needed image that exists,
    the problems, and the samples dropped while reading."""

    root: Path
    train: list[Query] = field(default_factory=list)
    val: list[Query] = field(default_factory=list)
    gallery: dict[str, list[str]] = field(default_factory=dict)
    images: dict[str, Path] = field(default_factory=dict)
    bad_images: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    _first: dict[tuple[str, object], int] = field(default_factory=dict, repr=False)

    def problem(self, file: str, entry: str, kind: str, text: str, fatal: bool = False,
                severity: Severity = "error") -> None:
        """Record a problem (an error unless ``severity`` says ``warning``)."""
        self.problems.append(Problem(file, entry, kind, text, fatal, severity))

    def drop(self, split: str, sample: str, reason: str) -> None:
        """Record a sample left out while reading."""
        self.dropped.append(Dropped(split, sample, reason))

    def reject(self, rel: str, where: str, split: str, sample: str, kind: str, text: str) -> None:
        """An error in one entry of ``rel`` that costs the sample ``sample`` of ``split``."""
        self.problem(rel, where, kind, text)
        self.drop(split, sample, f"{rel} {where}: {text}")

    def read_entries(self, rel: str, container: type) -> list[tuple[str | None, object]] | None:
        """The top-level entries of the JSON file ``rel`` (a list or an object); None, with a
        fatal problem, when the file is missing or malformed."""
        path = self.root / rel
        if not path.is_file():
            self.problem(rel, "", "missing-file", "file not found", fatal=True)
            return None
        try:
            return read_json_entries(path, container)
        except JsonEntryError as exc:
            self.problem(rel, f"#{exc.entry}" if exc.entry is not None else "", "malformed-json", str(exc), fatal=True)
            return None

    def fields(self, rel: str, where: str, split: str, sample: str, entry: object, required: tuple[str, ...]) -> bool:
        """Whether ``entry`` is a JSON object with every ``required`` field (else an error)."""
        if not isinstance(entry, dict):
            self.reject(rel, where, split, sample, "missing-field", f"entry is not a JSON object: {entry!r:.80}")
            return False
        missing = [f for f in required if f not in entry]
        if missing:
            self.reject(rel, where, split, sample, "missing-field", f"missing field(s): {', '.join(missing)}")
            return False
        return True

    def first_seen(self, rel: str, key: object, index: int) -> int | None:
        """The index of the earlier entry of ``rel`` with the same ``key``, or None (and
        ``index`` is remembered as the first)."""
        first = self._first.setdefault((rel, key), index)
        return None if first == index else first

    def verify_images(self, cache_dir: Path | None, level: Level = "header", workers: int | None = None) -> None:
        """Check every found image (see :mod:`cirbench.data.checks.imagecheck`); move unreadable ones
        to ``bad_images`` as problems."""
        for name, error in sorted(unreadable_images(self.images, self.root, cache_dir, level, workers).items()):
            path = self.images.pop(name)
            rel = os.path.relpath(path, self.root.resolve())
            self.problem(rel, name, "unreadable-image", f"image cannot be read: {error}")
            self.bad_images[name] = f"image {rel} is unreadable"


def _assemble_split(
    name: str, queries: list[Query], index: dict[str, int], bad: dict[str, str], dropped: list[Dropped]
) -> TripletSplit:
    kept: list[Query] = []
    for q in queries:
        names = [q.reference] + ([q.target] if q.target is not None else []) + list(q.subset or ())
        missing = next((n for n in names if n not in index), None)
        if missing is None:
            kept.append(q)
        else:
            dropped.append(Dropped(name, q.sample_id, bad.get(missing, f"image {missing} is not available")))
    subset = [np.asarray([index[m] for m in q.subset], dtype=np.int64) for q in kept] if any(q.subset for q in kept) else None
    return TripletSplit(
        sample_ids=[q.sample_id for q in kept],
        reference=np.asarray([index[q.reference] for q in kept], dtype=np.int64),
        texts=[q.text for q in kept],
        target=np.asarray([index[q.target] if q.target is not None else -1 for q in kept], dtype=np.int64),
        group=[q.group for q in kept],
        subset=subset,
        extra={"origin": [q.origin for q in kept]},
    )


def assemble(scan: Scan, name: str, module: ModuleType, options: Any, image_size: int) -> CIRDataset:
    """Build the dataset from a scan, leaving out every sample whose images are missing or
    unreadable (and, with ``train_repeats=drop``, the training entries that repeat an earlier
    one); ``info["dropped"]`` lists each dropped sample and gallery image with the reason,
    ``info["n_warnings"]`` counts the warnings."""
    image_ids = sorted(scan.images)
    index = {n: i for i, n in enumerate(image_ids)}
    dropped = list(scan.dropped)
    drop_repeats = getattr(options, "train_repeats", "keep") == "drop"
    train_queries = [q for q in scan.train if not (drop_repeats and q.repeat_of)]
    train = _assemble_split("train", train_queries, index, scan.bad_images, dropped)
    val = _assemble_split("val", scan.val, index, scan.bad_images, dropped)
    gallery = {}
    for group, names in scan.gallery.items():
        gallery[group] = np.asarray([index[n] for n in names if n in index], dtype=np.int64)
        dropped.extend(Dropped("gallery", f"{group}/{n}", scan.bad_images.get(n, "not available")) for n in names if n not in index)
    base = scan.root.resolve()
    rel_paths = [os.path.relpath(scan.images[n], base) for n in image_ids]
    content = {
        "format": getattr(module, "FORMAT_VERSION", "1"),
        "options": {k: v for k, v in dataclasses.asdict(options).items() if k in getattr(module, "CONTENT_OPTIONS", ())},
        "images": [[n, p, os.stat(scan.images[n]).st_size] for n, p in zip(image_ids, rel_paths)],
        "splits": [[s.sample_ids, s.reference.tolist(), s.texts, s.target.tolist()] for s in (train, val)],
        "gallery": {g: v.tolist() for g, v in sorted(gallery.items())},
    }
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:12]
    protocol, summarize = module.protocol(options)
    return CIRDataset(
        name=name,
        key=f"{name}-{digest}",
        image_ids=image_ids,
        images=FileImages([scan.images[n] for n in image_ids], image_size),
        train=train,
        val=val,
        gallery=gallery,
        protocol=protocol,
        summarize=summarize,
        info={
            "data_root": str(scan.root),
            "options": dataclasses.asdict(options),
            "problems": [p.as_dict() for p in scan.problems],
            "n_warnings": sum(p.severity == "warning" for p in scan.problems),
            "dropped": [dataclasses.asdict(d) for d in dropped],
        },
    )


class FileDatasetLoader(DatasetLoader):
    """A registry entry for a dataset read from the user's files (see the module docstring;
    a :class:`~cirbench.data.datasets.loader.DatasetLoader`); the dataset module is imported on first use."""

    files = True
    dataset_module: str = ""
    """The dataset module's import path, e.g. ``cirbench.data.datasets.cirr`` (a subclass sets it)."""

    def __init__(self, name: str | None = None, description: str | None = None, module: str | None = None) -> None:
        """With no arguments, the subclass's ``name``, ``description`` and ``dataset_module``."""
        self.name = name if name is not None else type(self).name
        self.description = description if description is not None else type(self).description
        self._module_name = module if module is not None else self.dataset_module

    def key(self) -> None:
        """None: the content key of files is known only once they are read."""
        return None

    @property
    def module(self) -> ModuleType:
        """The dataset module (``Options``, ``scan``, ``protocol``)."""
        return importlib.import_module(self._module_name)

    def parse_options(self, options: Mapping[str, str] | None) -> Any:
        """The typed options of this dataset (ConfigError on an unknown key or a bad value)."""
        return parse_options(self.module.Options, options or {}, self.name)

    def check(
        self, data_root: Path | str | None, options: Mapping[str, str] | None, cache_dir: Path | None,
        deep: bool = False, workers: int | None = None,
    ) -> CheckReport:
        """Every problem with the dataset's files (including splits a run does not read, such
        as CIRR's test1, when the module scans them for checks); images are checked at the
        header level, or decoded with ``deep``."""
        opts = self.parse_options(options)
        root = resolve_data_root(self.name, data_root)
        scan = self.module.scan(root, opts, for_check=True)
        scan.verify_images(cache_dir, "deep" if deep else "header", workers)
        return CheckReport(self.name, root, scan.problems, scan.counts)

    def _load(self, scan_fn: str, cache_dir: Path, data_root: Path | None, options: Mapping[str, str] | None,
              allow_missing: bool) -> CIRDataset:
        opts = self.parse_options(options)
        root = resolve_data_root(self.name, data_root)
        scan = getattr(self.module, scan_fn)(root, opts)
        scan.verify_images(cache_dir)
        report = CheckReport(self.name, root, scan.problems, scan.counts)
        if report.fatal or (report.errors and not allow_missing):
            raise DatasetProblemsError(report)
        return assemble(scan, self.name, self.module, opts, opts.image_size)

    def __call__(
        self,
        cache_dir: Path,
        data_root: Path | None,
        options: Mapping[str, str] | None = None,
        allow_missing: bool = False,
    ) -> CIRDataset:
        """Load the dataset (train and validation splits); refuses one with errors unless
        ``allow_missing``, and always refuses fatal ones; warnings never block it."""
        return self._load("scan", cache_dir, data_root, options, allow_missing)

    def load_test(
        self, cache_dir: Path, data_root: Path | None, options: Mapping[str, str] | None = None, allow_missing: bool = False
    ) -> CIRDataset:
        """The dataset's unlabelled test split as the ``val`` split of a dataset (targets -1,
        gallery = the test images), for writing submission files."""
        if not hasattr(self.module, "scan_test"):
            raise ValueError(f"dataset {self.name!r} has no test split that cirbench can predict")
        return self._load("scan_test", cache_dir, data_root, options, allow_missing)
