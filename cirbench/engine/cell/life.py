"""One cell's life, start to finish: under the cell's lock (unless it is complete), the
dataset and a fresh backbone from the recorded start, the noise injection, the held-out
split (settled here once and handed to training), training, the collapse and chance checks, the
``runs`` row and the write of every table; a reference row's evaluation likewise. A cell
computes with one thread and deterministic algorithms (:func:`cirbench.settings.kernels.cell_threads`),
and its ``runs`` row records the CPU and the kernels it computed with
(:func:`cirbench.settings.kernels.cell_record`).

The grid (:mod:`cirbench.engine.running.grid`) turns a spec into cells and says which are pending;
what its cells share (the spec, the store, the loaded dataset, the tower tokens) the
functions here read from its :class:`~cirbench.engine.cell.resources.CellResources`.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

import cirbench
from cirbench.backbones.registry import BACKBONES
from cirbench.method.checkpoint import save_checkpoint as write_checkpoint
from cirbench.settings.config import config_to_dict
from cirbench.data.base import CIRDataset, TripletSplit
from cirbench.data.noise.holdout import HoldoutSplit, hold_out
from cirbench.data.noise.injection import NoiseManifest
from cirbench.data.noise.instance_file import noisy_training
from cirbench.engine.cell.distributed import broadcast_object, confirm_cell, is_main_process, settle_failure, world_size
from cirbench.engine.cell.evaluate import METRICS_VERSION, Evaluation, evaluate, metrics_frame
from cirbench.engine.cell.kept_sets import kept_rows, kept_set_fields, kept_set_trainer
from cirbench.engine.cell.resources import CellResources, check_start, pooled_features
from cirbench.engine.planning.spec import Cell, GridSpec, backbone_label, reference_cells
from cirbench.engine.cell.train import ProgressFn, TrainResult, train_cell
from cirbench.settings.kernels import cell_record, cell_threads
from cirbench.method import method_role
from cirbench.settings.provenance import git_commit, package_versions
from cirbench.results.chance import below_chance_reason
from cirbench.results.collapse import collapse_reason, final_recall
from cirbench.results.labels import TEXT_ONLY_ROW
from cirbench.results.locks import CellLock
from cirbench.results.replays import stale_replay
from cirbench.results.store import CellKey, ResultsStore

Announce = Callable[[str], None]


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


@dataclass
class NoisySplit:
    """A cell's training data, settled once: the noisy split and the whole split's manifest
    (with the held-out samples marked), the part trained on and its manifest, and the
    held-out split evaluated every epoch (None when nothing is held out)."""

    manifest: NoiseManifest
    train: TripletSplit
    train_manifest: NoiseManifest
    holdout: HoldoutSplit | None


def noisy_split(spec: GridSpec, key: CellKey, dataset: CIRDataset, tokens: np.ndarray) -> NoisySplit:
    """The noise injection of ``key`` (its protocol, rate and seed) and the held-out split."""
    noisy, manifest = noisy_training(dataset, spec.noise_protocol, key.noise_rate, key.seed, spec.noise_file,
                                     image_features=lambda: pooled_features(tokens))
    if not spec.holdout:
        return NoisySplit(manifest, noisy, manifest, None)
    held = hold_out(noisy, manifest, spec.holdout, key.seed)
    return NoisySplit(held.manifest, held.train, held.train_manifest, held)


def failed(cell: Cell, row: dict, exc: Exception) -> CellOutcome:
    """A failed cell's outcome, its traceback recorded in ``row`` (agreed on by every rank
    under torchrun: :func:`~cirbench.engine.cell.distributed.settle_failure`)."""
    summary, error = settle_failure(exc)
    row["error"] = error[-4000:]
    return CellOutcome(cell, "failed", error=summary)


def base_row(spec: GridSpec, cell: Cell, started: dt.datetime) -> dict:
    """A ``runs`` row as a failed attempt: what is known before the cell runs."""
    return {
        "status": "failed", "error": "", "config": json.dumps(config_to_dict(cell.config), sort_keys=True),
        "method_version": cell.method_cls.version, "method_source": cell.source,
        "is_oracle": bool(cell.method_cls.oracle), "reads_noise_rate": bool(cell.method_cls.reads_noise_rate),
        "is_reference": False, "role": method_role(cell.method_cls),
        "partitions": bool(cell.method_cls.partitions),
        "package_version": cirbench.__version__, "git_commit": git_commit(),
        "package_versions": package_versions(), "torch_version": torch.__version__,
        "device": f"{spec.device} ({platform.processor() or platform.machine()})"
        + (f" {spec.precision}" if spec.precision != "fp32" else "") + (f" x{world_size()} ranks" if world_size() > 1 else ""),
        "dataset_key": "", "noise_manifest_hash": "", "noise_manifest_path": "", "eval_protocol": "",
        "metrics_version": METRICS_VERSION,
        "n_train": 0, "n_noisy": 0, "epochs": spec.epochs, "started": started.isoformat(),
        "finished": "", "wall_seconds": 0.0, "steps": 0, "model_seconds": 0.0, "seconds_per_step": float("nan"),
        "n_dropped": 0, "dropped_path": "", "checkpoint_path": "", "n_warnings": 0,
        **cell_record(),  # the CPU, the kernels' instruction set, the threads and the pins (cirbench.settings.kernels)
        **kept_set_fields(cell.kept),  # a kept-set cell: its kind, kept set and source (cirbench.engine.cell.kept_sets)
    }


def start(resources: CellResources, key: CellKey, row: dict, announce: Announce) -> tuple[CIRDataset, Any, np.ndarray]:
    """The dataset (recorded in ``row``), a fresh backbone for ``key``'s seed (its start
    checked against the folder and recorded) and the tower tokens."""
    spec, dataset = resources.spec, resources.dataset()
    row.update(dataset_key=dataset.key, eval_protocol=dataset.protocol.describe(),
               n_dropped=len(dataset.info.get("dropped", [])), dropped_path=str(resources.dropped_path or ""),
               n_warnings=int(dataset.info.get("n_warnings", 0)))
    backbone = BACKBONES.get(spec.backbone)(key.seed, spec.cache_dir, spec.weights)
    row["start_key"] = check_start(resources.store, backbone_label(spec), backbone, spec.cache_dir)
    return dataset, backbone, resources.tokens(backbone, announce)


def reference_evaluation(resources: CellResources, cell: Cell, dataset: CIRDataset, backbone,
                         tokens) -> tuple[Evaluation, dict[str, pd.DataFrame]]:
    """A reference row's evaluation and its ``metrics`` and ``ranks`` tables, from ``backbone`` untrained."""
    device = torch.device(resources.spec.device)
    method = cell.method_cls(backbone, cell.config, None).to(device)
    evaluation = evaluate(method, dataset, dataset.val, tokens, backbone.tokenize(dataset.val.texts), device)
    metrics = metrics_frame(evaluation.results, 0, "val", dataset.protocol.describe())
    return evaluation, {"metrics": metrics, "ranks": evaluation.ranks.assign(epoch=0)}


