"""The purity-recall chart of a setting's kept sets (:mod:`cirbench.report.analysis.rankings.kept_worth`): per
noise rate, the headline and R@10 against the purity of the kept set. The frontier (the
baseline at the training set's clean share, the frontier cells, the perfect filter at purity
1; the seeds' spread as a band) is what a kept set of that purity is worth when the noise is
dropped at random; each partitioning method sits at (its purity, its score), its replay at (the
same purity, the replay's score), so the gap between the two is the method's other terms."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from cirbench.report.analysis.rankings.kept_worth import BASELINE_POINT, METHOD_POINT, PERFECT_POINT, KeptWorth
from cirbench.report.analysis.loading.load import is_kept_set
from cirbench.report.analysis.loading.numbers import rate_label
from cirbench.report.figures.figure_file import DPI, FigureFile, figure_title, save_figure
from cirbench.report.figures.labels import PointLabel, place_labels
from cirbench.report.figures.palette import ORACLE_STYLE, method_styles
from cirbench.results.labels import FRONTIER, NOISE_TYPE, REPLAY
from cirbench.results.metrics import format_number

FRONTIER_KINDS = (BASELINE_POINT, FRONTIER, PERFECT_POINT)
NOISE_TYPE_STYLE: dict = {"color": "0.45", "marker": "D", "markersize": 5, "linestyle": "none"}


def _mean(points: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per (kind, label, method): ``x`` and ``y``, the means over seeds of ``purity`` and
    ``column``, and ``xerr`` and ``yerr``, their std (0 with one seed)."""
    stats = points.groupby(["kind", "label", "method"])[["purity", column]].agg(["mean", "std"])
    stats.columns = ["x", "xerr", "y", "yerr"]
    stats[["xerr", "yerr"]] = stats[["xerr", "yerr"]].fillna(0.0)
    return stats.reset_index()


Drawn = tuple[list[PointLabel], list[tuple[float, float]]]
"""What a part of a panel leaves to label: its labels and every point it drew (data coordinates)."""
LABEL_STYLE: dict = {"fontsize": 8, "color": "0.25"}


def _frontier(ax, stats: pd.DataFrame, baseline_colour: str) -> Drawn:
    line = stats[stats.kind.isin(FRONTIER_KINDS)].sort_values("x")
    if line.empty:
        return [], []
    ax.fill_between(line.x, line.y - line.yerr, line.y + line.yerr, color="0.5", alpha=0.18, linewidth=0)
    ax.plot(line.x, line.y, color=ORACLE_STYLE["color"], linestyle=ORACLE_STYLE["linestyle"], marker=ORACLE_STYLE["marker"],
            markersize=4, linewidth=1.4, zorder=3)
    labels = [PointLabel("perfect filter" if row.kind == PERFECT_POINT else row.label.split(":", 1)[-1], (row.x, row.y),
                         LABEL_STYLE) for row in line[line.kind != BASELINE_POINT].itertuples(index=False)]
    base = line[line.kind == BASELINE_POINT]
    if len(base):  # on top of every ring, edged, so a replay at the same place never hides it
        ax.plot(base.x, base.y, "o", color=baseline_colour, markeredgecolor="black", markeredgewidth=0.8, markersize=6,
                zorder=7)
    return labels, list(zip(line.x, line.y))


