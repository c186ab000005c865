"""The comparison tables in the layout of the ConeSep paper's Tables 1-2: rows are methods
within a noise rate, columns the recall metrics plus the papers' average columns, cells
mean +- std over seeds in percent, the highest mean of each column and rate marked (a mark of
its own: bold and underline are the leaderboard's tested leads); then each method's gain over the baseline (the method whose role is ``baseline``)
and the kept-set purity per method.

Oracle methods (which saw the ground-truth flags) are shown but never ranked: they are a
perfect filter, not a competitor.
"""

from __future__ import annotations

import math

import pandas as pd

from cirbench.report.analysis.rankings.leaderboard import MARKS, VERSUS, Judge
from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.statistics.significance import difference
from cirbench.report.analysis.loading.numbers import (
    CLAIMS_EPOCH, LAST_EPOCH, ON_VALIDATION, PURITY_COLUMNS, format_mean, format_number, headline_column, purity_per_run, rate_label,
    run_columns, summarize,
)
from cirbench.report.tables.model import TOP_NOTE, Cell, TableModel, below_chance_note, collapse_note, read_seeds
from cirbench.results.roles import BASELINE, PERFECT_FILTER


def _ranks(values: dict[str, float], excluded: set[str]) -> dict[str, int]:
    """Rank 1 for the highest of the higher-is-better ``values`` at display precision (ties share it)."""
    shown = {m: float(format_number(v)) for m, v in values.items() if m not in excluded and v is not None and math.isfinite(v)}
    if len(shown) < 2:
        return {}
    top = max(shown.values())
    return {m: 1 for m, v in shown.items() if v == top}


def _ranked_table(
    title: str, stats: pd.DataFrame, columns: list[str], setting: Setting, note: str, read: pd.Index,
    unranked: frozenset[str] = frozenset(), kept_sets: bool = False,
) -> TableModel:
    """Rows method within noise rate from :func:`summarize` output of the runs ``read`` (run ids),
    the highest mean marked per column and rate (oracles and ``unranked`` columns never marked);
    with ``kept_sets`` the rows whose kept set is below chance are marked too."""
    rows, shown = [], []
    for rate in sorted(stats.index.get_level_values("noise_rate").unique()):
        block = stats.xs(rate, level="noise_rate")
        methods = [m for m in setting.methods if m in block.index]
        shown += [(m, rate) for m in methods]
        ranks = {
            c: {} if c in unranked else _ranks({m: float(block.loc[m, ("mean", c)]) for m in methods}, setting.oracles)
            for c in columns
        }
        for i, method in enumerate(methods):
            cells = []
            for c in columns:
                mean, std, n = block.loc[method, [("mean", c), ("std", c), ("n", c)]]
                cells.append(Cell(format_mean(float(mean), float(std), int(n)), ranks[c].get(method, 0)))
            mark = setting.below_chance_mark(method, rate) if kept_sets else ""
            rows.append((rate_label(rate) if i == 0 else "", setting.label(method, rate) + mark, cells))
    note += collapse_note(setting, shown) + (below_chance_note(setting, shown) if kept_sets else "")
    return TableModel(title, columns, rows, note, read_seeds(setting, shown, read))


def recall_table(setting: Setting) -> TableModel | None:
    """Tables 1-2 of the ConeSep paper for this setting (percent), at each run's last epoch of
    ``setting`` as given: the report gives it the view at the claims' epoch (:data:`CLAIMS_EPOCH`)."""
    per_run = run_columns(setting)
    columns = list(per_run.columns)
    if not columns:
        return None
    stats = summarize(setting, per_run)
    note = (
        f"{ON_VALIDATION.capitalize()} (%) {CLAIMS_EPOCH}, mean ± std over seeds; {TOP_NOTE}; "
        f"{setting.role(PERFECT_FILTER)} rows are not marked."
    )
    return _ranked_table("Retrieval", stats, columns, setting, note, per_run.index)


def _versus_full(judge: Judge | None, variant: str, full: str, rate: float) -> str:
    """The answer mark of ``variant - full`` at ``rate`` (the leaderboard's four answers), "" without a judge."""
    if judge is None:
        return ""
    check = judge(f"{variant} vs {full}, {rate_label(rate)}", difference(variant, full, rate))
    return MARKS.get(check.answer or VERSUS.get(check.verdict, ""), "")


def _paired_difference(values: pd.DataFrame, variant: str, full: str, rate: float) -> float:
    """Mean of ``variant - full`` over the seeds both have at ``rate`` (``values``: one value
    per run, columns ``method``, ``noise_rate``, ``seed``, ``value``); NaN without a shared seed."""
    at_rate = values[(values.noise_rate - rate).abs() < 1e-9]
    pair = [at_rate[at_rate.method == m].groupby("seed").value.mean() for m in (variant, full)]
    shared = pair[0].index.intersection(pair[1].index)
    return float((pair[0][shared] - pair[1][shared]).mean()) if len(shared) else math.nan


