"""The report's "Tuned" table: a sweep's selection (``cirbench sweep``, ``docs/selection.md``).

Per method, noise rate and seed, the trial whose held-out headline is best (each trial at
its own ``holdout``-selected epoch; ties to the lower trial) is the tuned run; its
validation headline at that epoch is reported beside trial 0's (the defaults, selected the
same way), with the hyperparameters the selected trials changed."""

from __future__ import annotations

import json
import math

import pandas as pd

from cirbench.report.analysis.load import Setting
from cirbench.report.analysis.numbers import CLAIMS_EPOCH, ON_VALIDATION, format_mean, rate_label
from cirbench.report.tables.model import Cell, TableModel
from cirbench.results.labels import TRIAL_LABEL
from cirbench.results.selection import headline_by_epoch


def trial_selection(setting: Setting) -> pd.DataFrame:
    """One row per (method, noise rate, seed) of a sweep: the selected ``trial``, its
    ``holdout`` headline and epoch, its validation headline there (``tuned``), trial 0's
    (``default``) and the selected trial's ``changed`` hyperparameters (text)."""
    runs = sweep_runs(setting)
    if runs.empty:
        return pd.DataFrame(columns=["method", "noise_rate", "seed", "trial", "holdout", "epoch", "tuned", "default", "changed"])
    held_out = setting.metrics[setting.metrics.run_id.isin(set(runs.run_id))]
    best_held = {run_id: headline_by_epoch(own, "holdout").max() for run_id, own in held_out.groupby("run_id")}
    chosen = setting.selection.reindex(runs.run_id)  # the holdout rule's epoch and the validation headline there
    frame = pd.DataFrame({
        "base": runs.base.to_numpy(), "noise_rate": runs.noise_rate.to_numpy(), "seed": runs.seed.to_numpy(),
        "trial": runs.trial.to_numpy(), "config": runs.config.to_numpy(),
        "holdout": [float(best_held.get(r, math.nan)) for r in runs.run_id],
        "epoch": chosen["holdout_epoch"].to_numpy(), "val": chosen["holdout"].to_numpy(),
    })
    rows = []
    for (base, rate, seed), group in frame.groupby(["base", "noise_rate", "seed"]):
        ranked = group.dropna(subset=["holdout"]).sort_values(["holdout", "trial"], ascending=[False, True])
        default = group[group.trial == 0]
        if ranked.empty:
            continue
        best = ranked.iloc[0]
        rows.append({"method": base, "noise_rate": rate, "seed": seed, "trial": int(best.trial), "holdout": best.holdout,
                     "epoch": int(best.epoch), "tuned": best.val,
                     "default": float(default.val.iloc[0]) if len(default) else math.nan,
                     "changed": _changed(best.config, default.config.iloc[0] if len(default) else None)})
    return pd.DataFrame(rows)


def sweep_runs(setting: Setting) -> pd.DataFrame:
    """The runs of ``setting``'s sweeps with their ``base`` method and ``trial`` number: every
    ``<method>:trial<k>`` row, and as trial 0 the plain method's row (its defaults) at each
    rate and seed its trials were run at, where it has a held-out split (a folder written
    before trial 0 was the plain row has ``<method>:trial0`` rows, used instead)."""
    runs = setting.runs
    trials = runs[runs.method.isin(setting.trials)].copy()
    parsed = trials.method.str.extract(TRIAL_LABEL)
    trials["base"], trials["trial"] = parsed["method"], parsed["trial"].astype(int)
    swept = trials[["base", "noise_rate", "seed"]].drop_duplicates()
    legacy = set(map(tuple, trials.loc[trials.trial == 0, ["base", "noise_rate", "seed"]].itertuples(index=False)))
    plain = runs.merge(swept, left_on=["method", "noise_rate", "seed"], right_on=["base", "noise_rate", "seed"])
    plain = plain[plain.n_holdout.gt(0)]
    plain = plain[[key not in legacy for key in plain[["base", "noise_rate", "seed"]].itertuples(index=False, name=None)]]
    return pd.concat([trials, plain.assign(trial=0)], ignore_index=True)


def _changed(config: str, default: str | None) -> str:
    """The entries of ``config`` (JSON) that differ from ``default``'s: ``lr=0.00021, omega=0.41``."""
    if default is None:
        return "?"
    mine, base = json.loads(config), json.loads(default)
    diff = [f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(mine.items()) if base.get(k) != v]
    return ", ".join(diff) or "defaults"


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
                     Cell(f"{gain:+.2f}" if math.isfinite(gain) else "-"), Cell(picks)]
            rows.append((rate_label(float(rate)) if i == 0 else "", method, cells))
    trials = selected.groupby("method").size()
    runs = sweep_runs(setting)
    budget = sorted(set(runs.groupby("base").trial.nunique().reindex(trials.index)))
    seeds = sorted({int(s) for s in selected.seed})
    spread = (f"mean ± std over seeds {','.join(map(str, seeds))}" if len(seeds) > 1
              else f"seed {seeds[0]} only (one seed: no spread, no test)")
    left_out = [m for m in setting.methods if m not in set(selected.method)]
    note = (f"A sweep of {'/'.join(str(b) for b in budget)} trial(s) per method (trial 0 = the defaults; `cirbench sweep`) "
            f"of {', '.join(sorted(trials.index))}" + (f"; not swept: {', '.join(left_out)}" if left_out else "") + ". "
            f"Each trial is read {CLAIMS_EPOCH}; per method, rate and seed the trial with the best held-out headline is "
            f"kept. Validation headline (%, {ON_VALIDATION}), {spread}; the gain is in percentage points; the picks name "
            "what each changed.")
    title = "Tuned (equal budget, holdout selection" + (f", seed {seeds[0]} only)" if len(seeds) == 1 else ")")
    return TableModel(title, ["defaults (trial 0)", "tuned", "gain", "selected"], rows, note)
