"""The report's "Tuned" table: a sweep's selection (``cirbench sweep``, ``docs/selection.md``).

Per method, noise rate and seed the sweep ran at, the trial whose held-out headline is best
(each trial at its own ``holdout``-selected epoch; ties to the lower trial:
:func:`~cirbench.report.analysis.rankings.tuned.trial_selection`) is the tuned run; its validation
headline at that epoch is reported beside trial 0's (the defaults, selected the same way),
with the hyperparameters the selected trials changed. The picked trials on five seeds are
the tuned leaderboard's (:func:`~cirbench.report.analysis.rankings.tuned.tuned_board`)."""

from __future__ import annotations

import math

from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.loading.numbers import CLAIMS_EPOCH, ON_VALIDATION, format_mean, format_number, rate_label
from cirbench.report.analysis.rankings.tuned import sweep_runs, trial_selection
from cirbench.report.tables.model import Cell, TableModel, seeds_by_row

__all__ = ["sweep_runs", "trial_selection", "tuned_table"]


def tuned_table(setting: Setting) -> TableModel | None:
    """Trial 0 (the defaults) and the tuned trial per method and rate (validation headline at
    the holdout-selected epoch, mean ± std over seeds), the gain, and each seed's pick."""
    selected = trial_selection(setting)
    if selected.empty:
        return None
    rows = []
    for rate, block in selected.groupby("noise_rate"):
        for i, (method, group) in enumerate(block.groupby("method")):
            n = len(group)
            gain = float((group.tuned - group.default).mean())
            picks = "; ".join(f"s{int(r.seed)}: trial {r.trial} ({r.changed})" for r in group.itertuples(index=False))
            cells = [Cell(format_mean(float(group.default.mean()), float(group.default.std(ddof=1)), n)),
                     Cell(format_mean(float(group.tuned.mean()), float(group.tuned.std(ddof=1)), n)),
                     Cell(format_number(gain, sign=True)), Cell(picks)]
            rows.append((rate_label(float(rate)) if i == 0 else "", method, cells))
    trials = selected.groupby("method").size()
    runs = sweep_runs(setting)
    budget = sorted(set(runs.groupby("base").trial.nunique().reindex(trials.index)))
    seeds = sorted({int(s) for s in selected.seed})
    spread = (f"mean ± std over seeds {','.join(map(str, seeds))}" if len(seeds) > 1
              else f"seed {seeds[0]} only (one seed: no spread, no test)")
    left_out = [m for m in setting.methods if m not in set(selected.method) and m not in setting.oracles]
    note = (f"A sweep of {'/'.join(str(b) for b in budget)} trial(s) per method (trial 0 = the defaults; `cirbench sweep`) "
            f"of {', '.join(sorted(trials.index))}" + (f"; not swept: {', '.join(left_out)}" if left_out else "") + ". "
            f"Each trial is read {CLAIMS_EPOCH}; per method, rate and seed the trial with the best held-out headline is "
            f"kept. Validation headline (%, {ON_VALIDATION}), {spread}; the gain is in percentage points; the picks name "
            "what each changed.")
    read = seeds_by_row({(m, r): group.seed for (m, r), group in selected.groupby(["method", "noise_rate"])})
    return TableModel("Tuned (equal budget, holdout selection)", ["defaults (trial 0)", "tuned", "gain", "selected"], rows,
                      note, read)