def text_only_recall(resources: CellResources, key: CellKey, dataset: CIRDataset, backbone, tokens) -> float:
    """The ``text_only`` reference row's headline R@10 for ``key``'s seed, which the
    collapse guard compares with (:mod:`cirbench.results.collapse`): as the store holds it,
    else evaluated now with ``backbone``, the cell's starting backbone (a ``--launcher`` job
    runs no reference rows)."""
    ref = next(c for c in reference_cells(resources.spec) if c.key.method == TEXT_ONLY_ROW and c.key.seed == key.seed)
    if resources.store.is_complete(ref.key.run_id):
        metrics = pd.read_parquet(resources.store.part("metrics", ref.key.run_id))
    else:
        metrics = reference_evaluation(resources, ref, dataset, backbone, tokens)[1]["metrics"]
    return final_recall(metrics)


def save_checkpoint(spec: GridSpec, cell: Cell, result: TrainResult, dataset: CIRDataset) -> Path:
    """Save a trained cell's weights to ``<output>/checkpoints/<run_id>.pt`` (see :mod:`cirbench.method.checkpoint`)."""
    key = cell.key
    metadata = {
        "run_id": key.run_id, "method": key.method, "method_source": cell.source, "backbone": spec.backbone,
        "weights": spec.weights, "seed": key.seed, "dataset": spec.dataset, "dataset_options": spec.dataset_options,
        "dataset_key": dataset.key, "data_root": str(spec.data_root or ""), "allow_missing": spec.allow_missing,
        "plugin_files": [str(p) for p in spec.plugin_files], "noise_protocol": spec.noise_protocol,
        "noise_rate": key.noise_rate,
    }
    return write_checkpoint(result.method, spec.output / "checkpoints" / f"{key.run_id}.pt", metadata)


