"""The comparison tables in the layout of the ConeSep paper's Tables 1-2: rows are methods
within a noise rate, columns the recall metrics plus the papers' average columns, cells
mean +- std over seeds in percent, the highest mean of each column and rate marked (a mark of
its own: bold and underline are the leaderboard's tested leads); then each method's gain over the baseline (the method whose role is ``baseline``)
and the kept-set purity per method.

Oracle methods (which saw the ground-truth flags) are shown but never ranked: they are a
perfect filter, not a competitor.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cirbench.report.analysis.load import BELOW_CHANCE_MARK, COLLAPSE_MARK, Setting, final_epoch
from cirbench.results.headline import (  # noqa: F401  (re-exported: the report's modules read them from here)
    CIRR_AVG, FIQ_AVG, SUMMARY_GROUPS, SUMMARY_METRIC, headline_column, metric_groups, metric_label, wide_columns,
)
from cirbench.results.roles import BASELINE, PERFECT_FILTER


CLAIMS_EPOCH = "at each run's held-out-selected epoch (the claims' rule)"
"""How every table, figure and line of the report that reads recall says which epoch it read,
in these words (:func:`~cirbench.report.analysis.selection.rule_view` under the default rule; a run
without a held-out split is read at its last epoch, which the leaderboard counts); a part that reads another epoch
says so with :data:`LAST_EPOCH` or, like the model selection table, names its rules."""
LAST_EPOCH = "at each run's last epoch"
"""How a part that reads the last epoch says so: the kept sets and noise scores, which the
claims read there too, and the cells' table ``final_metrics.csv``."""
ON_VALIDATION = "recall on the validation queries"
"""What the recall numbers are: never the held-out noisy triplets, which only pick the epoch."""
TOP_MARK = "•"
"""The other tables' one mark: the highest mean of its column at a noise rate, tested against
nothing. Bold and underline belong to the leaderboard, where they are the claims' verdicts."""
TOP_NOTE = (f"{TOP_MARK} the highest mean of its column at that noise rate (no test: the leaderboard's bold and "
            "underline say which leads are more than seed and query noise)")


@dataclass(frozen=True)
class Cell:
    """One rendered table cell; ``rank`` 1: the highest mean of its column (:data:`TOP_MARK`), 0 not marked."""

    text: str
    rank: int = 0


@dataclass
class TableModel:
    """A table ready to render: a title, column headers, and rows grouped by noise rate."""

    title: str
    columns: list[str]
    rows: list[tuple[str, str, list[Cell]]]  # (noise label, blank after a block's first row; method; cells)
    note: str = ""


def rate_label(rate: float) -> str:
    """A noise rate as the papers print it: ``0.5`` -> ``50%``."""
    return f"{rate * 100:g}%"


def validation_split(metrics: pd.DataFrame) -> str | None:
    """The split the tables report: ``val`` if present, else the first split by name."""
    splits = sorted(metrics.split.dropna().unique())
    return "val" if "val" in splits else (splits[0] if splits else None)


def validation_metrics(setting: Setting) -> pd.DataFrame:
    """The metrics rows of the reported split (see :func:`validation_split`), every epoch."""
    split = validation_split(setting.metrics)
    return setting.metrics[setting.metrics.split == split]


def run_columns(setting: Setting) -> pd.DataFrame:
    """Final-epoch :func:`wide_columns` of every run, index ``run_id``."""
    metrics = validation_metrics(setting)
    if metrics.empty:
        return pd.DataFrame(index=pd.Index([], name="run_id"))
    return wide_columns(final_epoch(metrics), ["run_id"])


def summarize(setting: Setting, per_run: pd.DataFrame) -> pd.DataFrame:
    """Mean, std (ddof 1) and seed count of every column per (noise rate, method)."""
    keyed = setting.runs.set_index("run_id")[["noise_rate", "method"]].join(per_run, how="inner")
    return seed_stats(keyed.groupby(["noise_rate", "method"]))


def seed_stats(grouped) -> pd.DataFrame:
    """``mean``, ``std`` (ddof 1) and ``n`` of every column of a grouped frame, side by side."""
    return pd.concat({"mean": grouped.mean(), "std": grouped.std(ddof=1), "n": grouped.count()}, axis=1)


def _ranks(values: dict[str, float], excluded: set[str]) -> dict[str, int]:
    """Rank 1 for the highest of the higher-is-better ``values`` at display precision (ties share it)."""
    shown = {m: round(v, 2) for m, v in values.items() if m not in excluded and v is not None and math.isfinite(v)}
    if len(shown) < 2:
        return {}
    top = max(shown.values())
    return {m: 1 for m, v in shown.items() if v == top}