def _methods(ax, stats: pd.DataFrame, styles: dict) -> Drawn:
    labels, points = [], []
    for method in sorted(set(stats.method[stats.kind == METHOD_POINT])):
        colour = styles.get(method, {"color": "0.3"})["color"]
        marker = styles.get(method, {}).get("marker", "o")
        own = stats[(stats.kind == METHOD_POINT) & (stats.method == method)].iloc[0]
        x, y = own.x, own.y
        ax.errorbar(x, y, xerr=own.xerr, yerr=own.yerr, fmt=marker, color=colour, markersize=8,
                    capsize=2, elinewidth=0.9, zorder=6)
        points.append((x, y))
        replay = stats[(stats.kind == REPLAY) & (stats.method == method)]
        if len(replay):
            ry = replay.y.iloc[0]
            ax.errorbar(x, ry, yerr=replay.yerr.iloc[0], fmt=marker, markerfacecolor="none", markeredgewidth=1.8,
                        color=colour, markersize=10, capsize=2, elinewidth=0.9, zorder=5)
            ax.annotate("", (x, y), (x, ry), arrowprops={"arrowstyle": "->", "color": colour, "linewidth": 1.2}, zorder=4)
            points.append((x, ry))
        labels.append(PointLabel(method, (x, y), {"fontsize": 8, "color": colour, "weight": "bold"}))
    return labels, points


def _noise_types(ax, stats: pd.DataFrame) -> Drawn:
    labels, points = [], []
    for row in stats[stats.kind == NOISE_TYPE].itertuples(index=False):
        ax.plot(row.x, row.y, **NOISE_TYPE_STYLE, zorder=3)
        labels.append(PointLabel(row.label.split(":", 1)[-1], (row.x, row.y), {"fontsize": 7, "color": "0.35"}))
        points.append((row.x, row.y))
    return labels, points


def _panel(ax, points: pd.DataFrame, column: str, name: str, styles: dict, baseline: str, rate: float) -> Drawn:
    """One panel drawn, its labels left to place once the figure is laid out."""
    stats = _mean(points, column)
    parts = [_methods(ax, stats, styles), _frontier(ax, stats, styles.get(baseline, {"color": "0.3"})["color"]),
             _noise_types(ax, stats)]
    ax.set_xlim(min(stats.x.min() - 8, 40), 103)
    ax.margins(y=0.12)
    ax.set_xlabel("purity of the kept set (%)")
    ax.set_ylabel(f"{name} (%)")
    ax.set_title(f"{name}, {rate_label(rate)} noise", fontsize=10)
    ax.grid(alpha=0.3)
    return [label for part in parts for label in part[0]], [point for part in parts for point in part[1]]


def kept_figure(worth: KeptWorth, out: Path) -> FigureFile | None:
    """The purity-recall chart (:func:`draw_kept`) written under ``out``; None when there is
    nothing of the kind to draw."""
    if not worth.drawn:
        return None
    points = worth.points.dropna(subset=["purity"])
    rates = sorted(points.noise_rate[points.kind.isin([FRONTIER, REPLAY])].unique())
    return save_figure(draw_kept(worth), out, "kept_set_worth", "What a kept set is worth: the purity-recall chart",
                       _caption(worth), _alt(worth, points, rates))


