"""A study planned without training (``cirbench study FILE --plan``): every grid built as
the study would build it (so every cell resolved, with its run id and whether the results
folder already holds it), its dataset's files checked and loaded, its noise instances built,
its backbone built from its configuration and weights, and each cell's cost estimated from
a FLOP count.

Cost: one training step of each row's method is counted with ``torch.utils.flop_counter``'s
formulas (forward and backward: matrix products, convolutions and attention; two FLOPs per
multiply-add) on the grid's own backbone, at batches of half :data:`COUNT_BATCH` and
:data:`COUNT_BATCH` training triplets of the dataset, and extrapolated along the line through
the two to the grid's batch size (a per-step part that does not grow with the batch, such as
ConeSep's random images through the tower, stays fixed); once in the first epoch's phase
and once in the last's (a warm-up differs: INTENT's sends every reference through the tower
again). A cell's cost is its first epoch's steps at the first count and its other epochs'
at the last (a warm-up longer than an epoch is counted at the main phase after its first epoch). The
frozen tower's features (computed once per image and cached), the evaluations and the
epoch-level passes (TME's per-sample loss) come on top; docs/real-datasets.md says how much.
Hours are the FLOPs over a stated sustained rate (:data:`DEFAULT_TFLOPS`, or ``--tflops``).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from cirbench.api.study import study_grid
from cirbench.api.tuned import tuned_plan
from cirbench.backbones.registry import BACKBONES
from cirbench.data.datasets.check import DatasetProblemsError
from cirbench.data.noise.instance_file import noisy_training
from cirbench.data.datasets.registry import DATASETS
from cirbench.engine.running.grid import Grid
from cirbench.method import Batch, TrainingContext
from cirbench.results.labels import rate_label
from cirbench.settings.study import load_study

COUNT_BATCH = 8
"""The triplets of the counted step (enough for TME's two-component mixture in its main phase)."""
DEFAULT_TFLOPS = 100.0
"""The sustained rate the hours assume, in TFLOP/s (docs/real-datasets.md says why)."""


class PlanError(ValueError):
    """A study whose grid cannot run: its data files, noise or backbone fail a check."""


class FlopCount(TorchDispatchMode):
    """The FLOPs of the operators run inside it, by ``torch.utils.flop_counter``'s formulas
    (its ``FlopCounterMode`` also tracks modules, which a method's no-grad passes over
    parameters trip)."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.total += int(formula(*args, **kwargs, out_val=out))
        return out


class _FeaturesNeeded(Exception):
    """A noise protocol asked for the tower's features (built at the run's pre-flight instead)."""


@dataclass
class RowCost:
    """One row (method label) of a grid: its cells, steps per cell and counted step GFLOP at the grid's batch."""

    label: str
    cells: int
    epochs: int
    steps: int
    first_gflop: float
    step_gflop: float
    """The counted GFLOP of a step in the first epoch (``first_gflop``) and in the last."""

    @property
    def pflop(self) -> float:
        """The row's training FLOPs, in PFLOP (1e15): the first epoch at its count, the others at the last's."""
        per_epoch = self.steps / self.epochs
        return self.cells * per_epoch * (self.first_gflop + (self.epochs - 1) * self.step_gflop) / 1e6


@dataclass
class GridPlan:
    """A planned grid: where it is in the file, its setting, its cells (pending of all), its
    rows' costs and what its checks said."""

    where: str
    setting: str
    cells: int
    pending: int
    rows: list[RowCost] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pending_labels: dict[str, str] = field(default_factory=dict)
    """The row label of each pending cell, by run id (what :mod:`cirbench.api.pace` times)."""

    @property
    def pflop(self) -> float:
        """The grid's training FLOPs, in PFLOP."""
        return sum(row.pflop for row in self.rows)


