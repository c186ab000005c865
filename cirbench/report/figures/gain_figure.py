"""The gain-over-the-baseline figure: each method's gain over the baseline (the method whose
role is ``baseline``) at each noise rate (paired by seed, at the epoch the claims read), with
the perfect filter's gain drawn as the cap at each rate, so the room a method that only
removes noise has is seen, not read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from cirbench.report.analysis.rankings.leaderboard import ANSWERS, MARKS, RECALL_COLUMNS, Leaderboard, build_leaderboard
from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.loading.numbers import (
    CLAIMS_EPOCH, ON_VALIDATION, format_points, headline_column, rate_label, run_columns,
)
from cirbench.report.analysis.loading.selection import rule_view
from cirbench.report.figures.figure_file import DPI, FigureFile, figure_title, save_figure, styled
from cirbench.report.figures.palette import answer_colour, method_styles
from cirbench.results.roles import BASELINE
from cirbench.results.selection import DEFAULT_RULE
from cirbench.results.metrics import format_number

CAP_STYLE: dict = {"color": "black", "linestyle": "--", "linewidth": 2.0}
OUTLIER = 1.5
"""A bar further from 0 than this many times its panel's scale is drawn clipped, its value
written at the edge (:func:`y_limits`): one method's large loss would otherwise set the axis
and leave gains of a few points as slivers."""


def paired_gains(setting: Setting, per_run: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per noise rate (index) and method (columns' first level) the ``mean``, ``std`` and
    ``count`` over seeds of ``column`` minus the baseline's on the same seed (percentage points)."""
    baseline = setting.role(BASELINE)
    keyed = setting.runs.set_index("run_id")[["noise_rate", "method", "seed"]].join(per_run[[column]], how="inner")
    wide = keyed.pivot_table(index=["noise_rate", "seed"], columns="method", values=column)
    if baseline not in wide.columns or len(wide.columns) < 2:
        return pd.DataFrame()
    gains = wide.sub(wide[baseline], axis=0).drop(columns=baseline)
    return gains.groupby(level="noise_rate").agg(["mean", "std", "count"])


def y_limits(gains: pd.DataFrame, methods: list[str], caps: list[float]) -> tuple[float, float]:
    """The y range of a panel (points): every bar with its whisker, the caps and 0, except a bar
    more than :data:`OUTLIER` times the panel's scale (the larger of its biggest cap and the
    median of the bars' sizes) from 0, which is drawn clipped with its value written."""
    means = np.array([v for m in methods for v in gains[(m, "mean")].to_numpy()], dtype=float)
    stds = np.array([v for m in methods for v in gains[(m, "std")].fillna(0).to_numpy()], dtype=float)
    finite = np.isfinite(means)
    scale = max(float(np.median(np.abs(means[finite]))) if finite.any() else 0.0,
                max((abs(c) for c in caps), default=0.0), 1.0)
    kept = finite & (np.abs(means) <= OUTLIER * scale)
    low = min(0.0, *(means[kept] - stds[kept]), *caps)
    high = max(0.0, *(means[kept] + stds[kept]), *caps)
    outliers = means[finite & ~kept]  # room for a clipped bar's value at the edge it passes
    if (outliers < 0).any():
        low = min(low, -0.4 * scale)
    if (outliers > 0).any():
        high = max(high, 0.4 * scale)
    pad = 0.14 * (high - low or 1.0)
    return low - pad, high + pad


def _panel(ax, gains: pd.DataFrame, methods: list[str], filters: set[str], styles: dict, column: str,
           baseline: str, marks: dict[tuple[str, float], str]) -> dict[float, float]:
    """Grouped bars of ``methods``' gains, the cap of the perfect filter at each rate; the caps
    drawn; each bar's answer (``marks``: (method, rate) -> answer) written beyond its whisker."""
    rates = list(gains.index)
    x = np.arange(len(rates))
    caps = {float(rate): float(gains.loc[rate, (perfect, "mean")]) for perfect in filters for rate in rates
            if rate > 0 and np.isfinite(gains.loc[rate, (perfect, "mean")])}  # without noise the filter removes nothing
    low, high = y_limits(gains, methods, list(caps.values()))
    width = 0.8 / max(1, len(methods))
    for i, method in enumerate(methods):
        mean, std = gains[(method, "mean")].to_numpy(), gains[(method, "std")].fillna(0).to_numpy()
        where = x + width * (i - (len(methods) - 1) / 2)
        shown = np.clip(mean, low, high)
        clipped = np.isfinite(mean) & (shown != mean)
        ax.bar(where, shown, width, yerr=np.where(clipped, 0.0, std), color=styles[method]["color"], edgecolor="white",
               capsize=2, error_kw={"elinewidth": 0.8})
        for xi, rate, value, edge, spread in zip(where, rates, mean, shown, std):
            answer = marks.get((method, float(rate)))
            if answer in MARKS and np.isfinite(value):
                tip = edge if edge != value else value + np.sign(value or 1.0) * spread
                ax.annotate(MARKS[answer], (xi, tip), xytext=(0, 3 if value >= 0 else -3), textcoords="offset points",
                            ha="center", va="bottom" if value >= 0 else "top", fontsize=10, color=answer_colour(answer),
                            annotation_clip=False)
        for xi, value, edge in zip(where[clipped], mean[clipped], shown[clipped]):
            ax.annotate(format_points(value), (xi, edge), xytext=(0, 4 if value < 0 else -4), textcoords="offset points",
                        ha="center", va="bottom" if value < 0 else "top", fontsize=11, rotation=90,
                        bbox={"facecolor": "white", "edgecolor": styles[method]["color"], "pad": 1.0})
    for xi, rate in zip(x, rates):
        if float(rate) in caps:
            cap = caps[float(rate)]
            ax.hlines(cap, xi - 0.45, xi + 0.45, **CAP_STYLE)
            ax.annotate(f"cap {format_points(cap)}", (xi, cap), xytext=(0, 3), textcoords="offset points", ha="center",
                        va="bottom", fontsize=11, annotation_clip=True)
    ax.set_ylim(low, high)
    ax.axhline(0.0, color="0.4", linewidth=0.8)
    ax.set_xticks(x, [rate_label(r) for r in rates])
    ax.set_xlabel("noise rate")
    ax.set_ylabel(f"gain over {baseline} (points)")
    ax.set_title(column)
    ax.grid(axis="y", alpha=0.3)
    return caps


