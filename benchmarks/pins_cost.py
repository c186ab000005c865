"""What pinning the kernels costs (issue 77, :mod:`cirbench.settings.kernels`): the default cell run
pinned (cirbench's default: ATen and oneDNN at AVX2, MKL's ``COMPATIBLE`` branch, OpenBLAS's
Haswell kernels, numpy's AVX2 dispatch, deterministic algorithms) and unpinned
(``CIRBENCH_KERNEL_PINS=off``: every library's fastest kernels for this CPU), alternately,
each in a fresh process on one thread as a cell always is, and the ratio of their times.

    python benchmarks/pins_cost.py                        # sprc at 50% on shapes, 2 rounds
    python benchmarks/pins_cost.py --rounds 3 --methods sprc,conesep

Each process builds the grid ``cirbench run`` builds (``shapes``, ``tiny``, its held-out
share), computes the tower's tokens (each kernel set its own cache file) and evaluates the
reference rows first, untimed, then times the cell: its model seconds (training steps and
evaluations, as ``runs.model_seconds``) and its wall seconds. The ratio is pinned / unpinned
within a round (the two back to back). Run it by hand on an idle machine, and twice: a shared
machine moves the times (``tests/test_benchmarks.py`` runs it on ``shapes-mini`` only to see
that it works).
"""

from __future__ import annotations

import cirbench  # noqa: F401  (first: the pins act before torch and numpy load, as in a cell's process)

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _profiling import PartTimer, default_spec, reference_rows_seconds
from cirbench.engine.cell.life import run_cell
from cirbench.engine.running.grid import Grid
from cirbench.settings.kernels import PINS, SWITCH, cell_threads, kernels_used, numpy_pin

MODES = {"pinned": {}, "unpinned": {SWITCH: "off"}}
"""Each mode's environment over a user's (one without the pins: a pinned child sets them itself)."""


def child(args: argparse.Namespace) -> None:
    """Run one cell in this process; print one JSON line with its times and kernels."""
    grid = Grid(default_spec([args.method], [args.noise], args.epochs, args.cache_dir, args.output, dataset=args.dataset))
    grid.resources.hooks = PartTimer(args.max_steps)
    with cell_threads():
        grid.resources.prepare_caches(announce=lambda message: None)
        kernels = kernels_used()
    reference_rows_seconds(grid)
    (cell,) = grid.cells
    start = time.perf_counter()
    outcome = run_cell(grid.resources, cell, lambda info: None, announce=lambda message: None)
    wall = time.perf_counter() - start
    model = outcome.result.model_seconds if outcome.result is not None else float("nan")
    print(json.dumps({"status": outcome.status, "error": outcome.error, "wall": wall, "model": model, "kernels": kernels}))


def spawn(args: argparse.Namespace, mode: str, method: str, output: Path) -> dict:
    """One cell in a fresh process under ``mode``'s environment: its JSON line."""
    env = {k: v for k, v in os.environ.items() if k not in {SWITCH, *PINS, *numpy_pin()}}
    command = [sys.executable, __file__, "--child", "--method", method, "--noise", str(args.noise), "--dataset",
               args.dataset, "--epochs", str(args.epochs), "--max-steps", str(args.max_steps),
               "--cache-dir", str(args.cache_dir), "--output", str(output)]
    done = subprocess.run(command, env={**env, **MODES[mode]}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} {method}: exit {done.returncode}\n{done.stderr[-3000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if found["status"] != "completed":
        raise RuntimeError(f"{mode} {method}: {found['status']} {found['error']}")
    return found


def main(argv: list[str] | None = None) -> None:
    """Time each method's cell pinned and unpinned, ``--rounds`` times; one line per run, then the ratios."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="sprc")
    parser.add_argument("--noise", type=float, default=0.5)
    parser.add_argument("--dataset", default="shapes")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=0, help="Steps of each epoch (0: all).")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cache-dir", type=Path, default=Path("datasets"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--method", default="sprc", help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.cache_dir = args.cache_dir.resolve()
    if args.child:
        return child(args)
    print(f"cirbench kernel pins: the cell pinned and unpinned, {args.rounds} round(s), {os.cpu_count()} CPU(s)")
    with tempfile.TemporaryDirectory() as scratch:
        for method in args.methods.split(","):
            ratios = {"wall": [], "model": []}
            for round_ in range(args.rounds):
                times = {mode: spawn(args, mode, method, Path(scratch) / f"{method}-{mode}-{round_}") for mode in MODES}
                for mode, found in times.items():
                    used = found["kernels"]
                    print(f"{method} {args.noise:g} round {round_ + 1} {mode}: wall {found['wall']:.1f} s, model "
                          f"{found['model']:.1f} s (aten {used['aten']}, mkl {used['mkl']}, onednn {used['onednn']}, "
                          f"openblas {used['openblas']}, numpy {used['numpy']}, pinned {used['pinned']})")
                for part in ratios:
                    ratios[part].append(times["pinned"][part] / times["unpinned"][part])
            print(f"{method} {args.noise:g} pinned / unpinned: wall " + ", ".join(f"{r:.3f}" for r in ratios["wall"])
                  + f" (median {statistics.median(ratios['wall']):.3f}); model "
                  + ", ".join(f"{r:.3f}" for r in ratios["model"]) + f" (median {statistics.median(ratios['model']):.3f})")


if __name__ == "__main__":
    main()