def ablation_table(setting: Setting, judge: Judge | None = None) -> TableModel | None:
    """Each method's ablation rows beside the full method, at the rates the rows were run
    at: the headline column and its difference to the full method (percentage points), with
    the answer of the claims' rule to it when ``judge`` is given (:func:`~cirbench.report.
    analysis.claims.recall_judge`; a release-readings variant is priced so, docs/parity.md)."""
    per_run = run_columns(setting)
    column = headline_column(list(per_run.columns))
    if column is None or not setting.variants:
        return None
    stats = summarize(setting, per_run[[column]])
    values = setting.runs.set_index("run_id")[["method", "noise_rate", "seed"]].join(
        per_run[column].rename("value"), how="inner")
    rows, cells_shown = [], []
    for base in sorted({v.split(":", 1)[0] for v in setting.variants}):
        labels = [base, *(v for v in setting.variants if v.startswith(f"{base}:"))]
        rates = sorted({rate for rate, method in stats.index if method in labels[1:]})
        for rate in rates:
            block = stats.xs(rate, level="noise_rate")
            shown = [m for m in labels if m in block.index]
            for i, method in enumerate(shown):
                mean, std, n = (float(block.loc[method, ("mean", column)]), float(block.loc[method, ("std", column)]),
                                int(block.loc[method, ("n", column)]))
                versus = "-" if method == base else format_number(_paired_difference(values, method, base, rate), sign=True)
                if versus != "-" and (mark := _versus_full(judge, method, base, rate)):
                    versus = f"{versus} {mark}"
                cells = [Cell(format_mean(mean, std, n)), Cell(versus)]
                rows.append((rate_label(rate) if i == 0 else "", f"{method}{setting.collapse_mark(method, rate)}", cells))
                cells_shown.append((method, rate))
    marks = (" Marks: the leaderboard's four answers to the difference (▲ better, ▼ worse, = equivalent, ○ undecided)."
             if judge is not None else "")
    note = (f"{column} (%), {ON_VALIDATION} {CLAIMS_EPOCH}, mean ± std over each row's seeds; the difference is to the "
            "full method at the same rate, in percentage points, on the seeds both rows share." + marks + " The claims section gives the intervals."
            + collapse_note(setting, cells_shown))
    return TableModel("Ablations", [column, "vs full"], rows, note, read_seeds(setting, cells_shown, per_run.index))


def gain_table(setting: Setting) -> TableModel | None:
    """Each method's mean gain over the baseline (percentage points) at each noise rate."""
    per_run = run_columns(setting)
    columns, baseline = list(per_run.columns), setting.role(BASELINE)
    if not columns or baseline not in setting.methods:
        return None
    means = summarize(setting, per_run)["mean"]
    rows, shown = [], []
    for rate in sorted(means.index.get_level_values("noise_rate").unique()):
        block = means.xs(rate, level="noise_rate")
        if baseline not in block.index:
            continue
        others = [m for m in setting.methods if m in block.index and m != baseline]
        for i, method in enumerate(others):
            diff = block.loc[method, columns] - block.loc[baseline, columns]
            cells = [Cell(format_number(d, sign=True)) for d in diff]
            rows.append((rate_label(rate) if i == 0 else "", setting.label(method, rate), cells))
        shown += [(m, rate) for m in (baseline, *others)]
    if not rows:
        return None
    note = (f"Mean difference to {baseline} in percentage points of {ON_VALIDATION} {CLAIMS_EPOCH}; the leaderboard "
            "and the claims say which differences are more than seed and query noise." + collapse_note(setting, shown))
    return TableModel(f"Gain over {baseline}", columns, rows, note, read_seeds(setting, shown, per_run.index))


def purity_table(setting: Setting) -> TableModel | None:
    """Kept-set purity, the share of each noise type caught and AUROC per method and rate."""
    per_run = purity_per_run(setting)
    if per_run.empty:
        return None
    per_run = per_run.dropna(axis=1, how="all")
    stats = summarize(setting, per_run)
    noisy_rates = [r for r in stats.index.get_level_values("noise_rate").unique() if r > 0]
    stats = stats[stats.index.get_level_values("noise_rate").isin(noisy_rates)]
    if stats.empty:
        return None
    note = (
        f"The kept sets {LAST_EPOCH} (where a method's kept set is final; the claims read purity there too), "
        "percent. Purity: truly clean share of the kept (selected-clean) set; Kept: its share of "
        "the training set; Clean kept: share of clean samples kept; Noise caught: share of noisy samples not kept, "
        "overall and per noise type; AUROC of the noise score (x100). '-' where a method does not partition or score; "
        f"{TOP_NOTE} (Kept is not marked)."
    )
    return _ranked_table(
        "Kept-set purity and noise detection", stats, list(per_run.columns), setting, note, per_run.index,
        unranked=frozenset({PURITY_COLUMNS["kept"]}), kept_sets=True,
    )