@styled
def gain_figure(setting: Setting, out: Path, rule: str = DEFAULT_RULE, board: Leaderboard | None = None) -> FigureFile | None:
    """The gains over the baseline of every compared method on the claims' metric and R@10, the
    perfect filter's as the cap, each bar of the claims' metric with the leaderboard's mark
    (``board``; built here when not given); None without the baseline or without another method beside it."""
    baseline = setting.role(BASELINE)
    view = rule_view(setting, rule)
    per_run = run_columns(view.setting)
    metric = headline_column(list(per_run.columns))
    recall = next((c for c in RECALL_COLUMNS if c in per_run.columns), None)
    columns = list(dict.fromkeys(c for c in (metric, recall) if c))
    panels = {c: paired_gains(view.setting, per_run, c) for c in columns}
    panels = {c: g for c, g in panels.items() if not g.empty}
    if not panels:
        return None
    present = set(next(iter(panels.values())).columns.get_level_values(0))
    methods = [m for m in setting.methods if m in present and m not in setting.oracles]
    oracles = {m for m in setting.oracles if m in present}
    styles = method_styles(setting)
    width = 5.2 * len(panels)
    fig = Figure(figsize=(max(width, 8.0), 4.4), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    board = board if board is not None else build_leaderboard(setting, rule=rule)
    marks = {(row.method, float(rate)): cell.versus for row in (board.ranked if board else []) for rate, cell in row.cells.items()}
    caps = {c: _panel(ax, g, methods, oracles, styles, c, baseline, marks if c == metric else {})
            for ax, (c, g) in zip(axes, panels.items())}
    cap = ("the perfect filter's gain drawn as the cap at each noise rate" if oracles
           else "no perfect filter in these results: the cap is not measured")
    figure_title(fig, f"Each method's gain over {baseline} (mean ± std over seeds, paired by seed, {CLAIMS_EPOCH}), "
                      f"{cap}: {setting.describe()}", max(width, 8.0))
    handles = [Patch(color=styles[m]["color"], label=setting.label(m)) for m in methods]
    handles += [Line2D([], [], **CAP_STYLE, label="the perfect filter's gain (the cap)")] if oracles else []
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), frameon=False)
    cap_text = "; ".join(f"{c} at {rate_label(r)}: {format_number(v, 1, sign=True)}" for c, found in caps.items() for r, v in found.items())
    alt = (f"Bar chart of each method's gain over {baseline} in {' and '.join(panels)} (percentage points) at noise "
           f"rates {', '.join(rate_label(r) for r in next(iter(panels.values())).index)}, one bar per method"
           + (f"; a dashed black line per rate marks the perfect filter's gain ({cap_text})" if cap_text else "")
           + ". The leaderboard's marks on the " + str(metric) + " bars: "
           + ", ".join(f"{m} {rate_label(r)} {MARKS[v]}" for (m, r), v in marks.items() if v in MARKS)
           + f". A bar above 0 beats {baseline} on average; "
           + ("the cap is the most a method that only removes noise can reach." if oracles else
              "no perfect filter was run, so the most a method that only removes noise can reach is not measured."))
    return save_figure(fig, out, f"gain_over_{baseline}",
                       f"What each method gains over {baseline}" + (", and the perfect filter's cap" if oracles else ""),
                       f"Each method's mean gain over {baseline} at each noise rate in percentage points of {ON_VALIDATION} "
                       f"(paired by seed, the bar's whisker ±1 std over seeds), read {CLAIMS_EPOCH}, on the claims' metric "
                       f"and on R@10. Beyond each bar of the claims' metric, the leaderboard's mark ("
                       + ", ".join(f"{a.mark} {a.word}" for a in ANSWERS.values())
                       + "): a whisker clear of 0 is not by itself a sure gain. A bar whose value is written in a box at the axis' edge is clipped: it reaches "
                       f"beyond the axis, which is scaled to the other bars and the cap. {_cap_caption(bool(oracles))} "
                       "The leaderboard and the claims say which gains are more than "
                       "seed and query noise.", alt)


def _cap_caption(measured: bool) -> str:
    """The caption's sentence on the cap: the perfect filter's gain, or that it was not measured."""
    if measured:
        return ("The dashed black line at each rate is the perfect filter's gain, trained on the truly clean triplets "
                "only: what a method that only removes noise can win here.")
    return ("No perfect filter (a method with the role perfect_filter) is in these results, so the cap, what a method "
            "that only removes noise can win here, is not measured: add the perfect filter to the grid to draw it.")
