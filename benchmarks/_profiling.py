"""What the profiling scripts of ``benchmarks/`` share: timers wrapped around the harness's
real functions (patched in this process only), the grid they profile (the default as
``cirbench run`` builds it, held-out split included), the set-up a grid pays once
(process start-up, the reference rows), and the FLOP formulas ``torch.utils.flop_counter``
lacks for the CPU's attention operators (registered on import)."""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch.utils.flop_counter import register_flop_formula, sdpa_backward_flop_count, sdpa_flop_count

from cirbench.cli.grid import resolved_holdout
from cirbench.engine.cell import run_reference
from cirbench.engine.grid import Grid, GridSpec

HELD_OUT, VALIDATION = "held-out", "validation"
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


def timed(name: str | Callable[[dict[str, Any]], str], fn: Callable, into: dict[str, float]) -> Callable:
    """``fn`` with its wall time added to ``into[name]`` on every call (``into`` a defaultdict;
    ``name`` may be a function of the call's keyword arguments, e.g. :func:`evaluated_split`)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            into[name if isinstance(name, str) else name(kwargs)] += time.perf_counter() - start

    return wrapper


def evaluated_split(kwargs: dict[str, Any]) -> str:
    """Which split a call of the training loop's ``evaluate`` ranks (:data:`HELD_OUT` or
    :data:`VALIDATION`): the held-out split is the one ranked against a ``gallery`` of its own
    (:func:`cirbench.engine.train.train_cell`)."""
    return HELD_OUT if kwargs.get("gallery") is not None else VALIDATION


@contextmanager
def patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name`` set to ``value`` within the block, put back on exit (an attribute that
    ``owner``, a module or a class, only inherited is removed again)."""
    own, original = name in vars(owner), getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)


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
    subprocess.run([sys.executable, "-c", "import torch, cirbench.engine.grid, cirbench.engine.worker"], check=True)
    return time.perf_counter() - start
