"""How far a cell is from the limit: the FLOPs of a cell's parts, counted with
``torch.utils.flop_counter``, against their wall time, as shares of the float32 matrix
product's rate measured in the same run and thread setting.

    python benchmarks/cell_flops.py                    # every method at 50% noise, the default schedule
    python benchmarks/cell_flops.py --json flops.json  # the same, its numbers also written for the docs
    python benchmarks/cell_flops.py --methods sprc,hug --epochs 1 --max-steps 3   # a quick check of the script
    python benchmarks/cell_flops.py --methods tme --dataset shapes-mini --epochs 2 --max-steps 2   # quicker still
    python benchmarks/cell_flops.py --ceiling --json flops.json   # also each part's ceiling at its shapes

One process, one thread unless ``--threads``. The grid is the default ``cirbench run``
builds (the held-out split included); its reference rows run first, as a grid's do, then
each method's cell runs as a worker process of ``cirbench run`` runs it
(``run_cell_by_id``: the grid, the dataset and the tower tokens read, the cell's whole
life) with counters and timers on the training loop's events (:mod:`cirbench.engine.cell.hooks`):

- a training step (the method's forward, the backward, clipping and the AdamW step): FLOPs
  counted on the first step of every epoch, which stands for its epoch's steps (a method
  whose step changes within an epoch, e.g. TME leaving a warm-up phase mid-epoch, is
  counted as at its epoch's start); wall time from the other steps;
- an epoch's evaluation of each split: the validation queries against the dataset's
  gallery, the held-out queries against the training gallery; FLOPs counted on each
  split's first evaluation; wall time from the other epochs' (from the counted one when
  the cell has one epoch);
- the method's epoch-level passes, ``Method.on_epoch_start`` (TME's per-sample pass and
  GMM): counted and timed every epoch (the counter's own time included: it sees only
  torch's operators, and the GMM is numpy's).

The counter's own time is taken out of the cell's wall time: on each counted step what it
took beyond the median step, on each counted evaluation what it took beyond the median of
the split's others.

The table, one block per method, one row per part (GFLOP: 1e9 floating-point operations as
the counter counts them, two per multiply-add, forward and backward: matrix products,
convolutions and attention, the CPU's attention operators through the formulas
``_profiling.py`` registers; element-wise work, softmax, norms and the optimiser's update
count nothing):

- ``calls``: how often the cell runs the part (steps; epochs);
- ``GFLOP``: one call's (a step's averaged over the cell's steps; the passes' averaged
  over the epochs); ``seconds``: one call's wall time (a step's and an evaluation's: the
  median; the passes': the mean over the epochs);
- ``GFLOP/s``: GFLOP / seconds; ``% of mm``: that rate as a share of the matrix rate;
- ``% of cell``: the part's share of the cell's wall time (all its calls);
- ``cell``: steps x their FLOPs + epochs x (both evaluations + the passes), over the
  cell's wall time: its set-up (the grid, the dataset and tokens read, the backbone and
  its start, the noise, the held-out split, writing the results) and the bookkeeping
  between the parts count no FLOPs, which is why it is lower than its parts; ``batches``
  and ``set-up, rest`` are the time the cell spends building batches and outside every
  timed part.

A summary line per method follows (the step's, the two evaluations' and the cell's % of
mm). With ``--ceiling``, each method's cell runs once more, shrunk, with every counted
operation recorded and then replayed alone (``_ceiling.py``): how much of the distance to
the matrix rate the model's own shapes impose (the table of ``_ceiling.py``'s docstring). The matrix rate is the best of ``torch.mm`` of two 1024 x 1024 float32 matrices,
measured before and after the cells; process start-up (once per worker process) and the
reference rows (once per grid) are printed apart. ``--json`` writes every number of the
table, each part's FLOPs by operator and each epoch's counted step.

Run it by hand on an otherwise idle machine (tests/test_benchmarks.py runs it on a small
grid only to see that it works) and quote its figures as
ratios from one run. ``--epochs`` and ``--max-steps`` (training steps per epoch) shrink
the cells for a quick check of the script: their figures are then the shrunk cells', not
the default's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from _ceiling import ceiling_record, cell_ceilings, print_ceilings
from _profiling import HELD_OUT, VALIDATION, default_spec, reference_rows_seconds, start_up_seconds
from cirbench.engine.cell.evaluate import Evaluation
from cirbench.engine.running.grid import Grid
from cirbench.engine.cell.hooks import TrainingHooks
from cirbench.engine.planning.spec import Cell, GridSpec
from cirbench.engine.running.worker import grid_for, run_cell_by_id
from cirbench.method import StepOutput

METHODS = "sprc,tme,conesep,hug,habit,intent,oracle"
STEP, PASSES, BATCHES, REST = "step", "passes", "batches", "set-up, rest"


@dataclass
class Counted:
    """A part's call run under the FLOP counter: its FLOPs (in all and per operator) and its
    wall time (the counter's own time included)."""

    flops: int
    ops: dict[str, int]
    seconds: float


class Counting:
    """A :class:`FlopCounterMode` entered at one event and left at the next."""

    def __init__(self) -> None:
        self.mode = FlopCounterMode(display=False)
        self.mode.__enter__()
        self.start = time.perf_counter()

    def done(self) -> Counted:
        """Leave the counter: what it counted."""
        seconds = time.perf_counter() - self.start
        self.mode.__exit__(None, None, None)
        ops = {str(op): int(n) for op, n in self.mode.get_flop_counts().get("Global", {}).items()}
        return Counted(int(self.mode.get_total_flops()), ops, seconds)


@contextmanager
def random_states_kept() -> Iterator[None]:
    """Within the block torch's and numpy's global random states may be drawn from; both are put back on exit."""
    state = np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            np.random.set_state(state)


def matmul_rate(n: int = 1024, repeats: int = 10, trials: int = 7) -> float:
    """FLOP/s of ``torch.mm`` of two ``n`` x ``n`` float32 matrices in this thread setting:
    the best of ``trials`` means over ``repeats`` products."""
    a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    torch.mm(a, b, out=out)
    best = float("inf")
    for _ in range(trials):
        start = time.perf_counter()
        for _ in range(repeats):
            torch.mm(a, b, out=out)
        best = min(best, (time.perf_counter() - start) / repeats)
    return 2 * n**3 / best


@dataclass
class CellProbe(TrainingHooks):
    """The counters and timers of one cell on the training loop's events, and what they
    found; with ``max_steps``, each epoch cut to its first ``max_steps`` batches."""

    max_steps: int | None = None
    steps: Counter = field(default_factory=Counter)
    """Steps per epoch."""
    counted_steps: dict[int, Counted] = field(default_factory=dict)
    """Each epoch's counted (first) step."""
    step_seconds: list[float] = field(default_factory=list)
    """Wall time of every step not counted."""
    evaluations: dict[str, Counted] = field(default_factory=dict)
    """Each split's counted (first) evaluation."""
    evaluation_seconds: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """Wall time of each split's evaluations not counted."""
    passes: list[Counted] = field(default_factory=list)
    """Each epoch's counted passes."""
    times: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    """Other timed parts (batch building)."""
    _counting: Counting | None = None
    _start: float = 0.0

    def epoch_batches(self, epoch: int, batches: list[np.ndarray]) -> list[np.ndarray]:
        return batches[:self.max_steps] if self.max_steps else batches

    def _begin(self, count: bool) -> None:
        self._counting = Counting() if count else None
        self._start = time.perf_counter()

    def _end(self) -> Counted | float:
        if self._counting is not None:
            counted, self._counting = self._counting.done(), None
            return counted
        return time.perf_counter() - self._start

    def step_start(self, epoch: int, step: int) -> None:
        self.steps[epoch] += 1
        self._begin(epoch not in self.counted_steps)

    def step_end(self, epoch: int, step: int, out: StepOutput) -> None:
        found = self._end()
        if isinstance(found, Counted):
            self.counted_steps[epoch] = found
        else:
            self.step_seconds.append(found)

    def evaluation_start(self, epoch: int, split: str) -> None:
        self._begin(split not in self.evaluations)

    def evaluation_end(self, epoch: int, split: str, evaluation: Evaluation) -> None:
        found = self._end()
        if isinstance(found, Counted):
            self.evaluations[split] = found
        else:
            self.evaluation_seconds[split].append(found)

    def epoch_pass_start(self, epoch: int) -> None:
        self._begin(True)

    def epoch_pass_end(self, epoch: int) -> None:
        self.passes.append(self._end())

    def batch_start(self, epoch: int, step: int) -> None:
        self._batch_start = time.perf_counter()

    def batch_end(self, epoch: int, step: int) -> None:
        self.times[BATCHES] += time.perf_counter() - self._batch_start


def run_probed(spec: GridSpec, cell: Cell, max_steps: int | None) -> tuple[CellProbe, dict[str, Any], float]:
    """Run ``cell`` of ``spec``'s grid as a worker process does, with a :class:`CellProbe` on
    its training loop; its outcome (:meth:`~cirbench.engine.cell.life.CellOutcome.record`) and wall time."""
    grid_for(spec).resources.hooks = probe = CellProbe(max_steps)
    start = time.perf_counter()
    outcome = run_cell_by_id(spec, cell.key.run_id, announce=lambda message: None)
    return probe, outcome, time.perf_counter() - start


@dataclass
class Part:
    """One part of a cell: calls, one call's FLOPs and wall time, the cell's share of time in it."""

    calls: int
    flops: float | None
    seconds: float
    share: float
    ops: dict[str, int] = field(default_factory=dict)
    """The FLOPs of one counted call by operator (the first counted)."""

    def rate(self) -> float | None:
        """FLOP/s of one call (None without FLOPs or time)."""
        return self.flops / self.seconds if self.flops is not None and self.seconds > 0 else None


def summarize(probe: CellProbe, wall: float) -> tuple[dict[str, Part], dict[str, float]]:
    """The cell's parts (``step``, the two evaluations, ``passes``, ``batches``, the rest
    and ``cell``) and the counter's time taken out of ``wall`` (on the steps, on the evaluations)."""
    n_steps = sum(probe.steps.values())
    step_flops = sum(probe.steps[e] * c.flops for e, c in probe.counted_steps.items())
    counted = [c.seconds for c in probe.counted_steps.values()]
    median_step = statistics.median(probe.step_seconds or counted)
    overhead = sum(max(0.0, s - median_step) for s in counted) if probe.step_seconds else 0.0
    step_seconds = sum(probe.step_seconds) + sum(counted) - overhead
    evaluation_overhead, evaluation_seconds = 0.0, {}
    for split, c in probe.evaluations.items():
        others = probe.evaluation_seconds[split]
        extra = max(0.0, c.seconds - statistics.median(others)) if others else 0.0
        evaluation_overhead += extra
        evaluation_seconds[split] = [c.seconds - extra, *others]
    cell_wall = wall - overhead - evaluation_overhead
    first_step = next(iter(probe.counted_steps.values()))
    parts = {STEP: Part(n_steps, step_flops / n_steps, median_step, step_seconds / cell_wall, first_step.ops)}
    total_flops = step_flops
    for split in (VALIDATION, HELD_OUT):
        if split in probe.evaluations:
            seconds, c = evaluation_seconds[split], probe.evaluations[split]
            parts[split] = Part(len(seconds), c.flops, statistics.median(seconds), sum(seconds) / cell_wall, c.ops)
            total_flops += len(seconds) * c.flops
    pass_flops = sum(c.flops for c in probe.passes)
    epochs, pass_seconds = len(probe.passes), sum(c.seconds for c in probe.passes)
    parts[PASSES] = Part(epochs, pass_flops / epochs if pass_flops else None, pass_seconds / epochs,
                         pass_seconds / cell_wall, next((c.ops for c in probe.passes if c.flops), {}))
    total_flops += pass_flops
    parts[BATCHES] = Part(n_steps, None, probe.times[BATCHES] / n_steps, probe.times[BATCHES] / cell_wall)
    rest = 1.0 - sum(p.share for p in parts.values())
    parts[REST] = Part(1, None, rest * cell_wall, rest)
    parts["cell"] = Part(1, total_flops, cell_wall, 1.0)
    return parts, {"steps": overhead, "evaluations": evaluation_overhead}


def part_record(part: Part, mm: float) -> dict[str, Any]:
    """``part`` as written to ``--json``, with its FLOP/s and their share of the matrix rate ``mm``."""
    rate = part.rate()
    return {**asdict(part), "flops_per_s": rate, "fraction_of_mm": rate / mm if rate is not None else None}


def print_parts(label: str, parts: dict[str, Part], mm: float) -> None:
    """One method's block of the table."""
    for name, p in parts.items():
        rate = p.rate()
        flops = f"{p.flops / 1e9:>10.3f}" if p.flops is not None else f"{'-':>10}"
        rates = f"{rate / 1e9:>9.1f}{rate / mm:>9.1%}" if rate is not None else f"{'-':>9}{'-':>9}"
        print(f"{label:<14}{name:<14}{p.calls:>6}{flops}{p.seconds:>10.4f}{rates}{p.share:>11.1%}")
        label = ""


def main(argv: list[str] | None = None) -> None:
    """Count and time the cells the arguments name and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default=METHODS)
    parser.add_argument("--noise", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=GridSpec.epochs, help="default: the default schedule's")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="training steps per epoch at most, for a quick check (2 or more: one is counted, the rest timed)")
    parser.add_argument("--dataset", default=GridSpec.dataset,
                        help="default: the default dataset's; e.g. shapes-mini for a quick check (not the default's figures)")
    parser.add_argument("--cache-dir", type=Path, default=Path("datasets"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, help="write the numbers here")
    parser.add_argument("--ceiling", action="store_true", help="also each part's ceiling at its shapes (_ceiling.py)")
    parser.add_argument("--repeats", type=int, default=5, help="--ceiling: replays of each distinct call (the best is kept)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    rate_before = matmul_rate()
    with tempfile.TemporaryDirectory(prefix="cirbench-flops-") as output:
        spec = default_spec(args.methods.split(","), [args.noise], args.epochs, args.cache_dir, Path(output) / "results",
                            args.dataset)
        grid = Grid(spec)
        references = reference_rows_seconds(grid)
        results: dict[str, Any] = {}
        for cell in grid.cells:
            probe, outcome, wall = run_probed(spec, cell, args.max_steps)
            if outcome["status"] != "completed":
                print(f"{cell.key.run_id}: {outcome['status']} {outcome['error']}")
                continue
            parts, taken_out = summarize(probe, wall)
            results[cell.key.method] = {
                "parts": parts, "wall_measured": wall, "counter_seconds": taken_out,
                "step_flops_by_epoch": {e: c.flops for e, c in probe.counted_steps.items()},
                "steps_by_epoch": dict(probe.steps), "pass_flops_by_epoch": [c.flops for c in probe.passes],
            }
        ceilings = cell_ceilings(spec.methods, args.noise, args.dataset, args.cache_dir, Path(output) / "ceiling",
                                 args.repeats) if args.ceiling else {}
    rate_after = matmul_rate()
    mm = max(rate_before, rate_after)
    start_up = start_up_seconds()

    shrunk = (", shrunk: not the default's figures"
              if args.max_steps or args.epochs != GridSpec.epochs or args.dataset != GridSpec.dataset else "")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); {spec.dataset} / {spec.backbone}, "
          f"noise {args.noise:g}, {spec.epochs} epochs, batch {spec.batch_size}, held-out share {spec.holdout:g}"
          + (f", at most {args.max_steps} steps an epoch" if args.max_steps else "") + shrunk)
    print(f"matrix rate (1024x1024 float32 torch.mm): {mm / 1e9:.1f} GFLOP/s "
          f"(before the cells {rate_before / 1e9:.1f}, after {rate_after / 1e9:.1f})")
    print(f"once per grid: process start-up (imports) {start_up:.1f} s, reference rows {references:.1f} s\n")
    print(f"{'method':<14}{'part':<14}{'calls':>6}{'GFLOP':>10}{'seconds':>10}{'GFLOP/s':>9}{'% of mm':>9}{'% of cell':>11}")
    for method, found in results.items():
        print_parts(method, found["parts"], mm)
    print(f"\n{'method':<14}{'step':>9}{VALIDATION:>12}{HELD_OUT:>10}{'cell':>9}   (% of mm)")
    for method, found in results.items():
        parts = found["parts"]
        cols = [(STEP, 9), (VALIDATION, 12), (HELD_OUT, 10), ("cell", 9)]
        print(f"{method:<14}" + "".join(
            f"{parts[k].rate() / mm:>{w}.1%}" if k in parts and parts[k].rate() else f"{'-':>{w}}" for k, w in cols))
    if ceilings:
        print(f"\nthe ceiling at the model's shapes (each cell shrunk to two epochs of six steps)")
        print_ceilings(ceilings, mm)
    if args.json:
        record = {
            "torch": torch.__version__, "threads": torch.get_num_threads(), "dataset": spec.dataset, "backbone": spec.backbone,
            "noise": args.noise, "epochs": spec.epochs, "batch_size": spec.batch_size, "holdout": spec.holdout,
            "max_steps": args.max_steps, "matmul_flops_per_s": mm, "matmul_before": rate_before, "matmul_after": rate_after,
            "start_up_seconds": start_up, "reference_rows_seconds": references,
            "methods": {method: {**found, "parts": {k: part_record(p, mm) for k, p in found["parts"].items()}}
                        for method, found in results.items()},
            **({"ceiling": ceiling_record(ceilings, mm)} if ceilings else {}),
        }
        args.json.write_text(json.dumps(record, indent=1))
        print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
