"""The ceiling of a cell's parts at this model's shapes, for ``cell_flops.py --ceiling``: how
fast a training step and each split's evaluation could run if only their counted
operations took time.

``cell_flops.py`` says how far a part is from the core's float32 matrix rate (a 1024 x 1024
``torch.mm``); its ``--ceiling`` says how much of that distance the model's own shapes
impose. Every operation the FLOP counter counts (``torch.utils.flop_counter``'s registry:
matrix products, attention, forward and backward) is recorded, with its shapes, strides and
arguments, on the training loop's events (:mod:`cirbench.engine.cell.hooks`), in one training
step per method (the third of the cell's first epoch) and in each split's evaluation of the
second epoch; each distinct call is then replayed alone on random tensors of the same
layout, timed (the best of ``--repeats``) and counted. The table, one block per method:

- ``GFLOP``, ``seconds``, ``% of mm``: the part as the cell runs it (a step: the median of
  the cell's other steps; an evaluation: the first epoch's, not recorded);
- ``ops s``: the part's counted operations replayed alone, summed over its calls;
- ``ceiling``: the part's FLOPs over ``ops s``, as a share of the matrix rate: what the
  part would reach if everything between its counted operations (element-wise work,
  norms, softmax outside attention kernels, copies, the optimiser, Python) took no time;
- ``outside``: the share of the part's time spent outside its counted operations;

then the step's counted operations by operator (calls, GFLOP, replayed seconds, % of mm).
The recorded cells are shrunk (two epochs of six steps): shapes, not the schedule, set
these figures.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from _profiling import HELD_OUT, VALIDATION, default_spec
from cirbench.engine.cell.evaluate import Evaluation
from cirbench.engine.running.grid import Grid
from cirbench.engine.cell.hooks import TrainingHooks
from cirbench.engine.planning.spec import Cell, GridSpec
from cirbench.engine.running.worker import grid_for, run_cell_by_id
from cirbench.method import StepOutput

STEP = "step"
RECORDED_STEP = 2
"""The step recorded (0-based, within the cell's first epoch): after two that warm the kernels up."""
STEPS = 6
"""Steps per epoch of the shrunk cells."""
EPOCHS = 2
"""The first epoch's evaluations are timed, the second's recorded."""


@dataclass(frozen=True)
class TensorSpec:
    """A tensor argument's layout: what a replay needs to build one like it."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    def build(self) -> torch.Tensor:
        """A tensor of this layout (random values where floating point, zeros otherwise)."""
        extent = 1 + sum((n - 1) * s for n, s in zip(self.shape, self.stride)) if all(self.shape) else 0
        base = torch.randn(extent, dtype=self.dtype) if self.dtype.is_floating_point else torch.zeros(extent, dtype=self.dtype)
        return base.as_strided(self.shape, self.stride)


def _spec(x: Any) -> Any:
    """``x`` as a recorded call's key holds it: tensors as their layout, lists as tuples (hashable)."""
    if isinstance(x, (list, tuple)):
        return tuple(_spec(y) for y in x)
    return TensorSpec(tuple(x.shape), tuple(x.stride()), x.dtype) if isinstance(x, torch.Tensor) else x


def _built(x: Any) -> Any:
    """A recorded argument made real again: tensors of the recorded layouts."""
    if isinstance(x, tuple):
        return tuple(_built(y) for y in x)
    return x.build() if isinstance(x, TensorSpec) else x


class CountedOps(TorchDispatchMode):
    """Records every call of an operator the FLOP counter counts: ``calls[(op, args, kwargs)]`` = times called."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[tuple, int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's signature
        kwargs = kwargs or {}
        if func._overloadpacket in flop_registry:
            key = (func, _spec(tuple(args)), tuple(sorted((k, _spec(v)) for k, v in kwargs.items())))
            self.calls[key] += 1
        else:  # under inference mode composite operators (aten.linear) arrive whole, as the FLOP counter finds
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        return func(*args, **kwargs)


@dataclass
class Replayed:
    """One distinct counted call replayed alone: its operator, FLOPs, best time and how often the part made it."""

    op: str
    flops: int
    seconds: float
    count: int


def replay(calls: dict[tuple, int], repeats: int) -> list[Replayed]:
    """Each distinct call of ``calls`` run alone on fresh random tensors of its layout: counted once, then timed."""
    out = []
    for (func, args, kwargs), n in calls.items():
        built_args, built_kwargs = _built(args), {k: _built(v) for k, v in kwargs}
        counter = FlopCounterMode(display=False)
        with counter:
            func(*built_args, **built_kwargs)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            func(*built_args, **built_kwargs)
            best = min(best, time.perf_counter() - start)
        out.append(Replayed(str(func._overloadpacket), counter.get_total_flops(), best, n))
    return out


@dataclass
class PartCeiling:
    """A part of a cell as run and as its counted operations alone would run."""

    flops: int
    seconds: float
    ops_seconds: float
    by_op: dict[str, dict[str, float]] = field(default_factory=dict)

    def row(self, mm: float) -> dict[str, float]:
        """The table's numbers: achieved and ceiling shares of the matrix rate ``mm``, share outside the counted ops."""
        return {"gflop": self.flops / 1e9, "seconds": self.seconds, "ops_seconds": self.ops_seconds,
                "fraction_of_mm": self.flops / self.seconds / mm, "ceiling": self.flops / self.ops_seconds / mm,
                "outside": 1.0 - self.ops_seconds / self.seconds}


def ceiling(calls: dict[tuple, int], seconds: float, repeats: int) -> PartCeiling:
    """A part's :class:`PartCeiling` from its recorded counted calls and its own wall time."""
    replayed = replay(calls, repeats)
    by_op: dict[str, dict[str, float]] = defaultdict(lambda: {"calls": 0, "flops": 0.0, "seconds": 0.0})
    for r in replayed:
        entry = by_op[r.op]
        entry["calls"] += r.count
        entry["flops"] += r.flops * r.count
        entry["seconds"] += r.seconds * r.count
    return PartCeiling(int(sum(e["flops"] for e in by_op.values())), seconds, sum(e["seconds"] for e in by_op.values()),
                       dict(by_op))


@dataclass
class Recording(TrainingHooks):
    """What one shrunk cell's training loop recorded on its events: the counted calls and
    wall times of each part; each epoch cut to :data:`STEPS` steps."""

    calls: dict[str, dict[tuple, int]] = field(default_factory=dict)
    seconds: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    steps_seen: int = 0
    _mode: CountedOps | None = None
    _start: float = 0.0

    def epoch_batches(self, epoch: int, batches: list[np.ndarray]) -> list[np.ndarray]:
        return batches[:STEPS]

    def _begin(self, record: bool) -> None:
        self._mode = CountedOps() if record else None
        if self._mode is not None:
            self._mode.__enter__()
        self._start = time.perf_counter()

    def _end(self, part: str, timed: bool) -> None:
        seconds = time.perf_counter() - self._start
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self.calls[part], self._mode = self._mode.calls, None
        elif timed:
            self.seconds[part].append(seconds)

    def step_start(self, epoch: int, step: int) -> None:
        self._begin(self.steps_seen == RECORDED_STEP)

    def step_end(self, epoch: int, step: int, out: StepOutput) -> None:
        self._end(STEP, timed=self.steps_seen > 0)  # the first step warms the kernels up
        self.steps_seen += 1

    def evaluation_start(self, epoch: int, split: str) -> None:
        self._begin(epoch == EPOCHS - 1)

    def evaluation_end(self, epoch: int, split: str, evaluation: Evaluation) -> None:
        self._end(split, timed=True)


def record_cell(spec: GridSpec, cell: Cell) -> Recording:
    """Run ``cell`` shrunk to :data:`EPOCHS` epochs of :data:`STEPS` steps, as a worker process runs it, recording its parts."""
    grid_for(spec).resources.hooks = recording = Recording()
    outcome = run_cell_by_id(spec, cell.key.run_id, announce=lambda message: None)
    if outcome["status"] != "completed":
        raise RuntimeError(f"{cell.key.run_id}: {outcome['status']} {outcome['error']}")
    return recording


def cell_ceilings(methods: list[str], noise: float, dataset: str, cache_dir: Path, output: Path,
                  repeats: int) -> dict[str, dict[str, PartCeiling]]:
    """Each method's :class:`PartCeiling` per part (the step, each split's evaluation), from
    its cell shrunk to :data:`EPOCHS` epochs of :data:`STEPS` steps, run into ``output``."""
    spec = default_spec(methods, [noise], EPOCHS, cache_dir, output, dataset)
    parts = {}
    for cell in Grid(spec).cells:
        recording = record_cell(spec, cell)
        parts[cell.key.method] = {
            name: ceiling(recording.calls[name], statistics.median(recording.seconds[name]), repeats)
            for name in (STEP, VALIDATION, HELD_OUT) if name in recording.calls
        }
    return parts


def print_ceilings(parts: dict[str, dict[str, PartCeiling]], mm: float) -> None:
    """The ceiling table, then the step's counted operations by operator (see the module docstring)."""
    print(f"{'method':<10}{'part':<12}{'GFLOP':>9}{'seconds':>9}{'% of mm':>9}{'ops s':>8}{'ceiling':>9}{'outside':>9}")
    for method, found in parts.items():
        label = method
        for name, part in found.items():
            r = part.row(mm)
            print(f"{label:<10}{name:<12}{r['gflop']:>9.3f}{r['seconds']:>9.4f}{r['fraction_of_mm']:>9.1%}"
                  f"{r['ops_seconds']:>8.4f}{r['ceiling']:>9.1%}{r['outside']:>9.1%}")
            label = ""
    print(f"\nthe step's counted operations, by operator\n{'method':<10}{'operator':<48}{'calls':>6}{'GFLOP':>8}{'s':>8}{'% of mm':>9}")
    for method, found in parts.items():
        label = method
        for op, e in sorted(found[STEP].by_op.items(), key=lambda kv: -kv[1]["seconds"]):
            print(f"{label:<10}{op:<48}{int(e['calls']):>6}{e['flops'] / 1e9:>8.3f}{e['seconds']:>8.4f}"
                  f"{e['flops'] / e['seconds'] / mm:>9.1%}")
            label = ""


def ceiling_record(parts: dict[str, dict[str, PartCeiling]], mm: float) -> dict:
    """The ceiling's numbers as ``--json`` writes them."""
    return {m: {n: {**p.row(mm), "by_op": p.by_op} for n, p in found.items()} for m, found in parts.items()}