def _train(resources: CellResources, cell: Cell, progress: ProgressFn, announce: Announce) -> CellOutcome:
    """Train one cell and write its results (under its lock)."""
    spec, key = resources.spec, cell.key
    started = dt.datetime.now(dt.timezone.utc)
    row = base_row(spec, cell, started)
    tables: dict[str, pd.DataFrame] = {}
    try:
        dataset, backbone, tokens = start(resources, key, row, announce)
        split = noisy_split(spec, key, dataset, tokens)
        row.update(
            noise_manifest_hash=split.manifest.hash, noise_manifest_path=str(split.manifest.save(spec.output / "manifests")),
            n_train=len(split.train_manifest.table), n_noisy=int(split.train_manifest.is_noisy.sum()),
            holdout=float(spec.holdout), n_holdout=0 if split.holdout is None else len(split.holdout.holdout),
        )
        text_only = text_only_recall(resources, key, dataset, backbone, tokens)  # before training: the starting backbone
        method_cls = cell.method_cls
        if cell.kept is not None:  # the perfect filter's step on the kept set's rows
            rows = kept_rows(cell.kept, split.train_manifest, split.train.sample_ids, key.seed, resources.store)
            method_cls = kept_set_trainer(method_cls, rows, key.method)
            row.update(rows.recorded())
            row.update({flag: True for flag, read in rows.privileged.items() if read})  # a source's privileged reads
        result = train_cell(
            method_cls, cell.config, backbone, dataset, split.train, split.train_manifest, tokens,
            spec.epochs, spec.batch_size, key.seed, torch.device(spec.device), progress,
            precision=spec.precision, gradient_checkpointing=spec.gradient_checkpointing, holdout=split.holdout,
            hooks=resources.hooks,
        )
        tables = result.tables
        row["n_nonfinite_queries"] = result.n_nonfinite_queries
        if spec.save and is_main_process():  # under torchrun, rank 0 alone writes the weights
            row["checkpoint_path"] = str(save_checkpoint(spec, cell, result, dataset))
        confirm_cell()  # under torchrun: every rank finished the cell (or a failure elsewhere surfaces here)
        reason = collapse_reason(tables["metrics"], tables["losses"], text_only)  # flags, not failures
        chance = below_chance_reason(tables["purity"], row["n_noisy"])
        row.update(
            status="completed", steps=result.steps, model_seconds=result.model_seconds,
            seconds_per_step=result.model_seconds / max(result.steps, 1), collapsed=bool(reason), collapse_reason=reason,
            below_chance=bool(chance), below_chance_reason=chance,
        )
        outcome = CellOutcome(cell, "completed", result.final, result=result)
    except KeyboardInterrupt:
        row.update(status="interrupted", error="interrupted by the user")
        finish(resources.store, key, row, started, {})
        raise
    except Exception as exc:  # a failed cell is recorded and the grid goes on (on every rank: settle_failure)
        outcome = failed(cell, row, exc)
    finish(resources.store, key, row, started, tables)
    return outcome


