"""A grid of cells (method x noise rate x seed on one dataset and backbone): validated up
front, run cell by cell, each cell's results written atomically, finished cells skipped."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import platform
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

import cirbench
from cirbench.backbones.registry import BACKBONES
from cirbench.config import build_config, config_to_dict
from cirbench.data.base import CIRDataset
from cirbench.data.noise import NOISE_PROTOCOLS, inject_noise
from cirbench.data.registry import DATASETS
from cirbench.engine.features import image_tokens
from cirbench.engine.train import ProgressFn, TrainResult, train_cell
from cirbench.method import Method, MethodConfig
from cirbench.plugins import Discovery, discover_methods
from cirbench.provenance import git_commit, package_versions
from cirbench.results.store import CellKey, ResultsStore


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
    epochs: int = 6
    batch_size: int = 128
    output: Path = Path("results")
    cache_dir: Path = Path("datasets")
    data_root: Path | None = None
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    plugin_files: list[Path] = field(default_factory=list)
    overwrite: bool = False
    device: str = "cpu"


@dataclass
class Cell:
    """One (method, noise rate, seed) of a grid, with its resolved configuration."""

    key: CellKey
    method_cls: type[Method]
    config: MethodConfig
    source: str


@dataclass
class CellOutcome:
    """What happened to a cell: ``completed``, ``skipped`` (already done) or ``failed``."""

    cell: Cell
    status: str
    final: dict[str, dict[str, float]] = field(default_factory=dict)
    error: str = ""
    result: TrainResult | None = None


class GridError(ValueError):
    """A grid that cannot run: an unknown name, a bad rate or override. Raised before work."""


def base_method(label: str) -> str:
    """The registered method behind a grid label: ``conesep:no_ot`` -> ``conesep``.

    A label with a ``:variant`` suffix is a separate row of the grid with its own ``--set``
    scope (``--set conesep:no_ot.ot=false``), which is how an ablation grid is run."""
    return label.split(":", 1)[0]


def run_id_for(spec: GridSpec, label: str, method_cls: type[Method], config: MethodConfig, rate: float, seed: int) -> str:
    """A deterministic id from everything that changes a cell's numbers."""
    identity = json.dumps(
        {
            "method": label, "version": method_cls.version, "config": config_to_dict(config),
            "dataset": spec.dataset, "data_root": str(spec.data_root or ""), "backbone": spec.backbone,
            "weights": spec.weights or "", "protocol": spec.noise_protocol, "rate": rate, "seed": seed,
            "epochs": spec.epochs, "batch_size": spec.batch_size,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    return f"{label.replace(':', '_')}-{spec.dataset}-{spec.backbone}-{spec.noise_protocol}-{rate:g}-s{seed}-{digest}"


class Grid:
    """Validates a :class:`GridSpec` and runs its cells (see the module docstring)."""

    def __init__(self, spec: GridSpec, discovery: Discovery | None = None) -> None:
        self.spec = spec
        self.discovery = discovery or discover_methods(spec.plugin_files)
        self.store = ResultsStore(spec.output)
        self._dataset: CIRDataset | None = None
        self._tokens: dict[str, np.ndarray] = {}
        self.cells = self._validate()

    def _validate(self) -> list[Cell]:
        spec = self.spec
        try:
            for name in spec.methods:
                self.discovery.methods.entry(base_method(name))
            DATASETS.entry(spec.dataset)
            BACKBONES.entry(spec.backbone)
            NOISE_PROTOCOLS.entry(spec.noise_protocol)
        except KeyError as exc:
            raise GridError(str(exc)) from None
        if not spec.methods:
            raise GridError("no method selected")
        for rate in spec.noise_rates:
            if not 0.0 <= rate < 1.0:
                raise GridError(f"noise rate {rate} is outside [0, 1)")
        if spec.epochs < 1 or spec.batch_size < 2:
            raise GridError("--epochs must be >= 1 and --batch-size >= 2")
        unknown_scopes = set(spec.overrides) - set(spec.methods)
        if unknown_scopes:
            raise GridError(
                f"--set names {', '.join(sorted(unknown_scopes))}, which is not a selected method "
                f"(selected: {', '.join(spec.methods)})"
            )
        cells = []
        if len(set(spec.methods)) != len(spec.methods):
            raise GridError(f"a method is listed twice in {', '.join(spec.methods)}; label variants as name:label")
        for name in spec.methods:
            entry = self.discovery.methods.entry(base_method(name))
            try:
                config = build_config(entry.obj.Config, spec.overrides.get(name, {}), name)
            except ValueError as exc:
                raise GridError(str(exc)) from None
            for rate in spec.noise_rates:
                for seed in spec.seeds:
                    key = CellKey(
                        run_id_for(spec, name, entry.obj, config, rate, seed), name, spec.dataset, spec.backbone,
                        spec.noise_protocol, float(rate), int(seed),
                    )
                    cells.append(Cell(key, entry.obj, config, entry.source))
        return cells

    def dataset(self) -> CIRDataset:
        """The grid's dataset, loaded once."""
        if self._dataset is None:
            self._dataset = DATASETS.get(self.spec.dataset)(self.spec.cache_dir, self.spec.data_root)
        return self._dataset

    def tokens(self, backbone, announce: Callable[[str], None]) -> np.ndarray:
        """The frozen-tower tokens of every image, cached on disk and in memory."""
        key = backbone.tower_key()
        if key not in self._tokens:
            self._tokens[key] = image_tokens(
                self.dataset(), backbone, self.spec.cache_dir, torch.device(self.spec.device), announce=announce
            )
        return self._tokens[key]

    def run_cell(self, cell: Cell, progress: ProgressFn, announce: Callable[[str], None] = print) -> CellOutcome:
        """Run one cell (unless complete and not ``overwrite``) and write its results."""
        spec, key = self.spec, cell.key
        if not spec.overwrite and self.store.is_complete(key.run_id):
            return CellOutcome(cell, "skipped")
        started = dt.datetime.now(dt.timezone.utc)
        row = {
            "status": "failed", "error": "", "config": json.dumps(config_to_dict(cell.config), sort_keys=True),
            "method_version": cell.method_cls.version, "method_source": cell.source,
            "is_oracle": bool(cell.method_cls.oracle), "partitions": bool(cell.method_cls.partitions),
            "package_version": cirbench.__version__, "git_commit": git_commit(),
            "package_versions": package_versions(), "torch_version": torch.__version__,
            "device": f"{spec.device} ({platform.processor() or platform.machine()})",
            "dataset_key": "", "noise_manifest_hash": "", "noise_manifest_path": "", "eval_protocol": "",
            "n_train": 0, "n_noisy": 0, "epochs": spec.epochs, "started": started.isoformat(),
            "finished": "", "wall_seconds": 0.0, "steps": 0, "model_seconds": 0.0, "seconds_per_step": float("nan"),
        }
        tables = {}
        outcome = CellOutcome(cell, "failed")
        try:
            dataset = self.dataset()
            row.update(dataset_key=dataset.key, eval_protocol=dataset.protocol.describe())
            backbone = BACKBONES.get(spec.backbone)(key.seed, spec.cache_dir, spec.weights)
            tokens = self.tokens(backbone, announce)
            noisy, manifest = inject_noise(
                dataset, spec.noise_protocol, key.noise_rate, key.seed,
                image_features=lambda: np.asarray(tokens, dtype=np.float32).mean(axis=1),
            )
            row.update(
                noise_manifest_hash=manifest.hash, noise_manifest_path=str(manifest.save(spec.output / "manifests")),
                n_train=len(noisy), n_noisy=int(manifest.is_noisy.sum()),
            )
            result = train_cell(
                cell.method_cls, cell.config, backbone, dataset, noisy, manifest, tokens,
                spec.epochs, spec.batch_size, key.seed, torch.device(spec.device), progress,
            )
            tables = result.tables
            row.update(
                status="completed", steps=result.steps, model_seconds=result.model_seconds,
                seconds_per_step=result.model_seconds / max(result.steps, 1),
            )
            outcome = CellOutcome(cell, "completed", result.final, result=result)
        except KeyboardInterrupt:
            row.update(status="interrupted", error="interrupted by the user")
            self._finish(key, row, started, {})
            raise
        except Exception as exc:  # a failed cell is recorded and the grid goes on
            row["error"] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
            outcome = CellOutcome(cell, "failed", error=f"{type(exc).__name__}: {exc}")
        self._finish(key, row, started, tables)
        return outcome

    def _finish(self, key: CellKey, row: dict, started: dt.datetime, tables: dict) -> None:
        finished = dt.datetime.now(dt.timezone.utc)
        row.update(finished=finished.isoformat(), wall_seconds=(finished - started).total_seconds())
        self.store.write_run(key, row, tables)
