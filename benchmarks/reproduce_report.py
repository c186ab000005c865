"""Re-run a few cells of a report's setting here and check that their final metrics fall
within that report's spread over seeds: does this machine reproduce the committed report?

    python benchmarks/reproduce_report.py --reference reports                    # sprc at 0% and 80%, seed 0
    python benchmarks/reproduce_report.py --reference reports --methods sprc,conesep --noise 0.5 --seeds 0,1
    python benchmarks/reproduce_report.py --reference results                    # a results folder instead

The reference is a report folder (its settings' ``final_metrics.csv``, committed with the
report: :mod:`cirbench.report.cells_csv`), one such file, or a results folder. The cells run with the default options (the reference runs' epochs and held-out share, read
from their ``runs`` rows) into a scratch folder (``--scratch``, a new temporary folder by
default), from this cirbench's start. For every re-run cell and metric (final epoch,
validation, group ``all``) it prints the reference folder's value for the same seed, its
mean and standard deviation over the reference's seeds, the reproduced value and the
difference, and calls the cell reproduced when the difference is within ``--spread``
standard deviations of the reference's seeds. Exit 0 when every cell is, 1 when one is not,
2 when the reference cannot answer (no such cells, fewer than two seeds). A cell takes
2-3 minutes on a 2-core CPU. Run it by hand; tests/test_reproduce_report.py runs it on
``shapes-mini``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from cirbench import defaults
from cirbench.backbones.registry import BACKBONES
from cirbench.engine.grid import Grid, GridSpec, backbone_label, dataset_label
from cirbench.engine.runner import resolve_jobs, run_grid
from cirbench.report.cells_csv import CellsTableError, long_metrics, read_final_metrics
from cirbench.results.store import ResultsStore

DEFAULT_METRICS = "recall@5,recall@10,recall_subset@1"


class ReferenceError(ValueError):
    """The reference folder cannot answer: no completed cells of the setting, or one seed only."""


@dataclass(frozen=True)
class Verdict:
    """One re-run cell and metric against the reference."""

    method: str
    noise_rate: float
    seed: int
    metric: str
    reference: float
    mean: float
    std: float
    n_seeds: int
    reproduced: float
    allowed: float

    @property
    def difference(self) -> float:
        """Reproduced minus the reference's value for the same seed."""
        return self.reproduced - self.reference

    @property
    def within(self) -> bool:
        """Whether the difference is within the allowed spread."""
        return abs(self.difference) <= self.allowed