def _batch(backbone, dataset, device: torch.device, size: int = COUNT_BATCH) -> Batch:
    """The first ``size`` training triplets of ``dataset`` as the harness batches them (tower
    tokens of their images, their texts tokenised)."""
    split = dataset.train
    rows = np.arange(min(size, len(split)))
    with torch.no_grad():
        images = lambda idx: backbone.encode_image_tokens(  # noqa: E731
            backbone.preprocess([dataset.images.load(int(i)) for i in idx]).to(device)).float()
        reference, target = images(split.reference[rows]), images(split.target[rows])
    texts = [split.texts[i] for i in rows]
    text = backbone.tokenize(texts)
    return Batch(torch.as_tensor(rows, device=device), reference, target, type(text)(text.ids.to(device), text.mask.to(device)),
                 texts)


Pixels = Callable[[torch.Tensor, str], torch.Tensor]
"""``TrainingContext.pixels``: the tower's input of a batch's reference or target images."""


def dataset_pixels(backbone, dataset) -> Pixels:
    """The preprocessed images of the training triplets at ``index``, by ``role``."""
    split = dataset.train

    def pixels(index: torch.Tensor, role: str) -> torch.Tensor:
        images = split.reference if role == "reference" else split.target
        return backbone.preprocess([dataset.images.load(int(i)) for i in images[index.cpu().numpy()]])

    return pixels


def scaled_step_gflop(cell, backbone, batch: Batch, epochs: int, batch_size: int, device: torch.device,
                      epoch: int | None = None, pixels: Pixels | None = None) -> float:
    """:func:`step_gflop` at ``batch`` and its first half, extrapolated linearly to ``batch_size``."""
    half = len(batch) // 2
    if half == 0:  # a one-triplet dataset: no line to draw
        return step_gflop(cell, backbone, batch, epochs, device, epoch, pixels) * batch_size
    rows = torch.arange(half, device=batch.index.device)
    small = Batch(batch.index[:half], batch.reference[:half], batch.target[:half], batch.text.select(rows), batch.texts[:half])
    low, high = (step_gflop(cell, backbone, b, epochs, device, epoch, pixels) for b in (small, batch))
    return high + (high - low) / (len(batch) - half) * (batch_size - len(batch))


