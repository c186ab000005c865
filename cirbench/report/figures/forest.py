"""The claims at a glance: a forest plot of every comparison behind the report's claims, one
panel per unit (recall, purity, AUROC), the rows grouped by claim (its number and short
title as the group's label, a line between groups) and named in words ("a vs baseline, 80%").

A paired comparison is drawn as its mean difference with its seed interval and its query (or
sample) interval against the threshold it must clear, coloured by its verdict; a kept set
against chance (claim 9) as each seed's purity minus the chance level, the exact test per
seed deciding its verdict."""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from cirbench.report.analysis.claims import Check, Claim
from cirbench.report.analysis.significance import DOES_NOT_HOLD, HOLDS, UNDECIDED
from cirbench.report.figures.figure_file import DPI, TEXT_SIZE, FigureFile, figure_title, save_figure, styled

VERDICT_STYLES: dict[str, dict] = {
    HOLDS: {"color": "#117733", "marker": "o"},
    DOES_NOT_HOLD: {"color": "#882255", "marker": "X"},
    UNDECIDED: {"color": "#8C8C8C", "marker": "D"},
}
"""Colour and marker per verdict: Paul Tol's green and wine (safe for colour-blind readers) and
a grey, none of them a method's colour (:data:`~cirbench.report.figures.palette.OKABE_ITO`, black for
the perfect filter), so a verdict never reads as a method."""
UNITS: dict[str, str] = {
    "recall": "difference in {metric} (percentage points)",
    "purity": "purity difference (points); against chance: purity minus the clean share",
    "AUROC": "AUROC (x100) minus 50 (points)",
}
"""The forest's panels in order, each with its x-axis label."""
ROW_HEIGHT = 0.3  # inches per row or group label
PANEL_LINES = 14
"""The most lines (rows and claim labels) in one panel: a longer unit is split at a claim's
border into panels of their own, each with its axis, so no row is far from its scale."""
WHISKER = 3.0
"""How far beyond the middle half of a unit's values (in interquartile ranges) the axis
reaches; an interval or mean beyond it is drawn clipped at the edge, its mean written there."""
FONT = TEXT_SIZE
_DIFFERENCE = re.compile(r"^(?P<head>.*?) - (?P<tail>.*?) at (?P<rate>[\d.]+%)(?: > -?[\d.]+ points?)?$")


@dataclass(frozen=True)
class ForestRow:
    """One row of the forest: its claim's number and short title, its name in words, the check."""

    claim: int
    title: str
    words: str
    check: Check


def row_words(check: Check) -> str:
    """A check's label in words: ``a - baseline at 80%`` -> ``a vs baseline, 80%``; a kept
    set against chance ``a at 80%`` -> ``a vs chance, 80%``."""
    if check.kept_sets:
        method, _, rate = check.label.rpartition(" at ")
        return f"{method} vs chance, {rate}"
    if " gap at " in check.label:
        return check.label.replace(" - ", " vs ")
    match = _DIFFERENCE.match(check.label)
    if match is None:
        return check.label
    return f"{match['head']} vs {match['tail']}, {match['rate']}"


def _plotted(check: Check) -> bool:
    comparison = check.comparison
    return bool(check.kept_sets) or (comparison is not None and math.isfinite(comparison.mean))


def forest_panels(claims: Sequence[Claim]) -> dict[str, list[ForestRow]]:
    """The rows of each unit's panel (units in :data:`UNITS` order, only those with a row),
    every check with a comparison or a kept-set test present, numbered by its claim."""
    panels: dict[str, list[ForestRow]] = {unit: [] for unit in UNITS}
    for number, claim in enumerate(claims, 1):
        for check in claim.checks:
            if _plotted(check) and check.unit in panels:
                panels[check.unit].append(ForestRow(number, claim.short or textwrap.shorten(claim.text, 40), row_words(check), check))
    return {unit: rows for unit, rows in panels.items() if rows}


def plotted_checks(claims: Sequence[Claim]) -> list[tuple[int, Check]]:
    """Every check the forest draws, with its claim's number (1-based, in the report's order)."""
    return [(row.claim, row.check) for rows in forest_panels(claims).values() for row in rows]


def _layout(rows: list[ForestRow]) -> list[tuple[str, ForestRow | None]]:
    """The panel's lines from top to bottom: a group label before each claim's rows."""
    lines: list[tuple[str, ForestRow | None]] = []
    for row in rows:
        if not lines or lines[-1][1] is None or lines[-1][1].claim != row.claim:
            lines.append((f"{row.claim}. {row.title}", None))
        lines.append((row.words, row))
    return lines


