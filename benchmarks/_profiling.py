"""What the profiling scripts of ``benchmarks/`` share: a timer of the training loop's events
(:class:`PartTimer`, on the engine's hooks, :mod:`cirbench.engine.cell.hooks`), a hook keeping an
epoch's first batches, the grid they profile (the default as ``cirbench run`` builds it,
held-out split included), the set-up a grid pays once (process start-up, the reference
rows), and the FLOP formulas ``torch.utils.flop_counter`` lacks for the CPU's attention
operators (registered on import)."""

from __future__ import annotations

import cirbench  # noqa: F401  (first: its kernel pins act before torch and numpy load, as in a cell's process)

import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import register_flop_formula, sdpa_backward_flop_count, sdpa_flop_count

from cirbench.api.grids import resolved_holdout
from cirbench.engine.cell.life import run_reference
from cirbench.engine.cell.evaluate import Evaluation
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.engine.cell.hooks import HELD_OUT, VALIDATION, TrainingHooks

BATCHES, EPOCH_PASSES = "batch building", "epoch passes"
aten = torch.ops.aten


@register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu)
def _cpu_attention_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """The CPU's fused attention (training: ``nn.MultiheadAttention`` under autograd), which
    ``torch.utils.flop_counter`` counts on the GPU's kernels only: the same formula."""
    return sdpa_flop_count(query_shape, key_shape, value_shape)


@register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu_backward)
def _cpu_attention_backward_flops(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None,
                                  **kwargs) -> int:
    """Its backward, as the counter counts the GPU's."""
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


@register_flop_formula(aten._native_multi_head_attention)
def _fused_multi_head_attention_flops(query_shape, key_shape, value_shape, embed_dim, num_heads, *args,
                                      out_shape=None, **kwargs) -> int:
    """``nn.MultiheadAttention``'s inference fast path (evaluation under ``torch.inference_mode``),
    one operator the counter does not see into: the input projections of queries, keys and
    values, the two attention products and the output projection."""
    (b, s_q, e), s_k = query_shape, key_shape[1]
    projections = 2 * b * e * e * (2 * s_q + 2 * s_k)
    return projections + 2 * (2 * b * s_q * s_k * e)


class PartTimer(TrainingHooks):
    """Wall time per part of the training loop, added into :attr:`times`: ``batch building``,
    ``epoch passes`` and each evaluated split (:data:`VALIDATION`, :data:`HELD_OUT`); with
    ``max_steps``, each epoch cut to its first ``max_steps`` batches."""

    def __init__(self, max_steps: int = 0) -> None:
        self.times: dict[str, float] = defaultdict(float)
        self.max_steps = max_steps
        self._started: dict[str, float] = {}

    def _start(self, part: str) -> None:
        self._started[part] = time.perf_counter()

    def _end(self, part: str) -> None:
        self.times[part] += time.perf_counter() - self._started.pop(part)

    def epoch_batches(self, epoch: int, batches: list[np.ndarray]) -> list[np.ndarray]:
        return batches[:self.max_steps] if self.max_steps else batches

    def epoch_pass_start(self, epoch: int) -> None:
        self._start(EPOCH_PASSES)

    def epoch_pass_end(self, epoch: int) -> None:
        self._end(EPOCH_PASSES)

    def batch_start(self, epoch: int, step: int) -> None:
        self._start(BATCHES)

    def batch_end(self, epoch: int, step: int) -> None:
        self._end(BATCHES)

    def evaluation_start(self, epoch: int, split: str) -> None:
        self._start(split)

    def evaluation_end(self, epoch: int, split: str, evaluation: Evaluation) -> None:
        self._end(split)


def default_spec(methods: list[str], noise_rates: list[float], epochs: int, cache_dir: Path, output: Path,
                 dataset: str = GridSpec.dataset) -> GridSpec:
    """The grid ``cirbench run --methods ... --noise ... --epochs ... --dataset ...`` builds on
    the default backbone (and by default the default dataset), with the held-out share it
    resolves for that dataset (10% on the generated ``shapes``), writing its results under ``output``."""
    holdout = resolved_holdout(None, dataset)
    return GridSpec(methods=methods, noise_rates=noise_rates, epochs=epochs, output=output, cache_dir=cache_dir,
                    holdout=holdout, dataset=dataset)


def reference_rows_seconds(grid: Grid) -> float:
    """Wall time of evaluating the grid's reference rows, which a grid runs once before its
    cells (and which a cell then reads instead of evaluating its ``text_only`` row)."""
    start = time.perf_counter()
    for cell in grid.reference_cells():
        run_reference(grid.resources, cell, announce=lambda message: None)
    return time.perf_counter() - start


def start_up_seconds() -> float:
    """Wall time of a fresh interpreter importing what a worker process imports."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, cirbench.engine.running.grid, cirbench.engine.running.worker"], check=True)
    return time.perf_counter() - start