def format_mean(mean: float, std: float, n: int) -> str:
    """A table cell's ``mean ± std`` over ``n`` seeds (the mean alone without a spread; ``-`` without a mean)."""
    if not math.isfinite(mean):
        return "-"
    return f"{mean:.2f} ± {std:.2f}" if n >= 2 and math.isfinite(std) else f"{mean:.2f}"


def _flag_note(setting: Setting, cells: list[tuple[str, float]], column: str, what: str) -> str:
    """The footnote of a table showing ``cells`` (method, noise rate): each of them flagged
    ``column`` on any seed, on how many, after ``what`` (``""`` when none is)."""
    parts = []
    for method, rate in dict.fromkeys(cells):
        flagged, seeds = setting.flag_counts(column, method, rate)
        if flagged:
            parts.append(f"{method} at {rate_label(rate)} on {flagged} of {seeds} seed{'s' * (seeds != 1)}")
    return f" {what}: {'; '.join(parts)}." if parts else ""


def collapse_note(setting: Setting, cells: list[tuple[str, float]]) -> str:
    """The footnote of the cells that collapsed on any seed, on how many (``""`` when none did)."""
    return _flag_note(setting, cells, "collapsed", f"{COLLAPSE_MARK} collapsed (R@10 below the text_only row or a "
                      "constant loss: a defect, not a robustness result; reasons under Collapsed cells)")


def below_chance_note(setting: Setting, cells: list[tuple[str, float]]) -> str:
    """The footnote of the cells whose kept set is less clean than chance on any seed (``""`` when none is)."""
    return _flag_note(setting, cells, "below_chance", f"{BELOW_CHANCE_MARK} kept set less clean than a random subset "
                      "of the same size (a flag, not a failure; numbers under Kept sets below chance)")


def _ranked_table(
    title: str, stats: pd.DataFrame, columns: list[str], setting: Setting, note: str,
    unranked: frozenset[str] = frozenset(), kept_sets: bool = False,
) -> TableModel:
    """Rows method within noise rate from :func:`summarize` output, the highest mean marked per
    column and rate (oracles and ``unranked`` columns never marked); with ``kept_sets`` the
    rows whose kept set is below chance are marked too."""
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
    return TableModel(title, columns, rows, note)


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
    return _ranked_table("Retrieval", stats, columns, setting, note)


def ablation_table(setting: Setting) -> TableModel | None:
    """Each method's ablation rows beside the full method, at the rates the rows were run
    at: the headline column and its difference to the full method (percentage points)."""
    per_run = run_columns(setting)
    column = headline_column(list(per_run.columns))
    if column is None or not setting.variants:
        return None
    stats = summarize(setting, per_run[[column]])
    rows, cells_shown = [], []
    for base in sorted({v.split(":", 1)[0] for v in setting.variants}):
        labels = [base, *(v for v in setting.variants if v.startswith(f"{base}:"))]
        rates = sorted({rate for rate, method in stats.index if method in labels[1:]})
        for rate in rates:
            block = stats.xs(rate, level="noise_rate")
            full = float(block.loc[base, ("mean", column)]) if base in block.index else math.nan
            shown = [m for m in labels if m in block.index]
            for i, method in enumerate(shown):
                mean, std, n = (float(block.loc[method, ("mean", column)]), float(block.loc[method, ("std", column)]),
                                int(block.loc[method, ("n", column)]))
                diff = mean - full
                cells = [Cell(format_mean(mean, std, n)), Cell("-" if method == base or not math.isfinite(diff) else f"{diff:+.2f}")]
                rows.append((rate_label(rate) if i == 0 else "", f"{method}{setting.collapse_mark(method, rate)}", cells))
                cells_shown.append((method, rate))
    note = (f"{column} (%), {ON_VALIDATION} {CLAIMS_EPOCH}, mean ± std over seeds; the difference is to the full "
            "method at the same rate, in percentage points. The claims section gives the intervals."
            + collapse_note(setting, cells_shown))
    return TableModel("Ablations", [column, "vs full"], rows, note)


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
            cells = [Cell("-" if not math.isfinite(d) else f"{d:+.2f}") for d in diff]
            rows.append((rate_label(rate) if i == 0 else "", setting.label(method, rate), cells))
        shown += [(m, rate) for m in (baseline, *others)]
    if not rows:
        return None
    note = (f"Mean difference to {baseline} in percentage points of {ON_VALIDATION} {CLAIMS_EPOCH}; the leaderboard "
            "and the claims say which differences are more than seed and query noise." + collapse_note(setting, shown))
    return TableModel(f"Gain over {baseline}", columns, rows, note)


PURITY_COLUMNS: dict[str, str] = {
    "purity": "Purity",
    "kept": "Kept",
    "clean_recall": "Clean kept",
    "noise_recall": "Noise caught",
    "reference": "Ref. caught",
    "caption": "Caption caught",
    "target": "Target caught",
    "auroc": "AUROC",
}