def draw_kept(worth: KeptWorth) -> Figure:
    """The purity-recall chart: a row per noise rate with a frontier or a replay, the headline
    and R@10 side by side, every label placed where it covers no other label and no point
    (:func:`~cirbench.report.figures.labels.place_labels`, once the figure is laid out)."""
    points = worth.points.dropna(subset=["purity"])
    rates = sorted(points.noise_rate[points.kind.isin([FRONTIER, REPLAY])].unique())
    columns = [("metric", worth.metric)] + ([("recall", worth.recall)] if worth.recall and worth.recall != worth.metric else [])
    runs = worth.setting.runs  # the methods' own colours, as every other figure gives them (kept-set labels aside)
    styles = method_styles(replace(worth.setting, runs=runs[~is_kept_set(runs)]))
    width = 5.0 * len(columns)  # two rates fit a 1280x800 screen under the heading
    fig = Figure(figsize=(width, 0.9 + 2.9 * len(rates)), dpi=DPI, layout="constrained")
    axes = fig.subplots(len(rates), len(columns), squeeze=False)
    pending = []
    for row, rate in zip(axes, rates):
        here = points[points.noise_rate == rate]
        pending += [(ax, _panel(ax, here, column, name, styles, worth.baseline, rate)) for ax, (column, name) in zip(row, columns)]
    figure_title(fig, f"What a kept set is worth: score against the purity of the kept set, at the epoch the claims read: "
                      f"{worth.setting.describe(points.seed[points.noise_rate.isin(rates)])}", width)
    handles = [Line2D([], [], color="black", linestyle="--", marker="s", markersize=4,
                      label=f"frontier ({worth.baseline}'s loss, noise dropped at random)")]
    base = styles.get(worth.baseline, {"color": "0.3"})["color"]
    handles.append(Line2D([], [], color=base, marker="o", markeredgecolor="black", linestyle="none", markersize=6,
                          label=f"{worth.baseline} (keeps every row)"))
    for method in sorted(set(points.method[points.kind == METHOD_POINT])):
        colour = styles.get(method, {"color": "0.3"})["color"]
        handles.append(Line2D([], [], color=colour, marker=styles.get(method, {}).get("marker", "o"), linestyle="none",
                              markersize=7, label=worth.setting.label(method)))  # a method told the rate: marked
    handles.append(Line2D([], [], color="0.3", marker="o", markerfacecolor="none", linestyle="none", markersize=8,
                          label=f"its replay ({worth.baseline}'s loss, its kept set)"))
    if points.kind.eq(NOISE_TYPE).any():
        handles.append(Line2D([], [], **NOISE_TYPE_STYLE, label="one noise type only"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), frameon=False, fontsize=8)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)  # lays the figure out: the axes' places and limits are final from here
    fig.set_layout_engine("none")
    for ax, (labels, drawn) in pending:
        place_labels(ax, labels, drawn, renderer)
    return fig


def _caption(worth: KeptWorth) -> str:
    return (f"Each run at the epoch the claims read, its kept set's purity at that same epoch; mean over seeds, the band "
            f"and whiskers ±1 std. The dashed black line is the frontier: `{worth.baseline}` (every row, the clean share), "
            f"the frontier cells (every clean triplet plus noisy ones drawn at random, to a set purity) and the perfect "
            f"filter (purity 100%), all trained with `{worth.baseline}`'s loss. The black-edged dot is `{worth.baseline}`, drawn "
            "above every other mark. A filled marker is a method (its purity, its score), the hollow marker of its shape "
            "below or above it its replay (the same kept sets, trained with "
            f"`{worth.baseline}`'s loss); the arrow from the replay to the method is the method's other terms. A replay "
            "above the frontier kept a set worth more than a random one of its purity (its noise is the cheap kind); a "
            "method above its replay gains from more than its filter, one below loses in its other terms. Grey diamonds: "
            "every clean triplet plus one noise type only.")


def _words(kind: str, method: str) -> str:
    """A point of the chart in words: ``the frontier at 0.8``, ``<method>'s replay``, ``<method>``."""
    if kind == FRONTIER:
        return f"the frontier at {method.split(':p', 1)[-1]}"
    return {REPLAY: f"{method}'s replay", PERFECT_POINT: "the perfect filter"}.get(kind, method)


def _alt(worth: KeptWorth, points: pd.DataFrame, rates: list[float]) -> str:
    parts = []
    for rate in rates:
        here = points[points.noise_rate == rate].groupby(["kind", "method"])[["purity", "metric"]].mean()
        marked = lambda kind, method: worth.setting.label(method) if kind in (METHOD_POINT, REPLAY) else method  # noqa: E731
        words = [f"{_words(kind, marked(kind, method))} {format_number(p, 0)}% pure: {format_number(m, 1)}" for (kind, method), (p, m) in here.iterrows()
                 if kind != NOISE_TYPE]
        parts.append(f"at {rate_label(rate)}: " + "; ".join(words))
    return (f"Scatter of {worth.metric} and {worth.recall} against the kept set's purity, with the frontier as a dashed "
            f"line. {worth.metric}, " + ". ".join(parts) + ".")