def _evaluate_reference(resources: CellResources, cell: Cell, announce: Announce) -> CellOutcome:
    """Evaluate one reference row and write its results (under its lock)."""
    key = cell.key
    started = dt.datetime.now(dt.timezone.utc)
    row = base_row(resources.spec, cell, started)
    row["is_reference"] = True
    tables: dict[str, pd.DataFrame] = {}
    try:
        dataset, backbone, tokens = start(resources, key, row, announce)
        evaluation, tables = reference_evaluation(resources, cell, dataset, backbone, tokens)
        row["n_nonfinite_queries"] = evaluation.n_nonfinite_queries
        confirm_cell()  # under torchrun: every rank finished it (see _train)
        row.update(status="completed", epochs=0)
        outcome = CellOutcome(cell, "completed", evaluation.results)
    except Exception as exc:  # recorded like a failed cell; the grid goes on
        outcome = failed(cell, row, exc)
    finish(resources.store, key, row, started, tables)
    return outcome


def finish(store: ResultsStore, key: CellKey, row: dict, started: dt.datetime, tables: dict) -> None:
    """Write the cell's tables and, last, its ``runs`` row with the timings (rank 0 only under torchrun)."""
    if not is_main_process():
        return
    finished = dt.datetime.now(dt.timezone.utc)
    row.update(finished=finished.isoformat(), wall_seconds=(finished - started).total_seconds())
    store.write_run(key, row, tables)


def one_writer(resources: CellResources, cell: Cell, announce: Announce, work: Callable[[], CellOutcome]) -> CellOutcome:
    """``work()`` while holding the cell's lock (:mod:`cirbench.results.locks`; under
    torchrun rank 0 holds it and every rank follows its decision), unless the cell is
    complete (``skipped``) or another live process holds it (``locked``). A completed
    cell whose record is damaged, or a replay whose source was re-run since with another
    kept set, has its files moved aside first, and is redone. A
    failure to write the results is a failed cell, not a crash of the grid."""
    key, store, lock, verdict = cell.key, resources.store, None, ""
    if is_main_process():
        lock = CellLock(store.root, key.run_id)
        holder = lock.acquire()
        if holder is not None:
            lock, verdict = None, f"being run by {holder.describe()} (lock {holder.path})"
        elif not resources.spec.overwrite:
            record = store.check(key.run_id)
            if record.problems:
                moved = store.set_aside(key.run_id)
                announce(f"{key.run_id}: redone, its record is damaged: " + "; ".join(str(p) for p in record.problems)
                         + (f" (files moved to {moved[0][1].parent.parent})" if moved else ""))
            elif record.complete:
                stale = stale_replay(store.root, key.run_id) if cell.kept is not None else None
                if stale:
                    moved = store.set_aside(key.run_id)
                    announce(f"{key.run_id}: redone, {stale}"
                             + (f" (its files moved to {moved[0][1].parent.parent})" if moved else ""))
                else:
                    verdict = "skipped"
    verdict = broadcast_object(verdict)
    try:
        if verdict == "skipped":
            return CellOutcome(cell, "skipped")
        if verdict:
            return CellOutcome(cell, "locked", error=verdict)
        with cell_threads():  # the same threads wherever and beside whatever the cell runs
            return work()
    except OSError as exc:  # writing the results failed (a folder turned read-only, a full disk)
        if isinstance(exc.__context__, KeyboardInterrupt):
            raise exc.__context__ from None
        return CellOutcome(cell, "failed", error=f"cannot write the results of {key.run_id} under {store.root}: {exc}")
    finally:
        if lock is not None:
            lock.release()


def run_cell(resources: CellResources, cell: Cell, progress: ProgressFn, announce: Announce = print) -> CellOutcome:
    """Run one trained cell (unless complete and not ``overwrite``, or held by another live
    process: :func:`one_writer`) and write its results."""
    return one_writer(resources, cell, announce, lambda: _train(resources, cell, progress, announce))


def run_reference(resources: CellResources, cell: Cell, announce: Announce = print) -> CellOutcome:
    """Evaluate one reference row with the starting backbone (unless already recorded)."""
    return one_writer(resources, cell, announce, lambda: _evaluate_reference(resources, cell, announce))