def purity_per_run(setting: Setting) -> pd.DataFrame:
    """Final-epoch kept-set quality per run, in percent (AUROC x 100), index ``run_id``."""
    last = final_epoch(setting.purity)
    if last.empty:
        return pd.DataFrame()
    overall = last[last.noise_type == "all"].set_index("run_id")
    out = pd.DataFrame(index=overall.index)
    out["purity"] = overall.purity * 100
    n_sel = pd.to_numeric(overall.n_selected, errors="coerce")
    out["kept"] = n_sel / overall.n_samples.astype(float) * 100
    out["clean_recall"] = overall.clean_recall * 100
    out["noise_recall"] = overall.noise_recall * 100
    by_type = last[last.noise_type != "all"].pivot_table(index="run_id", columns="noise_type", values="noise_recall", aggfunc="mean")
    out = out.rename(columns=PURITY_COLUMNS)
    for kind in setting.noise_types:  # every type the results hold, a plugin protocol's too
        label = PURITY_COLUMNS.get(kind, f"{kind.capitalize()} caught")
        out[label] = by_type[kind].reindex(out.index) * 100 if kind in by_type.columns else np.nan
    out[PURITY_COLUMNS["auroc"]] = overall.auroc * 100
    return out


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
        "Kept-set purity and noise detection", stats, list(per_run.columns), setting, note,
        unranked=frozenset({PURITY_COLUMNS["kept"]}), kept_sets=True,
    )


def best_per_rate(setting: Setting) -> list[tuple[float, str, str, float]]:
    """(rate, headline column, best compared method (no perfect filter, no ablation row, no sweep
    trial: a trial picked on the reported queries would be a peek), its mean) for every
    noise rate."""
    per_run = run_columns(setting)
    column = headline_column(list(per_run.columns))
    if column is None:
        return []
    means = summarize(setting, per_run)["mean"][column]
    out = []
    for rate in sorted(means.index.get_level_values("noise_rate").unique()):
        block = means.xs(rate, level="noise_rate")
        block = block[block.index.isin(setting.methods) & ~block.index.isin(setting.oracles)].dropna()
        if len(block):
            out.append((rate, column, str(block.idxmax()), float(block.max())))
    return out


def to_markdown(table: TableModel) -> str:
    """A GitHub-flavoured Markdown table, the highest mean followed by :data:`TOP_MARK`."""
    def mark(cell: Cell) -> str:
        return f"{cell.text} {TOP_MARK}" if cell.rank == 1 else cell.text

    header = ["Noise", "Method", *table.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([":--", ":--"] + ["--:"] * len(table.columns)) + "|"]
    for noise, method, cells in table.rows:
        lines.append("| " + " | ".join([noise, method, *(mark(c) for c in cells)]) + " |")
    return "\n".join(lines)


def to_html(table: TableModel) -> str:
    """An HTML table, the highest mean followed by :data:`TOP_MARK`, the noise rate spanning its rows."""
    def mark(cell: Cell) -> str:
        text = html.escape(cell.text)
        return f'{text}<span class="top">{TOP_MARK}</span>' if cell.rank == 1 else text

    spans, current = [], None
    for noise, _, _ in table.rows:
        if noise:
            spans.append(1)
            current = len(spans) - 1
        elif current is not None:
            spans[current] += 1
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ["Noise", "Method", *table.columns])
    body, block = [], 0
    for noise, method, cells in table.rows:
        first = ""
        if noise:
            first = f'<td rowspan="{spans[block]}" class="noise">{html.escape(noise)}</td>'
            block += 1
        row_class = ' class="block-start"' if noise else ""
        tds = "".join(f"<td>{mark(c)}</td>" for c in cells)
        body.append(f"<tr{row_class}>{first}<td class=\"method\">{html.escape(method)}</td>{tds}</tr>")
    return (f'<div class="wide"><table class="results"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            "</table></div>")


def flagged_shares(setting: Setting) -> dict[float, dict[str, float]]:
    """Per noise rate and partitioning method, the share of all training samples not kept
    as clean at the final epoch (mean over seeds): what a random partition with the same
    flag rate catches of every noise type."""
    last = final_epoch(setting.purity)
    overall = last[(last.noise_type == "all") & (last.noise_rate > 0)]
    selected = pd.to_numeric(overall.n_selected, errors="coerce")
    share = (1.0 - selected / pd.to_numeric(overall.n_samples, errors="coerce")).dropna()
    result: dict[float, dict[str, float]] = {}
    for (rate, method), value in share.groupby([overall.noise_rate, overall.method]).mean().items():
        result.setdefault(float(rate), {})[method] = float(value)
    return result
