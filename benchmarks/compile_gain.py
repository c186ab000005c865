"""Does a compiler pay on the default cell? ``torch.compile`` measured inside real cells,
steps alternating with the eager code, and what it costs to compile, in the first cell of
a worker process and in the cells after it.

    python benchmarks/compile_gain.py                        # the transformer blocks; conesep and hug, 20% then 50%
    python benchmarks/compile_gain.py --scope method         # the methods' steps and encoders whole
    python benchmarks/compile_gain.py --methods sprc --noise 0.5 --max-steps 12 --warm-cache   # a quicker check

The grid is the default ``cirbench run`` builds (held-out split included), shrunk to one
epoch of ``--max-steps`` steps; its cells run one after the other in this process, as one
worker process of ``cirbench run`` runs its share of a grid (``run_cell_by_id``). In each
cell what the compiler is given (default mode, dynamic shapes as torch decides) is, with
``--scope layers``, the backbone's ``ComposerLayer`` blocks and any
``nn.TransformerEncoderLayer`` of the method (e.g. HUG's uncertainty heads), each compiled
in place with ``nn.Module.compile``; with ``--scope method``, the method's
``training_step``, ``encode_queries`` and ``encode_targets`` whole. The cell's training
steps (``optimizer_step``: forward, backward, clipping, AdamW) alternate between the
compiled and the eager code, so both see the same run of batches. Inductor's on-disk cache
starts empty (``--warm-cache``: as it is). After the cell's own (eager) evaluation of each split, two extra calls evaluate
it compiled (evaluating changes nothing).

The table, one row per cell: the eager and the compiled step (medians of their steps) and
their ratio; the compiled steps' time beyond that median (compilation and recompilation
for new shapes, e.g. a batch's longest text); the same for each split's evaluation (the
second compiled call against the cell's own, and the first's excess). A compiler pays on a
grid when what it saves per cell (the steps' difference times the schedule's steps, the
evaluations' difference times its epochs) outweighs what a worker compiles. Compiled
kernels sum in another order than the eager ones, so this is a numerics change, not an
exact cut. One process, one thread unless ``--threads``; quote ratios from one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

import cirbench.engine.train as train_module
from _profiling import default_spec, evaluated_split, patched, reference_rows_seconds
from cell_flops import first_batches
from cirbench.backbones.tiny import ComposerLayer
from cirbench.engine.grid import Grid
from cirbench.engine.spec import Cell, GridSpec
from cirbench.engine.worker import run_cell_by_id

COMPILED_TYPES = (ComposerLayer, nn.TransformerEncoderLayer)
RECOMPILE_LIMIT = 64
"""Graphs per compiled function (torch's default, 8, is too few here: each pass kind, grad
mode, training flag and text length class is its own graph, and past the limit torch runs
the function eagerly)."""


class LayerSwitch:
    """``--scope layers``: the compilable modules of one method, compiled once, switched
    between their compiled and eager calls (``nn.Module.compile`` keeps the compiled call in
    ``_compiled_call_impl``; clearing it restores the eager one, keeping the compiled
    callable and its cache)."""

    def __init__(self, method: nn.Module) -> None:
        self.modules = [m for m in method.modules() if isinstance(m, COMPILED_TYPES)]
        if not self.modules:
            raise RuntimeError(f"{type(method).__name__}: no module of {[t.__name__ for t in COMPILED_TYPES]} to compile")
        self.compiled: list[Callable] = []
        for module in self.modules:
            module.compile()
            self.compiled.append(module._compiled_call_impl)

    def use(self, compiled: bool) -> None:
        """Route the modules' calls to their compiled (True) or eager (False) code."""
        for module, impl in zip(self.modules, self.compiled):
            module._compiled_call_impl = impl if compiled else None


class MethodSwitch:
    """``--scope method``: the method's own ``training_step``, ``encode_queries`` and
    ``encode_targets`` compiled whole (its losses with its passes; graph breaks where torch
    needs them), switched by shadowing them on the instance."""

    NAMES = ("training_step", "encode_queries", "encode_targets")

    def __init__(self, method: nn.Module) -> None:
        self.method = method
        self.compiled = {name: torch.compile(getattr(method, name)) for name in self.NAMES}

    def use(self, compiled: bool) -> None:
        """Route the method's calls to their compiled (True) or eager (False) code."""
        for name, fn in self.compiled.items():
            if compiled:
                setattr(self.method, name, fn)
            else:
                vars(self.method).pop(name, None)


SWITCHES = {"layers": LayerSwitch, "method": MethodSwitch}


