"""Where a cell's time goes: process start-up, the reference rows, and, per epoch, batch
building, the training steps (the method's forward, backward and optimiser step), the
method's epoch-level passes and the per-epoch validation.

    python benchmarks/cell_profile.py                         # sprc at 50% noise, the default schedule
    python benchmarks/cell_profile.py --methods sprc,tme,conesep,hug --noise 0.5 --epochs 2

Every timer wraps the real function the harness calls (patched in this process only), so
the shares add up to the cell's wall time less the bookkeeping between them. Cells run one
after another in this process, one thread each unless ``--threads``; run it by hand on an
idle machine (it is not a test) and quote ratios from one run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

import cirbench.engine.train as train_module
from cirbench.engine.grid import Grid, GridSpec

TIMES: dict[str, float] = defaultdict(float)


def timed(name: str, fn):
    """``fn`` with its wall time added to ``TIMES[name]`` on every call."""

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[name] += time.perf_counter() - start

    return wrapper


def start_up_seconds() -> float:
    """Wall time of a fresh interpreter importing what a worker process imports."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, cirbench.engine.grid, cirbench.engine.parallel"], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="sprc")
    parser.add_argument("--noise", default="0.5")
    parser.add_argument("--epochs", type=int, default=GridSpec.epochs)
    parser.add_argument("--cache-dir", type=Path, default=Path("datasets"))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    train_module.evaluate = timed("validation", train_module.evaluate)
    train_module.BatchMaker.__call__ = timed("batch building", train_module.BatchMaker.__call__)
    spec = GridSpec(methods=args.methods.split(","), noise_rates=[float(x) for x in args.noise.split(",")], epochs=args.epochs,
                    output=Path(tempfile.mkdtemp(prefix="cirbench-profile-")) / "results", cache_dir=args.cache_dir)
    grid = Grid(spec)
    start = time.perf_counter()
    for cell in grid.reference_cells():
        grid.run_reference(cell, announce=lambda message: None)
    references = time.perf_counter() - start
    print(f"process start-up (imports): {start_up_seconds():.1f} s; reference rows: {references:.1f} s")
    print(f"\n{'cell':<22}{'wall s':>8}{'steps':>8}{'batches':>9}{'epoch passes':>14}{'validation':>12}{'other':>8}")
    for cell in grid.cells:
        TIMES.clear()
        method_cls, original = cell.method_cls, cell.method_cls.on_epoch_start
        method_cls.on_epoch_start = timed("epoch passes", original)
        start = time.perf_counter()
        try:
            outcome = grid.run_cell(cell, progress=lambda info: None, announce=lambda message: None)
        finally:
            method_cls.on_epoch_start = original
        wall = time.perf_counter() - start
        if outcome.status != "completed":
            print(f"{cell.key.run_id}: {outcome.status} {outcome.error}")
            continue
        steps = outcome.result.model_seconds
        shares = {"steps": steps, **TIMES}
        shares["other"] = wall - sum(shares.values())
        label = f"{cell.key.method} {cell.key.noise_rate:g}"
        print(f"{label:<22}{wall:>8.1f}" + "".join(f"{shares.get(k, 0.0) / wall:>{w}.1%}" for k, w in
              (("steps", 8), ("batch building", 9), ("epoch passes", 14), ("validation", 12), ("other", 8))))
        print(f"{'':<22}{'':>8}{steps / outcome.result.steps * 1e3:>7.0f}ms/step, "
              f"validation {TIMES['validation'] / spec.epochs:.2f} s/epoch, training {steps / spec.epochs:.2f} s/epoch")


if __name__ == "__main__":
    main()
