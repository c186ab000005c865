"""A grid of cells (method x noise rate x seed on one dataset and backbone): validated up
front, run cell by cell, each cell's results written atomically, finished cells skipped."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import platform
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

import cirbench
from cirbench import defaults
from cirbench.backbones.registry import BACKBONES
from cirbench.checkpoint import save_checkpoint as write_checkpoint
from cirbench.config import build_config, config_to_dict
from cirbench.data.base import CIRDataset
from cirbench.data.holdout import hold_out
from cirbench.data.noise import NOISE_PROTOCOLS, inject_noise
from cirbench.data.registry import DATASETS
from cirbench.engine.cell_failure import confirm_cell, settle_failure
from cirbench.engine.collapse import collapse_reason, final_recall
from cirbench.engine.distributed import broadcast_object, is_main_process, main_process_first, world_size
from cirbench.engine.evaluate import Evaluation, evaluate, metrics_frame
from cirbench.engine.features import cache_path, image_tokens
from cirbench.engine.online import OnlineTokens, check_cache_fits
from cirbench.engine.reference import REFERENCE_ROWS, TextOnly
from cirbench.engine.start import check_start
from cirbench.engine.train import ProgressFn, TrainResult, train_cell
from cirbench.method import Method, MethodConfig
from cirbench.plugins import Discovery, discover_methods
from cirbench.provenance import git_commit, package_versions
from cirbench.results.atomic import atomic_write_text
from cirbench.results.locks import CellLock
from cirbench.results.store import CellKey, ResultsFolderError, ResultsStore


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


@dataclass
class Cell:
    """One (method, noise rate, seed) of a grid, with its resolved configuration."""

    key: CellKey
    method_cls: type[Method]
    config: MethodConfig
    source: str


@dataclass
class CellOutcome:
    """What happened to a cell: ``completed``, ``skipped`` (already done), ``locked``
    (being run by another live process, named in ``error``) or ``failed``."""

    cell: Cell
    status: str
    final: dict[str, dict[str, float]] = field(default_factory=dict)
    error: str = ""
    result: TrainResult | None = None

    def record(self) -> dict[str, Any]:
        """What a worker process or a scheduler job sends back: plain data that pickles
        without the method class (a user's plugin module may not import elsewhere)."""
        return {"run_id": self.cell.key.run_id, "status": self.status, "error": self.error, "final": self.final}

    @classmethod
    def from_record(cls, cell: Cell, record: dict[str, Any]) -> "CellOutcome":
        """The outcome of ``cell`` from a :meth:`record` sent back by another process."""
        return cls(cell, record["status"], record.get("final") or {}, record.get("error") or "")


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


def _failed(cell: Cell, row: dict, exc: Exception) -> CellOutcome:
    """A failed cell's outcome, its traceback recorded in ``row`` (agreed on by every rank
    under torchrun: :func:`~cirbench.engine.cell_failure.settle_failure`)."""
    summary, error = settle_failure(exc)
    row["error"] = error[-4000:]
    return CellOutcome(cell, "failed", error=summary)


class Grid:
    """Validates a :class:`GridSpec` and runs its cells (see the module docstring)."""

    def __init__(self, spec: GridSpec, discovery: Discovery | None = None) -> None:
        self.spec = spec
        self.discovery = discovery or discover_methods(spec.plugin_files)
        self.store = ResultsStore(spec.output)
        self._dataset: CIRDataset | None = None
        self._tokens: dict[str, np.ndarray] = {}
        self.dropped_path: Path | None = None
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
                        run_id_for(spec, name, entry.obj, config, rate, seed), name, dataset_label(spec), backbone_label(spec),
                        spec.noise_protocol, float(rate), int(seed),
                    )
                    cells.append(Cell(key, entry.obj, config, entry.source))
        try:
            self.store.check_writable()
        except ResultsFolderError as exc:
            raise GridError(str(exc)) from None
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

    def run_cell(self, cell: Cell, progress: ProgressFn, announce: Callable[[str], None] = print) -> CellOutcome:
        """Run one cell (unless complete and not ``overwrite``, or held by another live
        process: :meth:`_one_writer`) and write its results."""
        return self._one_writer(cell, announce, lambda: self._train_cell(cell, progress, announce))

    def _train_cell(self, cell: Cell, progress: ProgressFn, announce: Callable[[str], None]) -> CellOutcome:
        """Train one cell and write its results (under its lock)."""
        spec, key = self.spec, cell.key
        started = dt.datetime.now(dt.timezone.utc)
        row = self._base_row(cell, started)
        tables = {}
        outcome = CellOutcome(cell, "failed")
        try:
            dataset, backbone, tokens = self._start(key, row, announce)
            noisy, manifest = inject_noise(
                dataset, spec.noise_protocol, key.noise_rate, key.seed,
                image_features=lambda: np.asarray(tokens, dtype=np.float32).mean(axis=1),
            )
            holdout = hold_out(noisy, manifest, spec.holdout, key.seed) if spec.holdout else None
            if holdout is not None:
                manifest = holdout.manifest  # the whole split's, with which samples were held out
            trained = holdout.train_manifest if holdout is not None else manifest
            row.update(
                noise_manifest_hash=manifest.hash, noise_manifest_path=str(manifest.save(spec.output / "manifests")),
                n_train=len(trained.table), n_noisy=int(trained.is_noisy.sum()), holdout=float(spec.holdout),
                n_holdout=0 if holdout is None else len(holdout.holdout),
            )
            text_only = self.text_only_recall(key, dataset, backbone, tokens)  # before training: the starting backbone
            result = train_cell(
                cell.method_cls, cell.config, backbone, dataset, noisy, manifest, tokens,
                spec.epochs, spec.batch_size, key.seed, torch.device(spec.device), progress,
                precision=spec.precision, gradient_checkpointing=spec.gradient_checkpointing, holdout=holdout,
            )
            tables = result.tables
            row["n_nonfinite_queries"] = result.n_nonfinite_queries
            if spec.save and is_main_process():  # under torchrun, rank 0 alone writes the weights
                row["checkpoint_path"] = str(self.save_checkpoint(cell, result, backbone, dataset))
            confirm_cell()  # under torchrun: every rank finished the cell (or a failure elsewhere surfaces here)
            reason = collapse_reason(tables["metrics"], tables["losses"], text_only)  # a flag, not a failure
            row.update(
                status="completed", steps=result.steps, model_seconds=result.model_seconds,
                seconds_per_step=result.model_seconds / max(result.steps, 1),
                collapsed=bool(reason), collapse_reason=reason,
            )
            outcome = CellOutcome(cell, "completed", result.final, result=result)
        except KeyboardInterrupt:
            row.update(status="interrupted", error="interrupted by the user")
            self._finish(key, row, started, {})
            raise
        except Exception as exc:  # a failed cell is recorded and the grid goes on (on every rank: settle_failure)
            outcome = _failed(cell, row, exc)
        self._finish(key, row, started, tables)
        return outcome

    def _start(self, key: CellKey, row: dict, announce: Callable[[str], None]) -> tuple[CIRDataset, object, np.ndarray]:
        """The dataset (recorded in ``row``), a fresh backbone for ``key``'s seed and the tower tokens."""
        dataset = self.dataset()
        row.update(dataset_key=dataset.key, eval_protocol=dataset.protocol.describe(),
                   n_dropped=len(dataset.info.get("dropped", [])), dropped_path=str(self.dropped_path or ""),
                   n_warnings=int(dataset.info.get("n_warnings", 0)))
        backbone = BACKBONES.get(self.spec.backbone)(key.seed, self.spec.cache_dir, self.spec.weights)
        row["start_key"] = check_start(self.store, backbone_label(self.spec), backbone, self.spec.cache_dir)
        return dataset, backbone, self.tokens(backbone, announce)

    def _base_row(self, cell: Cell, started: dt.datetime) -> dict:
        """A ``runs`` row as a failed attempt: what is known before the cell runs."""
        spec = self.spec
        return {
            "status": "failed", "error": "", "config": json.dumps(config_to_dict(cell.config), sort_keys=True),
            "method_version": cell.method_cls.version, "method_source": cell.source,
            "is_oracle": bool(cell.method_cls.oracle), "is_reference": False, "partitions": bool(cell.method_cls.partitions),
            "package_version": cirbench.__version__, "git_commit": git_commit(),
            "package_versions": package_versions(), "torch_version": torch.__version__,
            "device": f"{spec.device} ({platform.processor() or platform.machine()})"
            + (f" {spec.precision}" if spec.precision != "fp32" else "") + (f" x{world_size()} ranks" if world_size() > 1 else ""),
            "dataset_key": "", "noise_manifest_hash": "", "noise_manifest_path": "", "eval_protocol": "",
            "n_train": 0, "n_noisy": 0, "epochs": spec.epochs, "started": started.isoformat(),
            "finished": "", "wall_seconds": 0.0, "steps": 0, "model_seconds": 0.0, "seconds_per_step": float("nan"),
            "n_dropped": 0, "dropped_path": "", "checkpoint_path": "", "n_warnings": 0,
        }

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
        """Evaluate one reference row with the starting backbone (unless already recorded)."""
        return self._one_writer(cell, announce, lambda: self._evaluate_reference(cell, announce))

    def _evaluate_reference(self, cell: Cell, announce: Callable[[str], None]) -> CellOutcome:
        """Evaluate one reference row and write its results (under its lock)."""
        key = cell.key
        started = dt.datetime.now(dt.timezone.utc)
        row = self._base_row(cell, started)
        row["is_reference"] = True
        tables, outcome = {}, CellOutcome(cell, "failed")
        try:
            dataset, backbone, tokens = self._start(key, row, announce)
            evaluation, tables = self._reference_evaluation(cell, dataset, backbone, tokens)
            final = evaluation.results
            row["n_nonfinite_queries"] = evaluation.n_nonfinite_queries
            confirm_cell()  # under torchrun: every rank finished it (see run_cell)
            row.update(status="completed", epochs=0)
            outcome = CellOutcome(cell, "completed", final)
        except Exception as exc:  # recorded like a failed cell; the grid goes on
            outcome = _failed(cell, row, exc)
        self._finish(key, row, started, tables)
        return outcome

    def _reference_evaluation(self, cell: Cell, dataset: CIRDataset, backbone, tokens) -> tuple[Evaluation, dict[str, pd.DataFrame]]:
        """A reference row's evaluation and its ``metrics`` and ``ranks`` tables, from ``backbone`` untrained."""
        device = torch.device(self.spec.device)
        method = cell.method_cls(backbone, cell.config, None).to(device)
        evaluation = evaluate(method, dataset, dataset.val, tokens, backbone.tokenize(dataset.val.texts), device)
        metrics = metrics_frame(evaluation.results, 0, "val", dataset.protocol.describe())
        return evaluation, {"metrics": metrics, "ranks": evaluation.ranks.assign(epoch=0)}

    def text_only_recall(self, key: CellKey, dataset: CIRDataset, backbone, tokens) -> float:
        """The ``text_only`` reference row's headline R@10 for ``key``'s seed, which the
        collapse guard compares with (:mod:`cirbench.engine.collapse`): as this grid's store
        holds it, else evaluated now with ``backbone``, the cell's starting backbone (a
        ``--launcher`` job runs no reference rows)."""
        ref = next(c for c in self.reference_cells() if c.key.method == TextOnly.name and c.key.seed == key.seed)
        if self.store.is_complete(ref.key.run_id):
            metrics = pd.read_parquet(self.store.part("metrics", ref.key.run_id))
        else:
            metrics = self._reference_evaluation(ref, dataset, backbone, tokens)[1]["metrics"]
        return final_recall(metrics)

    def save_checkpoint(self, cell: Cell, result: TrainResult, backbone, dataset: CIRDataset) -> Path:
        """Save a trained cell's weights to ``<output>/checkpoints/<run_id>.pt`` (see :mod:`cirbench.checkpoint`)."""
        spec, key = self.spec, cell.key
        metadata = {
            "run_id": key.run_id, "method": key.method, "method_source": cell.source, "backbone": spec.backbone,
            "weights": spec.weights, "seed": key.seed, "dataset": spec.dataset, "dataset_options": spec.dataset_options,
            "dataset_key": dataset.key, "data_root": str(spec.data_root or ""), "allow_missing": spec.allow_missing,
            "plugin_files": [str(p) for p in spec.plugin_files], "noise_protocol": spec.noise_protocol,
            "noise_rate": key.noise_rate,
        }
        return write_checkpoint(result.method, spec.output / "checkpoints" / f"{key.run_id}.pt", metadata)

    def _finish(self, key: CellKey, row: dict, started: dt.datetime, tables: dict) -> None:
        if not is_main_process():  # under torchrun, results are written once, by rank 0
            return
        finished = dt.datetime.now(dt.timezone.utc)
        row.update(finished=finished.isoformat(), wall_seconds=(finished - started).total_seconds())
        self.store.write_run(key, row, tables)

    def _one_writer(self, cell: Cell, announce: Callable[[str], None], work: Callable[[], CellOutcome]) -> CellOutcome:
        """``work()`` while holding the cell's lock (:mod:`cirbench.results.locks`; under
        torchrun rank 0 holds it and every rank follows its decision), unless the cell is
        complete (``skipped``) or another live process holds it (``locked``). A completed
        cell whose record is damaged has its files moved aside first, and is redone. A
        failure to write the results is a failed cell, not a crash of the grid."""
        key, lock, verdict = cell.key, None, ""
        if is_main_process():
            lock = CellLock(self.store.root, key.run_id)
            holder = lock.acquire()
            if holder is not None:
                lock, verdict = None, f"being run by {holder.describe()} (lock {holder.path})"
            elif not self.spec.overwrite:
                record = self.store.check(key.run_id)
                if record.problems:
                    moved = self.store.set_aside(key.run_id)
                    announce(f"{key.run_id}: redone, its record is damaged: " + "; ".join(str(p) for p in record.problems)
                             + (f" (files moved to {moved[0][1].parent.parent})" if moved else ""))
                elif record.complete:
                    verdict = "skipped"
        verdict = broadcast_object(verdict)
        try:
            if verdict == "skipped":
                return CellOutcome(cell, "skipped")
            if verdict:
                return CellOutcome(cell, "locked", error=verdict)
            return work()
        except OSError as exc:  # writing the results failed (a folder turned read-only, a full disk)
            if isinstance(exc.__context__, KeyboardInterrupt):
                raise exc.__context__ from None
            return CellOutcome(cell, "failed", error=f"cannot write the results of {key.run_id} under {self.store.root}: {exc}")
        finally:
            if lock is not None:
                lock.release()


def run_cell_by_id(spec: GridSpec, run_id: str, announce: Callable[[str], None]) -> dict[str, Any]:
    """The body of a worker process or a scheduler job: rebuild ``spec``'s grid, run its
    cell ``run_id`` (which writes the cell's parts to the store) and return the outcome's
    :meth:`CellOutcome.record`."""
    grid = Grid(spec)
    return grid.run_cell(grid.cell(run_id), progress=lambda info: None, announce=announce).record()