def _values(check: Check) -> list[float]:
    """What a row draws, in points: each seed's purity minus chance for a kept set, else the
    mean and its two intervals (the threshold apart: it is always in view)."""
    if check.kept_sets:
        return [100 * (t.purity - t.chance) for t in check.kept_sets]
    comparison = check.comparison
    values = [comparison.mean]
    for interval in (comparison.seed_interval, comparison.bootstrap_interval):
        values += list(interval) if interval is not None else []
    return [100 * v for v in values if math.isfinite(v)]


def x_limits(rows: Sequence[ForestRow]) -> tuple[float, float]:
    """The x range of a unit's panels (points): every value, 0 and the thresholds, but no
    further than :data:`WHISKER` interquartile ranges beyond the middle half of the values."""
    values = np.array([v for row in rows for v in _values(row.check)] or [0.0])
    low, high = np.percentile(values, [25, 75])
    reach = WHISKER * max(high - low, 1.0)
    fixed = [0.0, *(100 * row.check.comparison.threshold for row in rows if not row.check.kept_sets)]
    left = min(max(values.min(), low - reach), *fixed)
    right = max(min(values.max(), high + reach), *fixed)
    pad = 0.06 * (right - left or 1.0)
    return left - pad, right + pad


def _clip(ax: Axes, y: float, value: float, limits: tuple[float, float], colour: str) -> float:
    """``value`` within ``limits``; one beyond them is written at the edge it passes."""
    low, high = limits
    if low <= value <= high:
        return value
    edge, align, arrow = (high, "right", "▶") if value > high else (low, "left", "◀")
    text = f"{value:+.1f} {arrow}" if value > high else f"{arrow} {value:+.1f}"
    ax.text(edge, y + 0.3, text, ha=align, va="center", fontsize=FONT, color=colour,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
    return edge


def _draw_row(ax: Axes, y: float, check: Check, limits: tuple[float, float]) -> None:
    style = VERDICT_STYLES.get(check.verdict, VERDICT_STYLES[UNDECIDED])
    colour = style["color"]
    if check.kept_sets:
        values = [100 * (t.purity - t.chance) for t in check.kept_sets]
        mean = sum(values) / len(values)
        ax.plot([min(max(v, limits[0]), limits[1]) for v in values], [y] * len(values), linestyle="none", marker="|",
                markersize=10, color=colour)
        ax.plot([_clip(ax, y, mean, limits, colour)], [y], linestyle="none", markersize=6, **style)
        ax.plot([0.0, 0.0], [y - 0.4, y + 0.4], color="black", linewidth=0.9, linestyle="--")
        return
    comparison = check.comparison

    def bounded(interval: tuple[float, float]) -> list[float]:
        return [min(max(100 * v, limits[0]), limits[1]) for v in interval]

    if comparison.seed_interval is not None:
        ax.hlines(y + 0.12, *bounded(comparison.seed_interval), color=colour, linewidth=3.2, alpha=0.8)
    if comparison.bootstrap_interval is not None:
        ax.hlines(y - 0.12, *bounded(comparison.bootstrap_interval), color=colour, linewidth=1.2)
    ax.plot([_clip(ax, y, 100 * comparison.mean, limits, colour)], [y], linestyle="none", markersize=6, **style)
    ax.plot([100 * comparison.threshold] * 2, [y - 0.4, y + 0.4], color="black", linewidth=0.9, linestyle="--")


def _chunks(lines: list[tuple[str, ForestRow | None]]) -> list[list[tuple[str, ForestRow | None]]]:
    """``lines`` in panels of at most :data:`PANEL_LINES`, split where a claim's group begins
    (a longer claim keeps its own panel whole)."""
    chunks: list[list[tuple[str, ForestRow | None]]] = [[]]
    group: list[tuple[str, ForestRow | None]] = []
    for line in [*lines, ("", None)]:
        if line[1] is None and group:
            if chunks[-1] and len(chunks[-1]) + len(group) > PANEL_LINES:
                chunks.append([])
            chunks[-1] += group
            group = []
        group.append(line)
    return [c for c in chunks if c]


def _panel(ax: Axes, lines: list[tuple[str, ForestRow | None]], limits: tuple[float, float], xlabel: str,
           title: str) -> None:
    n = len(lines)
    for i, (_, row) in enumerate(lines):
        y = n - 1 - i
        if row is None:
            if i:
                ax.axhline(y + 0.5, color="0.55", linewidth=0.8)
            continue
        _draw_row(ax, y, row.check, limits)
    ax.set_yticks([n - 1 - i for i in range(n)], [text for text, _ in lines], fontsize=FONT)
    for label, (_, row) in zip(ax.get_yticklabels(), lines):
        if row is None:
            label.set_fontweight("bold")
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlim(*limits)
    ax.tick_params(axis="x", labelsize=FONT)
    ax.axvline(0.0, color="#bbbbbb", linewidth=0.6, zorder=0)
    if title:
        ax.set_title(title, loc="left", fontsize=FONT + 1, fontweight="bold")
    ax.set_xlabel(xlabel, fontsize=FONT)
    ax.grid(axis="x", alpha=0.3)


@styled
def draw_forest(panels: dict[str, list[ForestRow]], metric: str | None = None) -> Figure:
    """The forest plot of ``panels`` (:func:`forest_panels`): per unit one axes, or several
    short ones (:data:`PANEL_LINES`) on the unit's one scale, each with its axis, stacked."""
    parts = []
    for unit, rows in panels.items():
        limits = x_limits(rows)
        xlabel = UNITS[unit].format(metric=metric or "the headline recall")
        chunks = _chunks(_layout(rows))
        parts += [(chunk, limits, xlabel, unit if i == 0 else f"{unit} (continued)") for i, chunk in enumerate(chunks)]
    heights = [len(chunk) + 2.2 for chunk, *_ in parts]
    fig = Figure(figsize=(10.0, 1.8 + ROW_HEIGHT * sum(heights)), dpi=DPI, layout="constrained")
    axes = fig.subplots(len(parts), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, (chunk, limits, xlabel, title) in zip(axes, parts):
        _panel(ax, chunk, limits, xlabel, title)
    handles = [Line2D([], [], linestyle="none", markersize=7, label=verdict, **style) for verdict, style in VERDICT_STYLES.items()]
    handles += [Line2D([], [], color="black", linewidth=3.2, label="seed interval (95% t)"),
                Line2D([], [], color="black", linewidth=1.2, label="query / sample interval (95% bootstrap)"),
                Line2D([], [], color="black", marker="|", linestyle="none", markersize=9, label="one seed's purity - chance"),
                Line2D([], [], color="black", linestyle="--", label="threshold")]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False, fontsize=FONT)
    figure_title(fig, "The claims' comparisons by unit, in percentage points: each difference with its two intervals "
                      "against its threshold, grouped by claim", 10.0)
    return fig


def claims_forest(claims: Sequence[Claim], out: Path, metric: str | None = None) -> FigureFile | None:
    """The forest plot of ``claims`` written under ``out``; None when no check has a difference."""
    panels = forest_panels(claims)
    if not panels:
        return None
    counts = ", ".join(f"{unit} ({len(rows)} comparisons)" for unit, rows in panels.items())
    groups = sorted({row.claim for rows in panels.values() for row in rows})
    alt = (f"Forest plot in {len(panels)} panels, one per unit: {counts}; rows grouped under claims "
           f"{', '.join(map(str, groups))}, each a difference with its intervals against a dashed threshold, "
           "coloured by verdict (green holds, wine red does not hold, grey undecided); a value beyond the axis is "
           "written at its edge.")
    return save_figure(draw_forest(panels, metric), out, "claims_forest",
                       "The claims at a glance: each comparison against its threshold, by unit",
                       "One panel per unit (recall, purity, AUROC; a long one split into short panels on the same scale), "
                       "the rows grouped by claim (numbered as in the claims table), in percentage points of recall on the "
                       "validation queries at each run's held-out-selected epoch (the claims' rule), or of purity and AUROC "
                       "(x100) at each run's last epoch: the dot is the mean difference over seeds, the thick bar its 95% t interval over seeds, the "
                       "thin bar its 95% paired bootstrap interval over validation queries (training samples for purity and "
                       "AUROC), the dashed line the threshold it must clear. A check holds (green) when both bars lie above "
                       "the threshold, does not hold (wine red) when both lie below it or, against a threshold of 0, both lie "
                       "inside the claim's margin (equivalent), and is undecided (grey) otherwise. A kept set against chance shows each seed's purity minus the training set's clean share "
                       "(ticks) and their mean; it holds when the exact test puts every seed above chance (p < 0.01). A value "
                       "beyond the axis (an outlier that would squeeze every other row) is drawn clipped, its value written "
                       "at the edge.",
                       alt)