@dataclass
class CellTimes:
    """The wall times of one cell's eager and compiled steps and evaluations."""

    steps: dict[bool, list[float]] = field(default_factory=lambda: defaultdict(list))
    evaluations: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    scope: str = "layers"
    made: LayerSwitch | MethodSwitch | None = None

    def switch(self, method: nn.Module) -> LayerSwitch | MethodSwitch:
        """The cell's method's switch of this scope (a cell builds one method), made on first use."""
        if self.made is None:
            self.made = SWITCHES[self.scope](method)
        return self.made

    def step(self, fn: Callable) -> Callable:
        """``optimizer_step``, odd calls compiled, even calls eager, each timed."""

        def wrapper(method: Any, *args: Any, **kwargs: Any) -> Any:
            compiled = (len(self.steps[False]) + len(self.steps[True])) % 2 == 1
            switch = self.switch(method)
            switch.use(compiled)
            start = time.perf_counter()
            try:
                return fn(method, *args, **kwargs)
            finally:
                self.steps[compiled].append(time.perf_counter() - start)
                switch.use(False)

        return wrapper

    def evaluate(self, fn: Callable) -> Callable:
        """The training loop's ``evaluate``: the cell's own call (eager), then two extra calls compiled."""

        def wrapper(method: Any, *args: Any, **kwargs: Any) -> Any:
            split = evaluated_split(kwargs)
            start = time.perf_counter()
            result = fn(method, *args, **kwargs)
            times = self.evaluations[split]
            times["eager"] = time.perf_counter() - start
            switch = self.switch(method)
            switch.use(True)
            try:
                for name in ("compiled first", "compiled"):
                    start = time.perf_counter()
                    fn(method, *args, **kwargs)
                    times[name] = time.perf_counter() - start
            finally:
                switch.use(False)
            return result

        return wrapper

    def row(self) -> dict[str, Any]:
        """The cell's medians, ratios and compile excesses."""
        eager, compiled = statistics.median(self.steps[False]), statistics.median(self.steps[True])
        row: dict[str, Any] = {
            "step_eager_s": eager, "step_compiled_s": compiled, "step_ratio": compiled / eager,
            "step_compile_s": sum(t - compiled for t in self.steps[True]),
        }
        for split, t in self.evaluations.items():
            row[f"{split}_eager_s"], row[f"{split}_compiled_s"] = t["eager"], t["compiled"]
            row[f"{split}_ratio"] = t["compiled"] / t["eager"]
            row[f"{split}_compile_s"] = t["compiled first"] - t["compiled"]
        return row


def time_cell(spec: GridSpec, cell: Cell, max_steps: int, scope: str) -> dict[str, Any]:
    """Run ``cell`` (one epoch of ``max_steps`` steps) as a worker process runs it, timing its
    steps and evaluations eager and compiled (``scope``: what is compiled, a key of :data:`SWITCHES`)."""
    times = CellTimes(scope=scope)
    with ExitStack() as stack:
        stack.enter_context(patched(train_module, "optimizer_step", times.step(train_module.optimizer_step)))
        stack.enter_context(patched(train_module, "evaluate", times.evaluate(train_module.evaluate)))
        stack.enter_context(patched(train_module, "epoch_batches",
                                    first_batches(train_module.epoch_batches, max_steps, cell.key.seed)))
        start = time.perf_counter()
        outcome = run_cell_by_id(spec, cell.key.run_id, announce=lambda message: None)
        wall = time.perf_counter() - start
    if outcome["status"] != "completed":
        raise RuntimeError(f"{cell.key.run_id}: {outcome['status']} {outcome['error']}")
    return {"method": cell.key.method, "noise": cell.key.noise_rate, "wall_s": wall, **times.row()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="conesep,hug")
    parser.add_argument("--noise", default="0.2,0.5", help="one cell per rate and method, run in this order")
    parser.add_argument("--max-steps", type=int, default=30,
                        help="steps of the cell's one epoch, half of them compiled (enough that compiling ones are a minority)")
    parser.add_argument("--cache-dir", type=Path, default=Path("datasets"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--scope", choices=sorted(SWITCHES), default="layers",
                        help="layers: the transformer blocks (composer, method heads); method: the method's step and encoders whole")
    parser.add_argument("--warm-cache", action="store_true",
                        help="use inductor's on-disk cache as it is (default: an empty one, as on a fresh machine)")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch._dynamo.config.recompile_limit = RECOMPILE_LIMIT
    torch._dynamo.config.accumulated_recompile_limit = 16 * RECOMPILE_LIMIT

    rows = []
    with tempfile.TemporaryDirectory(prefix="cirbench-compile-") as output:
        if not args.warm_cache:  # what a fresh machine pays: inductor's on-disk cache starts empty
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(output) / "inductor")
        spec = default_spec(args.methods.split(","), [float(r) for r in args.noise.split(",")], 1, args.cache_dir,
                            Path(output) / "results")
        grid = Grid(spec)
        reference_rows_seconds(grid)
        for cell in sorted(grid.cells, key=lambda c: (c.key.method, c.key.noise_rate)):
            rows.append(time_cell(spec, cell, args.max_steps, args.scope))
            r = rows[-1]
            print(f"{r['method']:<9}{r['noise']:>5.2f}  step {r['step_eager_s']:.3f} -> {r['step_compiled_s']:.3f} s "
                  f"({r['step_ratio']:.2f}x, compiling {r['step_compile_s']:.1f} s)", end="")
            for split in ("validation", "held-out"):
                if f"{split}_ratio" in r:
                    print(f"; {split} {r[f'{split}_eager_s']:.2f} -> {r[f'{split}_compiled_s']:.2f} s "
                          f"({r[f'{split}_ratio']:.2f}x, compiling {r[f'{split}_compile_s']:.1f} s)", end="")
            print(flush=True)
    print(f"\ntorch {torch.__version__}, {torch.get_num_threads()} thread(s), {spec.dataset} / {spec.backbone}, "
          f"batch {spec.batch_size}; cells in this order in one process")
    if args.json:
        args.json.write_text(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "cells": rows},
                                        indent=1))
        print(f"written: {args.json}")


if __name__ == "__main__":
    main()
