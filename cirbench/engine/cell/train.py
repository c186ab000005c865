"""Training one cell: AdamW with a one-cycle schedule, seeded and deterministic on the CPU,
validation after every epoch (:mod:`cirbench.engine.cell.evaluate`), what the epochs record kept
by :class:`~cirbench.engine.cell.recorder.EpochRecorder`, and the loop's events for a profiler
(:mod:`cirbench.engine.cell.hooks`)."""

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
from cirbench.data.noise.holdout import HoldoutSplit
from cirbench.data.noise.injection import NoiseManifest
from cirbench.engine.cell import distributed
from cirbench.engine.cell.evaluate import EvaluatedTargets, Evaluation, evaluate, keeps_exactly
from cirbench.engine.cell.features import SamplePixels, pixel_encoder
from cirbench.engine.cell.hooks import HELD_OUT, VALIDATION, TrainingHooks
from cirbench.engine.cell.precision import use_precision
from cirbench.engine.cell.recorder import EpochRecorder, ProgressFn
from cirbench.engine.cell.step_rules import BatchGuard, check_epoch_kept, check_partition, check_step
from cirbench.method import Batch, Method, MethodConfig, Partition, StepOutput, TrainingContext



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


def _prepare_backbone(backbone: Backbone, device: torch.device, precision: str, gradient_checkpointing: bool,
                      batch_order: np.ndarray) -> bool:
    """Set the backbone's precision and checkpointing, and under ``torchrun`` shard it (after
    checking that every rank has the same ``batch_order``); whether the run is distributed."""
    use_precision(backbone, device, precision)  # bf16: the backbone's passes only (see cirbench.engine.cell.precision)
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
    """One training step: the method's output on ``batch``, checked against the contract
    (:mod:`cirbench.engine.cell.step_rules`: its loss finite, the batch unchanged) before anything
    is applied, then backward, gradient averaging across ranks, clipping and the update."""
    guard = BatchGuard(batch)
    out = method.training_step(batch, epoch, step)
    guard.check(method.name, epoch, step)
    check_step(method.name, out, batch, epoch, step)
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
        noise_rate=float(manifest.rate) if method_cls.reads_noise_rate else None,
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


def _epoch_passes(method: Method, epoch: int, n: int, device: torch.device, hooks: TrainingHooks) -> Partition | None:
    """The method's epoch-level passes (``Method.on_epoch_start``) and the partition they
    give, checked against the contract for a training split of ``n`` (batches on ``device``)."""
    hooks.epoch_pass_start(epoch)
    partition = method.on_epoch_start(epoch)
    hooks.epoch_pass_end(epoch)
    check_partition(method.name, partition, n, epoch, device)
    return partition


def _train_steps(method: Method, optimization: tuple, config: MethodConfig, make_batch: BatchMaker,
                 batches: list[np.ndarray], epoch: int, step: int, parallel: bool, record: EpochRecorder,
                 hooks: TrainingHooks) -> tuple[int, float]:
    """An epoch's steps: each batch built, its step taken (``optimization``: the optimizer and
    its scheduler) and recorded, then the epoch's kept set checked not empty
    (:func:`~cirbench.engine.cell.step_rules.check_epoch_kept`); the next step's number and the
    seconds in the steps."""
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
    check_epoch_kept(method.name, *record.decided(), epoch)
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
    manifest's flags (``manifest``: of ``noisy_train``) are used for purity and given to an
    oracle only, its rate to a method that ``reads_noise_rate`` only. ``holdout``: the held-out
    split settled with the noise (:func:`cirbench.engine.cell.life.noisy_split`; ``noisy_train``
    is its ``train`` part), evaluated after every epoch too. ``hooks``: the loop's events
    (:mod:`cirbench.engine.cell.hooks`), for a profiler. Under ``torchrun``
    (:mod:`cirbench.engine.cell.distributed`) every rank runs this with the same arguments; the
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
        record.start_epoch(_epoch_passes(method, epoch, n, device, hooks))
        evaluated_targets.clear()  # the steps change the weights they were encoded with
        step, seconds = _train_steps(method, (optimizer, scheduler), config, make_batch,
                                     hooks.epoch_batches(epoch, epoch_batches(n, batch_size, seed, epoch)), epoch, step,
                                     parallel, record, hooks)
        model_seconds += seconds
        record.end_epoch(epoch, step, *_evaluate_epoch(method, dataset, tokens, val_texts, holdout, holdout_texts, device,
                                                       evaluated_targets, epoch, hooks))
    return TrainResult(record.tables(), record.final, step, model_seconds, time.perf_counter() - started, method,
                       record.nonfinite)
