"""Time a grid end to end and break the time down, per method, relative to ``sprc``.

    python benchmarks/grid_time.py --methods sprc,oracle --noise 0,0.5,0.8
    python benchmarks/grid_time.py --methods sprc,conesep,hug --noise 0.2,0.5,0.8 --fresh

Reports: the grid's wall time (with ``--fresh``, including first-time data generation and
feature caching in a new cache directory); per method, seconds per training step (forward,
backward and optimiser step, measured inside the loop) and its ratio to ``sprc``; the share
of wall time spent outside the model's forward/backward (data, noise, evaluation, writing);
and, on each trained model, the time to encode the validation queries and to run the whole
retrieval (queries, gallery, scoring), as ratios to ``sprc``. The grid is the default
``cirbench run`` builds (the held-out share it resolves for the dataset included). Run it by
hand on an idle machine (``tests/test_benchmarks.py`` runs it on a small grid only to see
that it works).
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from _profiling import default_spec
from cirbench.settings import defaults
from cirbench.engine.cell.life import run_cell
from cirbench.engine.cell.evaluate import evaluate
from cirbench.engine.running.grid import Grid, GridSpec


def timed(fn, repeats: int = 3) -> float:
    """The best of ``repeats`` wall times of ``fn()``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> None:
    """Time the grid the arguments name and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default=",".join(defaults.METHODS))
    parser.add_argument("--noise", default=",".join(f"{rate:g}" for rate in defaults.NOISE_RATES))
    parser.add_argument("--dataset", default="shapes")
    parser.add_argument("--epochs", type=int, default=GridSpec.epochs)
    parser.add_argument("--batch-size", type=int, default=GridSpec.batch_size)
    parser.add_argument("--fresh", action="store_true", help="use a new cache directory (time first-time setup)")
    parser.add_argument("--cache-dir", type=Path, default=Path("datasets"), help="the cache directory when not --fresh")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds of query encoding and retrieval")
    parser.add_argument("--work", type=Path, default=None, help="the folder of the results (default: a new temporary one)")
    args = parser.parse_args(argv)

    methods = args.methods.split(",")
    if "sprc" not in methods:
        methods.insert(0, "sprc")
    work = args.work or Path(tempfile.mkdtemp(prefix="cirbench-bench-"))
    spec = dataclasses.replace(default_spec(methods, [float(x) for x in args.noise.split(",")], args.epochs,
                                            work / "datasets" if args.fresh else args.cache_dir, work / "results",
                                            dataset=args.dataset), batch_size=args.batch_size)
    start = time.perf_counter()
    grid = Grid(spec)
    outcomes = [run_cell(grid.resources, cell, lambda info: None, announce=print) for cell in grid.cells]
    wall = time.perf_counter() - start

    per_step, model_seconds, trained = defaultdict(list), 0.0, {}
    for o in outcomes:
        if o.status != "completed":
            print(f"{o.cell.key.run_id}: {o.status} {o.error}")
            continue
        per_step[o.cell.key.method].append(o.result.model_seconds / o.result.steps)
        model_seconds += o.result.model_seconds
        trained.setdefault(o.cell.key.method, o.result.method)

    dataset = grid.resources.dataset()
    backbone = next(iter(trained.values())).backbone
    tokens = grid.resources.tokens(backbone, print)
    texts = backbone.tokenize(dataset.val.texts)
    refs = torch.from_numpy(np.asarray(tokens[dataset.val.reference], dtype=np.float32))
    query_time, retrieval_time = {}, {}
    with torch.no_grad():
        for method in trained.values():
            method.eval()
        # Interleaved rounds, best of each: a burst of load elsewhere hits every method alike.
        for _ in range(args.rounds):
            for name, method in trained.items():
                query = timed(lambda: method.encode_queries(refs, texts), repeats=1)
                retrieval = timed(lambda: evaluate(method, dataset, dataset.val, tokens, texts, torch.device("cpu")), repeats=1)
                query_time[name] = min(query_time.get(name, float("inf")), query)
                retrieval_time[name] = min(retrieval_time.get(name, float("inf")), retrieval)

    print(f"\ngrid: {len(outcomes)} cells, {wall:.1f} s wall{' (fresh caches)' if args.fresh else ''}")
    print(f"share of wall time outside forward/backward/step: {1 - model_seconds / wall:.1%}")
    base_step = np.mean(per_step["sprc"])
    print(f"\n{'method':<12}{'s/step':>9}{'x sprc':>9}{'query enc x':>13}{'retrieval x':>13}")
    for name in per_step:
        print(
            f"{name:<12}{np.mean(per_step[name]):>9.3f}{np.mean(per_step[name]) / base_step:>9.2f}"
            f"{query_time[name] / query_time['sprc']:>13.2f}{retrieval_time[name] / retrieval_time['sprc']:>13.2f}"
        )


if __name__ == "__main__":
    main()