def step_gflop(cell, backbone, batch: Batch, epochs: int, device: torch.device, epoch: int | None = None,
               pixels: Pixels | None = None) -> float:
    """The counted GFLOP of one training step (forward and backward) of ``cell``'s method on
    ``batch`` at the start of ``epoch`` (default the last), after its epoch-level pass;
    ``pixels`` gives a method that sends images through the tower itself (INTENT) their pixels."""
    epoch = epochs - 1 if epoch is None else epoch
    torch.manual_seed(0)

    def encode(images: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return backbone.encode_image_tokens(images.to(device)).float()

    context = TrainingContext(num_train=len(batch), epochs=epochs, batch_size=len(batch), steps_per_epoch=1, seed=0,
                              device=device, iterate=lambda shuffle: iter([batch]),
                              noise_flags=np.zeros(len(batch), dtype=bool), noise_rate=0.0, pixels=pixels,
                              encode_pixels=encode)
    method = cell.method_cls(backbone, cell.config, context).to(device)
    with torch.no_grad():
        method.on_epoch_start(epoch)
    with FlopCount() as counter:
        out = method.training_step(batch, epoch, 0)
        out.loss.backward()
    backbone.zero_grad(set_to_none=True)
    return counter.total / 1e9


def _check_noise(grid: Grid, dataset) -> list[str]:
    """Build the noise instance of every rate (seed: the grid's first); notes for what waits for the run."""
    spec = grid.spec

    def needs_features() -> np.ndarray:
        raise _FeaturesNeeded

    for rate in spec.noise_rates:
        try:
            noisy_training(dataset, spec.noise_protocol, rate, spec.seeds[0], spec.noise_file, image_features=needs_features)
        except _FeaturesNeeded:
            return [f"noise protocol {spec.noise_protocol!r} needs the tower's features: checked at the run's pre-flight"]
        except ValueError as exc:
            raise PlanError(f"noise at rate {rate:g}: {exc}") from None
    return []


def plan_grid(where: str, grid: Grid, backbones: dict, announce: Callable[[str], None]) -> GridPlan:
    """Check and cost one built grid (see the module docstring); ``backbones`` caches the built ones."""
    spec = grid.spec
    loader = DATASETS.get(spec.dataset)
    if loader.files:
        report = loader.check(spec.data_root, spec.dataset_options, spec.cache_dir)
        if report.fatal or (report.errors and not spec.allow_missing):
            raise PlanError(f"{spec.dataset} files: {len(report.errors)} error(s), first: {report.errors[0].file} "
                            f"{report.errors[0].entry}: {report.errors[0].problem} (cirbench data check --dataset {spec.dataset})")
    try:
        dataset = grid.resources.dataset()
    except DatasetProblemsError as exc:
        raise PlanError(str(exc).split(":\n", 1)[0]) from None
    notes = [f"{spec.dataset}: {len(dataset.train)} training triplets, {len(dataset.val)} validation queries, "
             f"{len(dataset.image_ids)} images"]
    notes += _check_noise(grid, dataset)
    key = (spec.backbone, spec.weights)
    if key not in backbones:
        announce(f"building backbone {spec.backbone} ({spec.weights or 'default weights'})")
        try:
            backbones[key] = BACKBONES.get(spec.backbone)(spec.seeds[0], spec.cache_dir, spec.weights)
        except (OSError, ValueError, ImportError) as exc:
            raise PlanError(f"backbone {spec.backbone} ({spec.weights or 'default weights'}): {exc}") from None
    backbone, device = backbones[key], torch.device("cpu")  # FLOPs are the same anywhere: counted here
    batch, pixels = _batch(backbone, dataset, device), dataset_pixels(backbone, dataset)
    trained = int(round(len(dataset.train) * (1 - spec.holdout)))
    steps = spec.epochs * math.ceil(trained / spec.batch_size)
    counted: set[str] = set()
    per_label = Counter(cell.key.method for cell in grid.cells if not math.isnan(cell.key.noise_rate))
    rows = []
    for cell in grid.cells:
        label = cell.key.method
        if math.isnan(cell.key.noise_rate) or label in counted:
            continue  # a reference row trains nothing
        counted.add(label)
        first, last = (scaled_step_gflop(cell, backbone, batch, spec.epochs, spec.batch_size, device, epoch, pixels)
                       for epoch in (0, spec.epochs - 1))
        rows.append(RowCost(label, per_label[label], spec.epochs, steps, first, last))
    setting = (f"{spec.dataset} / {spec.backbone} / {spec.noise_protocol} at {','.join(f'{r:g}' for r in spec.noise_rates)}, "
               f"seeds {','.join(map(str, spec.seeds))}, {spec.epochs} epochs, batch {spec.batch_size}")
    pending = {cell.key.run_id: cell.key.method for cell in grid.pending() if not math.isnan(cell.key.noise_rate)}
    return GridPlan(where, setting, len(grid.cells), len(grid.pending()), rows, notes, pending)


def plan_study(path: Path | str, plugins: list[Path] | None = None,
               announce: Callable[[str], None] = lambda message: None) -> list[GridPlan]:
    """Every grid of the study ``path`` planned (:func:`plan_grid`); a bad file, grid or check
    raises (StudyError, GridError, ConfigError, PlanError) before any training."""
    study = load_study(path)
    backbones: dict = {}
    plans = []
    for entry in study.grids:
        built = study_grid(entry, study, plugins)
        plans.append(plan_grid(entry.where, built, backbones, announce))
        if entry.kind == "sweep" and "tuned_seeds" in entry.options:
            plans += _tuned_plans(entry.where, built, list(entry.options["tuned_seeds"]), backbones, announce)
    return plans


def _tuned_plans(where: str, sweep, seeds: list[int], backbones: dict, announce: Callable[[str], None]) -> list[GridPlan]:
    """The tuned cells a sweep's ``tuned_seeds`` add (:func:`cirbench.api.tuned.tuned_plan`), a
    plan per noise rate: the picks made so far, a (method, rate) whose sweep is not done costed
    as its trial 1 (an upper bound: a pick of the defaults adds no cell)."""
    plan = tuned_plan(sweep, seeds, provisional=True)
    plans = []
    for tuned, note in zip(plan.grids, plan.notes):
        done = plan_grid(f"{where}, its tuned cells at {rate_label(tuned.spec.noise_rates[0])}", tuned, backbones, announce)
        done.notes.append(note)
        plans.append(done)
    return plans
