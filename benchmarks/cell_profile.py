"""Where a cell's time goes: process start-up, the reference rows, and, per epoch, batch
building, the training steps (the method's forward, backward and optimiser step), the
method's epoch-level passes, the validation and the held-out split's evaluation.

    python benchmarks/cell_profile.py                         # sprc at 50% noise, the default schedule
    python benchmarks/cell_profile.py --methods sprc,tme,conesep,hug --noise 0.5 --epochs 2

The grid is the default ``cirbench run`` builds (the held-out share it resolves for the
dataset included). Every timer wraps the real function the harness calls (patched in this
process only), so the shares add up to the cell's wall time less the bookkeeping between
them. Cells run one after another in this process, one thread each unless ``--threads``;
run it by hand on an idle machine (it is not a test) and quote ratios from one run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

import cirbench.engine.train as train_module
from _profiling import (HELD_OUT, VALIDATION, default_spec, evaluated_split, patched, reference_rows_seconds,
                        start_up_seconds, timed)
from cirbench.engine.cell import run_cell
from cirbench.engine.grid import Grid, GridSpec

TIMES: dict[str, float] = defaultdict(float)
COLUMNS = (("steps", "steps", 8), ("batch building", "batches", 9), ("epoch passes", "epoch passes", 14),
           (VALIDATION, VALIDATION, 12), (HELD_OUT, HELD_OUT, 10), ("other", "other", 8))
"""The table's columns: (timer, header, width)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="sprc")
    parser.add_argument("--noise", default="0.5")
    parser.add_argument("--epochs", type=int, default=GridSpec.epochs)
    parser.add_argument("--cache-dir", type=Path, default=Path("datasets"))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    train_module.evaluate = timed(evaluated_split, train_module.evaluate, TIMES)
    train_module.BatchMaker.__call__ = timed("batch building", train_module.BatchMaker.__call__, TIMES)
    spec = default_spec(args.methods.split(","), [float(x) for x in args.noise.split(",")], args.epochs, args.cache_dir,
                        Path(tempfile.mkdtemp(prefix="cirbench-profile-")) / "results")
    grid = Grid(spec)
    references = reference_rows_seconds(grid)
    print(f"held-out share {spec.holdout:g}; process start-up (imports): {start_up_seconds():.1f} s; "
          f"reference rows: {references:.1f} s")
    print(f"\n{'cell':<22}{'wall s':>8}" + "".join(f"{header:>{width}}" for _, header, width in COLUMNS))
    for cell in grid.cells:
        TIMES.clear()
        method_cls = cell.method_cls
        start = time.perf_counter()
        with patched(method_cls, "on_epoch_start", timed("epoch passes", method_cls.on_epoch_start, TIMES)):
            outcome = run_cell(grid.resources, cell, progress=lambda info: None, announce=lambda message: None)
        wall = time.perf_counter() - start
        if outcome.status != "completed":
            print(f"{cell.key.run_id}: {outcome.status} {outcome.error}")
            continue
        steps = outcome.result.model_seconds
        shares = {"steps": steps, **TIMES}
        shares["other"] = wall - sum(shares.values())
        label = f"{cell.key.method} {cell.key.noise_rate:g}"
        print(f"{label:<22}{wall:>8.1f}" + "".join(f"{shares.get(k, 0.0) / wall:>{w}.1%}" for k, _, w in COLUMNS))
        print(f"{'':<22}{'':>8}{steps / outcome.result.steps * 1e3:>7.0f}ms/step, "
              f"validation {TIMES[VALIDATION] / spec.epochs:.2f} s/epoch, held-out {TIMES[HELD_OUT] / spec.epochs:.2f} s/epoch, "
              f"training {steps / spec.epochs:.2f} s/epoch")


if __name__ == "__main__":
    main()