def final_metrics(store: ResultsStore, runs: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """The final-epoch validation metrics (group ``all``) of ``runs``: one row per run and
    metric with ``method, noise_rate, seed, metric, value``."""
    table = store.read("metrics", list(runs.run_id))
    table = table[(table.split == "val") & (table.group == "all") & table.metric.isin(metrics)]
    table = table[table.epoch == table.groupby("run_id")["epoch"].transform("max")]
    return table[["method", "noise_rate", "seed", "metric", "value"]]


def reference_runs(store: ResultsStore, spec: GridSpec) -> pd.DataFrame:
    """The completed, trained runs of ``spec``'s setting in ``store`` (the latest per cell)."""
    runs = store.read("runs")
    runs = runs[(runs.status == "completed") & ~runs.is_reference & runs.method.isin(spec.methods)
                & runs.noise_rate.isin(spec.noise_rates) & (runs.dataset == dataset_label(spec))
                & (runs.backbone == backbone_label(spec)) & (runs.noise_protocol == spec.noise_protocol)]
    return runs.sort_values("finished").drop_duplicates(["method", "noise_rate", "seed"], keep="last")


def cells_table_runs(path: Path, spec: GridSpec) -> pd.DataFrame:
    """The rows of ``spec``'s setting, methods and noise rates in the cells table at ``path``
    (a report folder or its ``final_metrics.csv``)."""
    try:
        table = read_final_metrics(path)
    except CellsTableError as exc:
        raise ReferenceError(str(exc)) from exc
    return table[(table.method.isin(spec.methods)) & table.noise_rate.isin(spec.noise_rates)
                 & (table.dataset == dataset_label(spec)) & (table.backbone == backbone_label(spec))
                 & (table.noise_protocol == spec.noise_protocol)]


def load_reference(path: Path, spec: GridSpec, metrics: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The reference's runs of ``spec``'s setting (one row per cell, with ``epochs``,
    ``holdout`` and ``start_key``) and their final validation ``metrics`` (rows ``method,
    noise_rate, seed, metric, value``), from a results folder or a report's cells table."""
    from_store = (path / "runs").is_dir()
    runs = reference_runs(ResultsStore(path), spec) if from_store else cells_table_runs(path, spec)
    if runs.empty:
        raise ReferenceError(f"{path} holds no completed run of {spec.methods} at {spec.noise_rates} "
                             f"on {dataset_label(spec)} / {backbone_label(spec)}")
    if from_store:
        return runs, final_metrics(ResultsStore(path), runs, metrics)
    try:
        return runs, long_metrics(runs, metrics)
    except CellsTableError as exc:
        raise ReferenceError(f"{path}: {exc}") from exc


def setting_of(runs: pd.DataFrame, column: str, given: float | None) -> float:
    """``given``, else the one value of ``column`` in the reference ``runs``."""
    if given is not None:
        return given
    values = sorted(set(runs[column]))
    if len(values) != 1:
        raise ReferenceError(f"the reference runs hold {column} {values}: give --{column} to choose one")
    return values[0]


def compare(reference: pd.DataFrame, reproduced: pd.DataFrame, spread: float) -> list[Verdict]:
    """A :class:`Verdict` per reproduced row, against the reference rows of its cell and
    metric (the same seed's value; the spread over the reference's seeds)."""
    verdicts = []
    for row in reproduced.itertuples():
        same = reference[(reference.method == row.method) & (reference.noise_rate == row.noise_rate)
                         & (reference.metric == row.metric)]
        if len(same) < 2:
            raise ReferenceError(f"the reference holds {len(same)} seed(s) of {row.method} at {row.noise_rate:g} "
                                 f"({row.metric}): at least two are needed to read a spread")
        at_seed = same[same.seed == row.seed]
        value = float(at_seed.value.iloc[0]) if len(at_seed) else float(same.value.mean())
        std = float(same.value.std(ddof=1))
        verdicts.append(Verdict(row.method, float(row.noise_rate), int(row.seed), row.metric, value,
                                float(same.value.mean()), std, len(same), float(row.value), spread * std))
    return verdicts


def print_table(verdicts: list[Verdict], out=sys.stdout) -> None:
    """One line per verdict."""
    header = f"{'method':<10} {'noise':>5} {'seed':>4} {'metric':<16} {'reference':>9} {'mean±std (n)':>20} " \
             f"{'reproduced':>10} {'diff':>8} {'allowed':>8}  verdict"
    print(header, file=out)
    for v in verdicts:
        spread = f"{v.mean:.4f}±{v.std:.4f} ({v.n_seeds})"
        print(f"{v.method:<10} {v.noise_rate:>5g} {v.seed:>4} {v.metric:<16} {v.reference:>9.4f} {spread:>20} "
              f"{v.reproduced:>10.4f} {v.difference:>+8.4f} {v.allowed:>8.4f}  {'ok' if v.within else 'OUTSIDE'}", file=out)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path, required=True, help="the report folder (or its final_metrics.csv) or results folder to reproduce")
    parser.add_argument("--methods", default="sprc")
    parser.add_argument("--noise", default="0,0.8")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--dataset", default="shapes")
    parser.add_argument("--epochs", type=int, default=None, help="default: the reference runs'")
    parser.add_argument("--holdout", type=float, default=None, help="default: the reference runs'")
    parser.add_argument("--batch-size", type=int, default=defaults.BATCH_SIZE)
    parser.add_argument("--metrics", default=DEFAULT_METRICS)
    parser.add_argument("--spread", type=float, default=2.0, help="allowed difference, in the reference seeds' std")
    parser.add_argument("--scratch", type=Path, default=None, help="where the cells run (default: a new temporary folder)")
    parser.add_argument("--cache-dir", type=Path, default=Path("datasets"))
    parser.add_argument("--jobs", type=int, default=0, help="cells at once (0: automatic)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the check; the exit status (0 reproduced, 1 not, 2 the reference cannot answer)."""
    args = parse(argv)
    metrics = args.metrics.split(",")
    probe = GridSpec(methods=args.methods.split(","), noise_rates=[float(x) for x in args.noise.split(",")],
                     seeds=[int(x) for x in args.seeds.split(",")], dataset=args.dataset)
    probe.weights = getattr(BACKBONES.get(probe.backbone), "default_weights", None)  # as Grid records it
    try:
        runs, reference = load_reference(args.reference, probe, metrics)
        epochs, holdout = int(setting_of(runs, "epochs", args.epochs)), setting_of(runs, "holdout", args.holdout)
        scratch = args.scratch or Path(tempfile.mkdtemp(prefix="cirbench-reproduce-"))
        grid = Grid(GridSpec(methods=probe.methods, noise_rates=probe.noise_rates, seeds=probe.seeds, dataset=args.dataset,
                             epochs=epochs, batch_size=args.batch_size, holdout=holdout, output=scratch,
                             cache_dir=args.cache_dir))
        print(f"re-running {len(grid.cells)} cell(s) ({epochs} epochs, held-out share {holdout:g}) into {scratch}")
        outcomes = run_grid(grid, jobs=resolve_jobs(args.jobs, "cpu"))
        failed = [o for o in outcomes if o.status == "failed"]
        if failed:
            print("\n".join(f"{o.cell.key.run_id} failed: {o.error}" for o in failed))
            return 1
        done = ResultsStore(scratch).read("runs")
        done = done[done.run_id.isin([c.key.run_id for c in grid.cells])]
        print(f"starts: reference {', '.join(sorted(set(runs.start_key) - {''})) or 'not recorded'}; "
              f"here {', '.join(sorted(set(done.start_key)))}")
        verdicts = compare(reference, final_metrics(ResultsStore(scratch), done, metrics), args.spread)
    except ReferenceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print_table(verdicts)
    outside = [v for v in verdicts if not v.within]
    print(f"{len(verdicts) - len(outside)} of {len(verdicts)} within {args.spread:g} std of the reference's seeds")
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main())
