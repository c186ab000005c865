"""Training one cell: AdamW with a one-cycle schedule, seeded and deterministic on the CPU,
validation after every epoch, and the per-sample noise bookkeeping for purity."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd
import torch

from cirbench.backbones.base import Backbone, TextBatch
from cirbench.data.base import CIRDataset, TripletSplit
from cirbench.data.holdout import HoldoutSplit
from cirbench.data.noise import NoiseManifest
from cirbench.engine import distributed
from cirbench.engine.evaluate import Evaluation, evaluate, metrics_frame
from cirbench.engine.features import SamplePixels, pixel_encoder
from cirbench.engine.hooks import HELD_OUT, VALIDATION, TrainingHooks
from cirbench.engine.precision import use_precision
from cirbench.engine.purity import purity_rows
from cirbench.method import Batch, Method, MethodConfig, Partition, StepOutput, TrainingContext
from cirbench.results.selection import selected_epochs
from cirbench.results.store import MAIN_SCORE

ProgressFn = Callable[[dict], None]


@dataclass
class TrainResult:
    """A trained cell's tables (``metrics``, ``purity``, ``scores``, ``losses``, ``ranks``:
    the validation ranks of the epochs a selection rule picks), timings, and how many final
    validation queries had a non-finite score (counted as misses)."""

    tables: dict[str, pd.DataFrame]
    final: dict[str, dict[str, float]]
    steps: int
    model_seconds: float
    wall_seconds: float
    method: Method = field(repr=False)
    n_nonfinite_queries: int = 0


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int, shuffle: bool = True) -> list[np.ndarray]:
    """Index batches covering all ``n`` samples, at most ``batch_size`` each, near-equal in
    size (so no batch of one ends an epoch); the order depends only on (seed, epoch)."""
    order = np.random.default_rng([seed, epoch]).permutation(n) if shuffle else np.arange(n)
    return np.array_split(order, max(1, -(-n // batch_size)))


class BatchMaker:
    """Builds :class:`Batch` objects from cached tokens and pre-tokenised texts."""

    def __init__(self, split: TripletSplit, tokens: np.ndarray, texts: TextBatch, device: torch.device) -> None:
        self.split, self.tokens, self.texts, self.device = split, tokens, texts, device

    def __call__(self, index: np.ndarray) -> Batch:
        def images(which: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.asarray(self.tokens[which], dtype=np.float32)).to(self.device)

        idx = torch.from_numpy(index)
        return Batch(
            index=idx.to(self.device),
            reference=images(self.split.reference[index]),
            target=images(self.split.target[index]),
            text=self.texts.select(idx).to(self.device),
            texts=[self.split.texts[i] for i in index],
        )


class EvaluatedTargets:
    """``TrainingContext.evaluated_targets`` of one cell: the gallery features (the method's
    ``encode_targets``) that the held-out evaluation just encoded, looked up by training
    sample. The training gallery holds every training sample's target, so the epoch-level
    pass that follows the evaluation (TME's) may read its targets here instead of encoding
    them again with the same weights; the features are dropped before the next step."""

    def __init__(self, split: TripletSplit) -> None:
        self.groups = np.asarray(split.groups, dtype=object)
        self.target = np.asarray(split.target, dtype=np.int64)
        self.kept: dict[str, tuple[np.ndarray, np.ndarray, torch.Tensor]] = {}

    def keep(self, group: str, images: np.ndarray, features: torch.Tensor) -> None:
        """Keep a gallery group's ``images`` (ids) and their ``features`` (one row each)."""
        images = np.asarray(images, dtype=np.int64)
        order = np.argsort(images, kind="stable")
        self.kept[group] = (images[order], order, features)

    def clear(self) -> None:
        """Drop what was kept (the weights it was encoded with are about to change)."""
        self.kept = {}

    def __call__(self, index: torch.Tensor) -> torch.Tensor | None:
        """The kept features of the target of each training sample at ``index``, or None
        where one of them was not kept (no held-out evaluation since the last step)."""
        rows = np.asarray(index.detach().cpu(), dtype=np.int64).reshape(-1)
        found = []
        for group in dict.fromkeys(self.groups[rows]):
            if group not in self.kept:
                return None
            images, order, features = self.kept[group]
            mine = np.flatnonzero(self.groups[rows] == group)
            wanted = self.target[rows[mine]]
            at = np.searchsorted(images, wanted).clip(max=len(images) - 1)
            if not np.array_equal(images[at], wanted):
                return None
            found.append((mine, features[torch.from_numpy(order[at]).to(features.device)]))
        first = found[0][1]
        out = first.new_empty((len(rows), *first.shape[1:]))
        for mine, values in found:
            out[torch.from_numpy(mine).to(out.device)] = values
        return out


def keeps_exactly(device: torch.device) -> bool:
    """Whether features kept from an evaluation equal, bit for bit, those a method's own pass
    would encode on ``device``: they come from batches of another size and make-up, and only
    the CPU's kernels are checked to give each row the same bits in any batch
    (``tests/test_eval_cuts.py``); an accelerator's may pick another kernel for another size."""
    return device.type == "cpu"


def warmup_cosine(total_steps: int, warmup: float) -> Callable[[int], float]:
    """Learning-rate factor: linear warm-up over the first ``warmup`` share of the steps,
    then cosine decay to 1% (the shape of TME/SPRC's one-cycle schedule)."""
    rise = max(1, int(round(warmup * total_steps)))

    def factor(step: int) -> float:
        if step < rise:
            return (step + 1) / rise
        progress = min(1.0, (step - rise) / max(1, total_steps - rise))
        return 0.01 + 0.99 * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def build_optimizer(method: Method, config: MethodConfig, backbone: Backbone, total_steps: int):
    """AdamW over the trainable parameters with a warm-up + cosine learning-rate schedule."""
    params = [p for p in method.parameters() if p.requires_grad]
    lr = config.lr if config.lr is not None else backbone.default_lr
    optimizer = torch.optim.AdamW(
        params, lr=lr, betas=(config.beta1, config.beta2), eps=config.eps, weight_decay=config.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(total_steps, config.warmup))
    return optimizer, scheduler


def noise_tables(
    epoch: int,
    score_name: str,
    selected: np.ndarray | None,
    score: np.ndarray | None,
    sample_ids: list[str],
    is_noisy: np.ndarray,
    noise_type: np.ndarray,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``purity`` and ``scores`` rows of one epoch's per-sample view under ``score_name``
    (``selected`` None: no partition; ``score`` None: no score)."""
    n = len(sample_ids)
    rows = purity_rows(selected, score, is_noisy, noise_type)
    rows.insert(0, "epoch", epoch)
    rows.insert(1, "score_name", score_name)
    per_sample = pd.DataFrame({
        "sample_id": sample_ids, "epoch": epoch, "score_name": score_name,
        "score": score if score is not None else np.full(n, np.nan),
        "selected_clean": selected if selected is not None else pd.array([pd.NA] * n, dtype="boolean"),
        "is_noisy": is_noisy, "noise_type": noise_type,
    })
    return rows, per_sample


def _record_extra_scores(out: StepOutput, index: np.ndarray, extra: dict[str, np.ndarray], n: int) -> None:
    """Copy a step's ``extra_scores`` into the epoch's per-name arrays (NaN where unseen)."""
    for name, values in out.extra_scores.items():
        if name == MAIN_SCORE:
            raise ValueError(f"extra_scores may not be named {MAIN_SCORE!r}: that is StepOutput.noise_score")
        values = values.detach().float().cpu().numpy().reshape(-1)
        if len(values) != len(index):
            raise ValueError(f"extra score {name!r} has {len(values)} values for a batch of {len(index)}")
        extra.setdefault(name, np.full(n, np.nan))[index] = values


class EpochRecorder:
    """The bookkeeping of one cell's training: every step's losses and, per epoch, the
    validation metrics and the method's per-sample view (``purity`` and ``scores`` rows of
    its main noise score and of each extra score, and the held-out split's metrics where
    there is one); reports progress after each step and each epoch's validation. The tables
    of :class:`TrainResult` come from here."""

    def __init__(self, noisy_train: TripletSplit, manifest: NoiseManifest, protocol: str, total_steps: int,
                 progress: ProgressFn, parallel: bool) -> None:
        self.n, self.sample_ids = len(noisy_train), noisy_train.sample_ids
        self.is_noisy, self.noise_type = manifest.is_noisy, manifest.noise_type
        self.protocol, self.total_steps, self.progress, self.parallel = protocol, total_steps, progress, parallel
        self.losses: list[dict] = []
        self.metrics: list[pd.DataFrame] = []
        self.purity: list[pd.DataFrame] = []
        self.scores: list[pd.DataFrame] = []
        self.final: dict[str, dict[str, float]] = {}
        self.epoch_ranks: dict[int, pd.DataFrame] = {}
        self.nonfinite = 0

    def start_epoch(self, partition: Partition | None) -> None:
        """Begin an epoch from the method's epoch-level ``partition`` (or none: per-step views)."""
        n = self.n
        self.score = np.full(n, np.nan) if partition is None else np.asarray(partition.noise_score, dtype=float).copy()
        self.selected = None if partition is None else np.asarray(partition.selected_clean, dtype=bool).copy()
        self.seen_selected = np.zeros(n, dtype=bool) if partition is None else np.ones(n, dtype=bool)
        self.extra: dict[str, np.ndarray] = {}

    def record_step(self, epoch: int, step: int, index: np.ndarray, out: StepOutput) -> None:
        """A step's per-sample view of its batch ``index`` and its losses."""
        if out.noise_score is not None:
            self.score[index] = out.noise_score.detach().float().cpu().numpy()
        if out.selected_clean is not None:
            if self.selected is None:
                self.selected = np.ones(self.n, dtype=bool)
            self.selected[index] = out.selected_clean.detach().cpu().numpy().astype(bool)
            self.seen_selected[index] = True
        _record_extra_scores(out, index, self.extra, self.n)
        self.losses.append({"epoch": epoch, "step": step, "name": "total", "value": float(out.loss.detach())})
        self.losses.extend({"epoch": epoch, "step": step, "name": k, "value": float(v)} for k, v in out.components.items())
        self.progress({"epoch": epoch, "step": step, "total_steps": self.total_steps, "loss": float(out.loss.detach())})

    def end_epoch(self, epoch: int, step: int, evaluation: Evaluation, held_out: Evaluation | None = None) -> None:
        """The epoch's validation ``evaluation``, its ``held_out`` one (if any) and its
        per-sample views (a view is recorded only where every sample has a value)."""
        results = evaluation.results
        if self.parallel:
            distributed.check_same_on_all_ranks(self.score, "per-sample noise scores")
            for name in sorted(self.extra):
                distributed.check_same_on_all_ranks(self.extra[name], f"per-sample {name} scores")
        self.final, self.nonfinite = results, evaluation.n_nonfinite_queries
        self.epoch_ranks[epoch] = evaluation.ranks
        self.metrics.append(metrics_frame(results, epoch, "val", self.protocol))
        if held_out is not None:
            self.metrics.append(metrics_frame(held_out.results, epoch, "holdout", self.protocol))
        has_partition = self.selected is not None and self.seen_selected.all()
        has_scores = bool(np.isfinite(self.score).all())
        views = []  # (score name, partition, score) recorded for this epoch
        if has_partition or has_scores:
            views.append((MAIN_SCORE, self.selected if has_partition else None, self.score if has_scores else None))
        views += [(name, None, values) for name, values in sorted(self.extra.items()) if np.isfinite(values).all()]
        for name, kept, values in views:
            rows, per_sample = noise_tables(epoch, name, kept, values, self.sample_ids, self.is_noisy, self.noise_type)
            self.purity.append(rows)
            self.scores.append(per_sample)
        self.progress({"epoch": epoch, "step": step, "total_steps": self.total_steps, "recall": results})

    def tables(self) -> dict[str, pd.DataFrame]:
        """The ``losses``, ``metrics``, ``purity`` and ``scores`` tables, and the ``ranks`` of
        the epochs a selection rule picks (:mod:`cirbench.results.selection`), each once."""
        def concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
            return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

        metrics = concat(self.metrics)
        kept = sorted({e for e in selected_epochs(metrics).values() if e is not None}) if len(metrics) else []
        ranks = concat([self.epoch_ranks[e].assign(epoch=e) for e in kept])
        return {"losses": pd.DataFrame(self.losses), "metrics": metrics, "purity": concat(self.purity),
                "scores": concat(self.scores), "ranks": ranks}


def _prepare_backbone(backbone: Backbone, device: torch.device, precision: str, gradient_checkpointing: bool,
                      batch_order: np.ndarray) -> bool:
    """Set the backbone's precision and checkpointing, and under ``torchrun`` shard it (after
    checking that every rank has the same ``batch_order``); whether the run is distributed."""
    use_precision(backbone, device, precision)  # bf16: the backbone's passes only (see cirbench.engine.precision)
    if gradient_checkpointing:
        if not hasattr(backbone, "gradient_checkpointing"):
            raise ValueError(f"backbone {backbone.name!r} does not support gradient checkpointing")
        backbone.gradient_checkpointing = True
    parallel = distributed.is_distributed()
    if parallel:
        distributed.shard_backbone(backbone)
        distributed.check_same_on_all_ranks(batch_order, "batch orders")
    return parallel


def optimizer_step(method: Method, optimizer, scheduler, config: MethodConfig, batch: Batch, epoch: int, step: int,
                   parallel: bool) -> StepOutput:
    """One training step: the method's loss on ``batch``, checked finite before anything is
    applied, then backward, gradient averaging across ranks, clipping and the update."""
    out = method.training_step(batch, epoch, step)
    if not torch.isfinite(out.loss):  # before the step, so a non-finite loss is never applied
        raise FloatingPointError(f"{method.name}: loss is {out.loss.item()} at epoch {epoch}, step {step}")
    optimizer.zero_grad(set_to_none=True)
    out.loss.backward()
    if parallel:
        distributed.average_gradients(method.parameters())
    if config.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(method.parameters(), config.grad_clip)
    optimizer.step()
    scheduler.step()
    return out


def _context(method_cls: type[Method], backbone: Backbone, dataset: CIRDataset, noisy_train: TripletSplit,
             manifest: NoiseManifest, tokens: np.ndarray, make_batch: BatchMaker, epochs: int, batch_size: int, seed: int,
             device: torch.device, evaluated_targets: EvaluatedTargets) -> TrainingContext:
    """What the method is told about the cell (:class:`~cirbench.method.TrainingContext`)."""
    n = len(noisy_train)
    return TrainingContext(
        num_train=n, epochs=epochs, batch_size=batch_size, steps_per_epoch=len(epoch_batches(n, batch_size, seed, 0)),
        seed=seed, device=device,
        iterate=lambda shuffle=True: (make_batch(i) for i in epoch_batches(n, batch_size, seed + 7919, 0, shuffle)),
        noise_flags=manifest.is_noisy.copy() if method_cls.oracle else None,
        pixels=SamplePixels(noisy_train, dataset.images, backbone, device), encode_pixels=pixel_encoder(backbone, tokens),
        evaluated_targets=evaluated_targets,
    )


def _evaluate_epoch(method: Method, dataset: CIRDataset, tokens: np.ndarray, val_texts: TextBatch,
                    holdout: HoldoutSplit | None, holdout_texts: TextBatch | None, device: torch.device,
                    evaluated_targets: EvaluatedTargets, epoch: int,
                    hooks: TrainingHooks) -> tuple[Evaluation, Evaluation | None]:
    """An epoch's evaluations: the validation queries and, where there is a held-out split,
    its queries against the training gallery (whose features are kept for the next epoch's
    start where that is exact: :func:`keeps_exactly`)."""
    held_out = None
    if holdout is not None:
        hooks.evaluation_start(epoch, HELD_OUT)
        held_out = evaluate(method, dataset, holdout.holdout, tokens, holdout_texts, device, gallery=holdout.gallery,
                            keep_targets=evaluated_targets.keep if keeps_exactly(device) else None)
        hooks.evaluation_end(epoch, HELD_OUT, held_out)
    hooks.evaluation_start(epoch, VALIDATION)
    validation = evaluate(method, dataset, dataset.val, tokens, val_texts, device)
    hooks.evaluation_end(epoch, VALIDATION, validation)
    return validation, held_out


def _epoch_passes(method: Method, epoch: int, hooks: TrainingHooks) -> Partition | None:
    """The method's epoch-level passes (``Method.on_epoch_start``) and the partition they give."""
    hooks.epoch_pass_start(epoch)
    partition = method.on_epoch_start(epoch)
    hooks.epoch_pass_end(epoch)
    return partition


def _train_steps(method: Method, optimization: tuple, config: MethodConfig, make_batch: BatchMaker,
                 batches: list[np.ndarray], epoch: int, step: int, parallel: bool, record: EpochRecorder,
                 hooks: TrainingHooks) -> tuple[int, float]:
    """An epoch's steps: each batch built, its step taken (``optimization``: the optimizer and
    its scheduler) and recorded; the next step's number and the seconds in the steps."""
    seconds = 0.0
    for index in batches:
        hooks.batch_start(epoch, step)
        batch = make_batch(index)
        hooks.batch_end(epoch, step)
        hooks.step_start(epoch, step)
        tick = time.perf_counter()
        out = optimizer_step(method, *optimization, config, batch, epoch, step, parallel)
        seconds += time.perf_counter() - tick
        hooks.step_end(epoch, step, out)
        record.record_step(epoch, step, index, out)
        step += 1
    return step, seconds


def train_cell(
    method_cls: type[Method],
    config: MethodConfig,
    backbone: Backbone,
    dataset: CIRDataset,
    noisy_train: TripletSplit,
    manifest: NoiseManifest,
    tokens: np.ndarray,
    epochs: int,
    batch_size: int,
    seed: int,
    device: torch.device = torch.device("cpu"),
    progress: ProgressFn = lambda info: None,
    precision: str = "fp32",
    gradient_checkpointing: bool = False,
    holdout: HoldoutSplit | None = None,
    hooks: TrainingHooks | None = None,
) -> TrainResult:
    """Train ``method_cls`` on ``noisy_train`` and evaluate after every epoch.

    The method sees only ``noisy_train`` (corrupted texts and images, no flags); the
    manifest's flags (``manifest``: of ``noisy_train``) are used here for purity and handed
    to the method only if it is an oracle. ``holdout``: the held-out split settled with the
    noise (:func:`cirbench.engine.cell.noisy_split`; ``noisy_train`` is its ``train`` part),
    whose queries are evaluated after every epoch too. ``hooks``: the loop's events
    (:mod:`cirbench.engine.hooks`), for a profiler. Under ``torchrun``
    (:mod:`cirbench.engine.distributed`) every rank runs this with the same arguments; the
    backbone's passes are sharded and the result is one process's with the same global batch.
    """
    started = time.perf_counter()
    hooks = hooks or TrainingHooks()
    torch.manual_seed(seed)
    holdout_texts = None if holdout is None else backbone.tokenize(holdout.holdout.texts)
    n = len(noisy_train)
    parallel = _prepare_backbone(backbone, device, precision, gradient_checkpointing,
                                 np.concatenate(epoch_batches(n, batch_size, seed, 0)))
    make_batch = BatchMaker(noisy_train, tokens, backbone.tokenize(noisy_train.texts), device)
    val_texts = backbone.tokenize(dataset.val.texts)
    evaluated_targets = EvaluatedTargets(noisy_train)
    context = _context(method_cls, backbone, dataset, noisy_train, manifest, tokens, make_batch, epochs, batch_size, seed,
                       device, evaluated_targets)
    method = method_cls(backbone, config, context).to(device)
    if parallel:
        distributed.broadcast_parameters(method)
    total_steps = epochs * context.steps_per_epoch
    optimizer, scheduler = build_optimizer(method, config, backbone, total_steps)
    record = EpochRecorder(noisy_train, manifest, dataset.protocol.describe(), total_steps, progress, parallel)
    model_seconds, step = 0.0, 0
    for epoch in range(epochs):
        method.train()
        record.start_epoch(_epoch_passes(method, epoch, hooks))
        evaluated_targets.clear()  # the steps change the weights they were encoded with
        step, seconds = _train_steps(method, (optimizer, scheduler), config, make_batch,
                                     hooks.epoch_batches(epoch, epoch_batches(n, batch_size, seed, epoch)), epoch, step,
                                     parallel, record, hooks)
        model_seconds += seconds
        record.end_epoch(epoch, step, *_evaluate_epoch(method, dataset, tokens, val_texts, holdout, holdout_texts, device,
                                                       evaluated_targets, epoch, hooks))
    return TrainResult(record.tables(), record.final, step, model_seconds, time.perf_counter() - started, method,
                       record.nonfinite)
