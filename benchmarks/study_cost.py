"""What each grid of a study cost, measured: the wall seconds its finished cells recorded.

    python benchmarks/study_cost.py experiments/committed-report.toml
    python benchmarks/study_cost.py experiments/committed-report.toml --at-once 2

Reads the study's results folder (its ``runs`` table records every cell's ``wall_seconds``)
and prints, per grid in the study's order (a sweep's tuned cells, one line per noise rate,
after it): its cells, those not already counted in an earlier grid (a sweep's trial 0 is the
headline's cell), how many of those are finished, their summed wall time divided by
``--at-once`` (the cells that ran side by side) and their median; then the total. A cell run
beside other work (tests, a second study) counts at its slower time, so quote the medians
beside the sums. Reference rows (no noise rate) are left out. Run it from the folder the
study's paths are relative to (the repository root for the committed study).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from cirbench.api.study import study_grid
from cirbench.api.tuned import tuned_plan
from cirbench.results.store import ResultsStore
from cirbench.settings.study import load_study


def _hours(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min"


def main(argv: list[str] | None = None) -> None:
    """Print the measured cost of each grid of a study file."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", type=Path, help="a study file (TOML)")
    parser.add_argument("--at-once", type=int, default=2, help="cells that ran side by side (divides the summed time)")
    args = parser.parse_args(argv)
    study = load_study(args.study)
    runs = ResultsStore(study.output).read("runs")
    finished = runs[runs.status == "completed"].drop_duplicates("run_id", keep="last")
    wall = dict(zip(finished.run_id, finished.wall_seconds.astype(float)))
    counted: set[str] = set()
    total = 0.0

    def line(name: str, keys: list) -> None:
        nonlocal total
        ids = [k.run_id for k in keys if not math.isnan(k.noise_rate)]
        new = [i for i in dict.fromkeys(ids) if i not in counted]
        counted.update(new)
        seconds = pd.Series([wall[i] for i in new if i in wall], dtype=float)
        total += seconds.sum() / args.at_once
        median = f"{seconds.median():.0f} s" if len(seconds) else "-"
        print(f"{name}: {len(ids)} cells, {len(new)} new, {len(seconds)} finished: "
              f"{_hours(seconds.sum() / args.at_once)} {args.at_once} at a time, median {median}")

    for entry in study.grids:
        built = study_grid(entry, study)
        line(entry.where, [cell.key for cell in built.cells])
        if entry.kind == "sweep" and "tuned_seeds" in entry.options:
            for tuned in tuned_plan(built, list(entry.options["tuned_seeds"]), provisional=True).grids:
                line(f"  its tuned cells at {tuned.spec.noise_rates[0]:g}", [cell.key for cell in tuned.cells])
    print(f"total: {len(counted)} cells, {_hours(total)} {args.at_once} at a time")


if __name__ == "__main__":
    main()
