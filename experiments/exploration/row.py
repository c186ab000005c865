"""Print one exploration row (issues 43, 55) from a calibration results folder: the figures
the exploration table compares, every check's verdict, each hosted method's clean R@10 over
``sprc``'s, and the mean cell time of ``sprc`` and of each hosted method."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from cirbench.report.analysis.verdicts.calibration import _per_seed, _reference, calibration_checks, hosted_clean_recall
from cirbench.report.analysis.loading.load import load_results


def row(results: Path) -> dict:
    """The exploration figures of the one setting in ``results`` (means over its seeds)."""
    (setting,) = load_results(results).settings
    metric = "recall@10"
    mean = lambda method, rate: float(_per_seed(setting, method, rate, metric).mean())  # noqa: E731
    start = _reference(setting, "zero_shot", metric)
    sprc = {r: mean("sprc", r) for r in (0.0, 0.5, 0.8)}
    oracle = {r: mean("oracle", r) for r in (0.5, 0.8)}
    runs = setting.runs
    cells = runs[(runs.method == "sprc") & ~runs.is_reference.astype(bool)]
    checks = calibration_checks(setting)
    return {
        "zero_shot/sprc": round(start / sprc[0.0], 3),
        "sprc 0/50/80": [round(sprc[r], 3) for r in (0.0, 0.5, 0.8)],
        "oracle 50/80": [round(oracle[r], 3) for r in (0.5, 0.8)],
        "won back 50/80": [round((oracle[r] - sprc[r]) / (sprc[0.0] - sprc[r]), 2) for r in (0.5, 0.8)],
        "gap 80": round(oracle[0.8] - sprc[0.8], 3),
        "gain fifth/half": [round((oracle[r] - start) / (sprc[0.0] - start), 2) for r in (0.8, 0.5)],
        "sprc kept 80/0": round(sprc[0.8] / sprc[0.0], 2),
        "sprc cell s": round(float(np.mean(cells.wall_seconds)), 1),
        "sprc s/step": round(float(np.mean(cells.seconds_per_step)), 3),
        "hosted/sprc at 0%": {name: round(float(v.mean()) / sprc[0.0], 3)
                              for name, v in hosted_clean_recall(setting, metric).items() if len(v)},
        "cell s": {name: round(float(part.wall_seconds.mean()), 1)
                   for name, part in runs[~runs.is_reference.astype(bool)].groupby("method")},
        "checks": {c.name: f"{c.verdict} {c.value:.3f}" for c in checks},
    }


if __name__ == "__main__":
    print(json.dumps(row(Path(sys.argv[1])), indent=1))
