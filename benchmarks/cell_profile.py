"""Where a cell's time goes: process start-up, the reference rows, and, per epoch, batch
building, the training steps (the method's forward, backward and optimiser step), the
method's epoch-level passes, the validation and the held-out split's evaluation.

    python benchmarks/cell_profile.py                         # sprc at 50% noise, the default schedule
    python benchmarks/cell_profile.py --methods sprc,tme,conesep,hug --noise 0.5 --epochs 2

The grid is the default ``cirbench run`` builds (the held-out share it resolves for the
dataset included). The parts are timed on the training loop's events
(:mod:`cirbench.engine.cell.hooks`), so the shares add up to the cell's wall time less the
bookkeeping between them. Cells run one after another in this process, one thread each
unless ``--threads``; run it by hand on an idle machine and quote ratios from one run
(``tests/test_benchmarks.py`` runs it on a small grid only to see that it works).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from _profiling import (BATCHES, EPOCH_PASSES, HELD_OUT, VALIDATION, PartTimer, default_spec, reference_rows_seconds,
                        start_up_seconds)
from cirbench.engine.cell.life import run_cell
from cirbench.engine.running.grid import Grid, GridSpec

COLUMNS = (("steps", "steps", 8), (BATCHES, "batches", 9), (EPOCH_PASSES, "epoch passes", 14),
           (VALIDATION, VALIDATION, 12), (HELD_OUT, HELD_OUT, 10), ("other", "other", 8))
"""The table's columns: (part, header, width)."""


def main(argv: list[str] | None = None) -> None:
    """Profile the cells of the grid the arguments name and print one row per cell."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="sprc")
    parser.add_argument("--noise", default="0.5")
    parser.add_argument("--epochs", type=int, default=GridSpec.epochs)
    parser.add_argument("--dataset", default=GridSpec.dataset)
    parser.add_argument("--cache-dir", type=Path, default=Path("datasets"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=0, help="training steps per epoch at most (0: all)")
    parser.add_argument("--output", type=Path, default=None, help="the results folder (default: a new temporary one)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    spec = default_spec(args.methods.split(","), [float(x) for x in args.noise.split(",")], args.epochs, args.cache_dir,
                        args.output or Path(tempfile.mkdtemp(prefix="cirbench-profile-")) / "results", dataset=args.dataset)
    grid = Grid(spec)
    references = reference_rows_seconds(grid)
    print(f"held-out share {spec.holdout:g}; process start-up (imports): {start_up_seconds():.1f} s; "
          f"reference rows: {references:.1f} s")
    print(f"\n{'cell':<22}{'wall s':>8}" + "".join(f"{header:>{width}}" for _, header, width in COLUMNS))
    for cell in grid.cells:
        grid.resources.hooks = timer = PartTimer(args.max_steps)
        start = time.perf_counter()
        outcome = run_cell(grid.resources, cell, progress=lambda info: None, announce=lambda message: None)
        wall = time.perf_counter() - start
        if outcome.status != "completed":
            print(f"{cell.key.run_id}: {outcome.status} {outcome.error}")
            continue
        steps = outcome.result.model_seconds
        shares = {"steps": steps, **timer.times}
        shares["other"] = wall - sum(shares.values())
        label = f"{cell.key.method} {cell.key.noise_rate:g}"
        print(f"{label:<22}{wall:>8.1f}" + "".join(f"{shares.get(k, 0.0) / wall:>{w}.1%}" for k, _, w in COLUMNS))
        print(f"{'':<22}{'':>8}{steps / outcome.result.steps * 1e3:>7.0f}ms/step, "
              f"validation {timer.times[VALIDATION] / spec.epochs:.2f} s/epoch, "
              f"held-out {timer.times[HELD_OUT] / spec.epochs:.2f} s/epoch, training {steps / spec.epochs:.2f} s/epoch")


if __name__ == "__main__":
    main()
