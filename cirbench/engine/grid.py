"""A grid of cells (method x noise rate x seed on one dataset and backbone): a spec validated
up front, its cells (each with a run id from everything that changes its numbers), the ones
still pending, and what its cells share (the dataset, the tower tokens). A cell's own life,
from its noise to its results, is :mod:`cirbench.engine.cell`; finished cells are skipped."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from cirbench import defaults
from cirbench.backbones.registry import BACKBONES
from cirbench.config import build_config, config_to_dict
from cirbench.data.base import CIRDataset
from cirbench.data.noise import NOISE_PROTOCOLS
from cirbench.data.registry import DATASETS
from cirbench.engine import cell as cell_life
from cirbench.engine.cell import Cell, CellOutcome
from cirbench.engine.distributed import is_main_process, main_process_first
from cirbench.engine.features import cache_path, image_tokens
from cirbench.engine.online import OnlineTokens, check_cache_fits
from cirbench.engine.reference import REFERENCE_ROWS
from cirbench.engine.train import ProgressFn
from cirbench.method import Method, MethodConfig
from cirbench.plugins import Discovery, discover
from cirbench.results.atomic import atomic_write_text
from cirbench.results.store import CellKey, ResultsFolderError, ResultsStore

__all__ = ["Cell", "CellOutcome", "Grid", "GridError", "GridSpec", "backbone_label", "base_method", "dataset_label",
           "run_cell_by_id", "run_id_for"]


@dataclass
class GridSpec:
    """Everything a ``cirbench run`` needs; validated by :class:`Grid` before any work."""

    methods: list[str]
    noise_rates: list[float]
    seeds: list[int] = field(default_factory=lambda: [0])
    dataset: str = "shapes"
    backbone: str = "tiny"
    weights: str | None = None
    noise_protocol: str = "thirds"
    epochs: int = defaults.EPOCHS
    batch_size: int = defaults.BATCH_SIZE
    output: Path = Path("results")
    cache_dir: Path = Path("datasets")
    data_root: Path | None = None
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    plugin_files: list[Path] = field(default_factory=list)
    overwrite: bool = False
    device: str = "cpu"
    precision: str = "fp32"
    gradient_checkpointing: bool = False
    features: str = "cache"
    decode_workers: int = 0
    dataset_options: dict[str, str] = field(default_factory=dict)
    allow_missing: bool = False
    save: bool = False
    holdout: float = 0.0
    """The share of the noisy training triplets held out for selection (:mod:`cirbench.data.holdout`)."""


class GridError(ValueError):
    """A grid that cannot run: an unknown name, a bad rate or override. Raised before work."""


def base_method(label: str) -> str:
    """The registered method behind a grid label: ``conesep:no_ot`` -> ``conesep``.

    A label with a ``:variant`` suffix is a separate row of the grid with its own ``--set``
    scope (``--set conesep:no_ot.ot=false``), which is how an ablation grid is run."""
    return label.split(":", 1)[0]


def dataset_label(spec: GridSpec) -> str:
    """The ``dataset`` column of the results: the name, with its options if any, e.g.
    ``fashioniq[reference=keep]``."""
    options = ",".join(f"{k}={v}" for k, v in sorted(spec.dataset_options.items()))
    return f"{spec.dataset}[{options}]" if options else spec.dataset


def backbone_label(spec: GridSpec) -> str:
    """The ``backbone`` column of the results: the name, with its ``--weights`` if given
    (the last path component for a directory or file), e.g. ``tiny[stage1]``."""
    if not spec.weights:
        return spec.backbone
    return f"{spec.backbone}[{Path(spec.weights.rstrip('/')).name or spec.weights}]"


def run_id_for(spec: GridSpec, label: str, method_cls: type[Method], config: MethodConfig, rate: float, seed: int) -> str:
    """A deterministic id from everything that changes a cell's numbers: the resolved
    configuration (an ``lr`` of None is the backbone's ``default_lr``, except for an untrained
    reference row), the start (the backbone factory's ``start_identity``, known without
    loading weights: the released ``tiny`` start's key; else ``--weights`` names it), the data,
    the noise, the seed and the training options. Ids changed once when the resolved ``lr``
    and the start joined them (docs/benchmark.md#run-ids)."""
    dataset_key = DATASETS.get(spec.dataset).key()  # a generated dataset's, known before it is loaded
    factory = BACKBONES.get(spec.backbone)
    resolved = config_to_dict(config)
    if resolved.get("lr") is None and REFERENCE_ROWS.get(label) is not method_cls:
        resolved["lr"] = factory.default_lr
    start = getattr(factory, "start_identity", None)
    identity = json.dumps(
        {
            "method": label, "version": method_cls.version, "config": resolved,
            "dataset": spec.dataset, "data_root": str(spec.data_root or ""), "backbone": spec.backbone,
            "weights": spec.weights or "", "start": start(spec.weights) if start else "",
            "protocol": spec.noise_protocol, "rate": rate, "seed": seed,
            "epochs": spec.epochs, "batch_size": spec.batch_size,
            # only when set, so that the ids of runs without them stay as they were
            **({"dataset_options": spec.dataset_options} if spec.dataset_options else {}),
            **({"allow_missing": True} if spec.allow_missing else {}),
            **({"holdout": spec.holdout} if spec.holdout else {}),
            **({"dataset_key": dataset_key} if dataset_key is not None else {}),
            **({"precision": spec.precision} if spec.precision != "fp32" else {}),
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    return f"{label.replace(':', '_')}-{spec.dataset}-{spec.backbone}-{spec.noise_protocol}-{rate:g}-s{seed}-{digest}"


def same_cell_elsewhere(spec: GridSpec, label: str, method_cls: type[Method], rate: float) -> str:
    """The method whose cell ``label``'s at ``rate`` is (``Method.same_at_no_noise``, at 0%
    noise, when the two have the same ``--set`` overrides), else ""."""
    twin = method_cls.same_at_no_noise
    same = rate == 0.0 and twin and spec.overrides.get(label, {}) == spec.overrides.get(twin, {})
    return twin if same else ""


def check_lists(spec: GridSpec) -> None:
    """Refuse an empty or repeated ``--noise`` or ``--seeds`` list, and a negative seed."""
    for option, values, example in (("--noise", spec.noise_rates, "0,0.5,0.8"), ("--seeds", spec.seeds, "0,1,2")):
        if not values:
            raise GridError(f"{option} is empty: give at least one value, e.g. {option} {example}")
        repeated = sorted({v for v in values if list(values).count(v) > 1})
        if repeated:
            raise GridError(f"{option} {','.join(f'{v:g}' for v in values)} lists {', '.join(f'{v:g}' for v in repeated)} "
                            "more than once (the same cell would run twice); give each value once")
    negative = [seed for seed in spec.seeds if seed < 0]
    if negative:
        raise GridError(f"--seeds {','.join(str(s) for s in spec.seeds)}: seed {negative[0]} is negative; a seed must be >= 0")


class Grid:
    """Validates a :class:`GridSpec` and runs its cells (see the module docstring)."""

    def __init__(self, spec: GridSpec, discovery: Discovery | None = None) -> None:
        self.spec = spec
        self.discovery = discovery or discover(spec.plugin_files)
        self.store = ResultsStore(spec.output)
        self._dataset: CIRDataset | None = None
        self._tokens: dict[str, np.ndarray] = {}
        self.dropped_path: Path | None = None
        self.skipped: list[str] = []
        """Why a cell of the spec is not trained (:func:`same_cell_elsewhere`), one line each."""
        self.cells = self._validate()

    def _validate(self) -> list[Cell]:
        spec = self.spec
        if self.discovery.errors:
            raise GridError("; ".join(self.discovery.errors))
        try:
            for name in spec.methods:
                self.discovery.methods.entry(base_method(name))
            DATASETS.entry(spec.dataset)
            BACKBONES.entry(spec.backbone)
            NOISE_PROTOCOLS.entry(spec.noise_protocol)
        except KeyError as exc:
            raise GridError(str(exc)) from None
        if spec.weights is None:  # record the backbone's default weights, so results name them
            spec.weights = getattr(BACKBONES.get(spec.backbone), "default_weights", None)
        loader = DATASETS.get(spec.dataset)
        if (spec.dataset_options or spec.allow_missing) and not loader.files:
            raise GridError(f"dataset {spec.dataset!r} is generated by cirbench: it takes no --dataset-option or --allow-missing")
        if spec.dataset_options:
            try:
                loader.parse_options(spec.dataset_options)
            except ValueError as exc:
                raise GridError(str(exc)) from None
        if not spec.methods:
            raise GridError("no method selected (--methods is empty)")
        check_lists(spec)
        for rate in spec.noise_rates:
            if not 0.0 <= rate < 1.0:
                raise GridError(f"noise rate {rate} is outside [0, 1)")
        if not 0.0 <= spec.holdout < 1.0:
            raise GridError(f"--holdout {spec.holdout:g} is outside [0, 1): give the share of training triplets to hold out, e.g. 0.1")
        if spec.epochs < 1 or spec.batch_size < 2:
            raise GridError("--epochs must be >= 1 and --batch-size >= 2")
        unknown_scopes = set(spec.overrides) - set(spec.methods)
        if unknown_scopes:
            raise GridError(
                f"--set names {', '.join(sorted(unknown_scopes))}, which is not a selected method "
                f"(selected: {', '.join(spec.methods)})"
            )
        if len(set(spec.methods)) != len(spec.methods):
            raise GridError(f"a method is listed twice in {', '.join(spec.methods)}; label variants as name:label")
        cells = self._build_cells()
        if not cells:
            raise GridError(f"nothing to train: {'; '.join(self.skipped)}. Add the method it is, or a noise rate above 0")
        try:
            self.store.check_writable()
        except ResultsFolderError as exc:
            raise GridError(str(exc)) from None
        return cells

    def _build_cells(self) -> list[Cell]:
        """One cell per method x noise rate x seed, but for a method at a rate where it is
        another's cell (:func:`same_cell_elsewhere`), recorded in :attr:`skipped`."""
        spec, cells = self.spec, []
        for name in spec.methods:
            entry = self.discovery.methods.entry(base_method(name))
            try:
                config = build_config(entry.obj.Config, spec.overrides.get(name, {}), name)
            except ValueError as exc:
                raise GridError(str(exc)) from None
            for rate in spec.noise_rates:
                twin = same_cell_elsewhere(spec, name, entry.obj, rate)
                if twin:
                    self.skipped.append(f"{name} at 0% noise is {twin} at 0% (a perfect filter with nothing to filter): "
                                        f"not trained; the report reads {twin}'s cell")
                    continue
                for seed in spec.seeds:
                    key = CellKey(
                        run_id_for(spec, name, entry.obj, config, rate, seed), name, dataset_label(spec), backbone_label(spec),
                        spec.noise_protocol, float(rate), int(seed),
                    )
                    cells.append(Cell(key, entry.obj, config, entry.source))
        return cells

    def pending(self) -> list[Cell]:
        """The cells still to run: those the store does not hold as complete (every cell
        with ``overwrite``)."""
        return [c for c in self.cells if self.spec.overwrite or not self.store.is_complete(c.key.run_id)]

    def cell(self, run_id: str) -> Cell:
        """The cell ``run_id`` of this grid; RuntimeError when the grid has none (a job or
        worker rebuilt the grid with other code or method versions)."""
        cell = next((c for c in self.cells if c.key.run_id == run_id), None)
        if cell is None:
            raise RuntimeError(f"cell {run_id} is not in this grid any more (did a method version or the code change?)")
        return cell

    def dataset(self) -> CIRDataset:
        """The grid's dataset, loaded once."""
        if self._dataset is None:
            self._dataset = DATASETS.get(self.spec.dataset)(
                self.spec.cache_dir, self.spec.data_root, options=self.spec.dataset_options, allow_missing=self.spec.allow_missing)
            dropped = self._dataset.info.get("dropped")
            if dropped:  # accepted with --allow-missing: list them beside the results
                self.dropped_path = self.spec.output / "dropped" / f"{self._dataset.key}.json"
                record = {"dataset": self.spec.dataset, "dataset_key": self._dataset.key, "data_root": str(self.spec.data_root or ""),
                          "problems": self._dataset.info.get("problems", []), "dropped": dropped}
                if is_main_process():
                    atomic_write_text(json.dumps(record, indent=1), self.dropped_path)
        return self._dataset

    def tokens(self, backbone, announce: Callable[[str], None]) -> np.ndarray:
        """The frozen-tower tokens of every image: cached on disk (after checking that the
        cache fits) and in memory, or computed on the fly with ``features="online"``."""
        backbone.to(torch.device(self.spec.device))  # the tower runs where the cell will
        if self.spec.features == "online":  # no cache: tokens computed from the images when indexed
            return OnlineTokens(self.dataset(), backbone, workers=self.spec.decode_workers)
        key = backbone.tower_key()
        if key not in self._tokens:
            if not cache_path(self.spec.cache_dir, self.dataset(), backbone).exists():
                announce(f"feature cache: {check_cache_fits(self.dataset(), backbone, self.spec.cache_dir) / 2**30:.2f} GiB to write")
            with main_process_first():  # under torchrun, rank 0 builds the cache and the others read it
                self._tokens[key] = image_tokens(
                    self.dataset(), backbone, self.spec.cache_dir, torch.device(self.spec.device), announce=announce
                )
        return self._tokens[key]

    def prepare_caches(self, announce: Callable[[str], None] = print) -> None:
        """Build what every cell reads (the data, the start, the tower tokens) here, so that
        worker processes only read them, also when the recorded reference rows are skipped."""
        spec = self.spec
        self.tokens(BACKBONES.get(spec.backbone)(spec.seeds[0], spec.cache_dir, spec.weights), announce)

    def backbone_label(self) -> str:
        """The ``backbone`` column of this grid's results (:func:`backbone_label`)."""
        return backbone_label(self.spec)

    def run_cell(self, cell: Cell, progress: ProgressFn, announce: Callable[[str], None] = print) -> CellOutcome:
        """Run one cell (:func:`cirbench.engine.cell.run_cell`: its whole life, under its lock)."""
        return cell_life.run_cell(self, cell, progress, announce)

    def reference_cells(self) -> list[Cell]:
        """The reference rows of this grid (:mod:`cirbench.engine.reference`): one per row and
        seed, noise rate NaN, independent of the methods and noise rates."""
        spec, cells = replace(self.spec, holdout=0.0), []  # untrained: a held-out share changes nothing
        for name, cls in REFERENCE_ROWS.items():
            for seed in spec.seeds:
                config = MethodConfig()
                run_id = run_id_for(spec, name, cls, config, float("nan"), seed).replace("-nan-", "-")
                key = CellKey(run_id, name, dataset_label(spec), backbone_label(spec), spec.noise_protocol, float("nan"), int(seed))
                cells.append(Cell(key, cls, config, "cirbench.engine.reference"))
        return cells

    def run_reference(self, cell: Cell, announce: Callable[[str], None] = print) -> CellOutcome:
        """Evaluate one reference row (:func:`cirbench.engine.cell.run_reference`), unless already recorded."""
        return cell_life.run_reference(self, cell, announce)


def run_cell_by_id(spec: GridSpec, run_id: str, announce: Callable[[str], None]) -> dict[str, Any]:
    """The body of a worker process or a scheduler job: rebuild ``spec``'s grid, run its
    cell ``run_id`` (which writes the cell's parts to the store) and return the outcome's
    :meth:`CellOutcome.record`."""
    grid = Grid(spec)
    return grid.run_cell(grid.cell(run_id), progress=lambda info: None, announce=announce).record()
