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

from cirbench.report.analysis.verdicts.claims import Check, Claim
from cirbench.report.analysis.statistics.significance import DOES_NOT_HOLD, HOLDS, UNDECIDED
from cirbench.report.figures.figure_file import DPI, TEXT_SIZE, FigureFile, figure_title, save_figure, styled
from cirbench.report.analysis.loading.numbers import format_points
from cirbench.report.figures.palette import answer_colour

VERDICT_MARKERS: dict[str, str] = {HOLDS: "o", DOES_NOT_HOLD: "X", UNDECIDED: "D"}
VERDICT_STYLES: dict[str, dict] = {verdict: {"color": answer_colour(verdict), "marker": marker}
                                   for verdict, marker in VERDICT_MARKERS.items()}
"""Colour and marker per verdict: the answers' colours (:func:`~cirbench.report.figures.palette.answer_colour`,
the claims table's too), none of them a method's colour, so a verdict never reads as a method."""
UNITS: dict[str, str] = {
    "recall": "difference in {metric} (percentage points)",
    "purity": "purity difference (points); against chance: purity minus the clean share",
    "AUROC": "AUROC (x100) minus 50 (points)",
}
"""The forest's panels in order, each with its x-axis label."""
ROW_HEIGHT = 0.25  # inches per row or group label
LABEL_CHARS = 30
"""The widest row label (characters) before it wraps onto a second line: two columns share the width."""
LINE_STEP = 0.55
"""The room (in rows) each further line of a wrapped row label takes, so it meets no other label."""
XLABEL_CHARS = 34
"""The widest line of a panel's x-axis label (characters): no wider than the panel, so never cut."""
PANEL_ROOM = 2.0
"""A panel's room (in rows) for its title, x ticks and x-axis label."""
WIDTH = 11.0
"""The figure's width (inches) with its panels in two columns: at most two 1280x800 screens tall
for the committed study's claims."""
PANEL_LINES = 14
"""The most lines (rows and claim labels) in one panel: a longer unit is split at a claim's
border into panels of their own, each with its axis, so no row is far from its scale."""
WHISKER = 3.0
"""How far beyond the middle half of a unit's values (in interquartile ranges) the axis
reaches; an interval or mean beyond it is drawn clipped at the edge, what lies there written at it
(:func:`edge_labels`)."""
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


def _points(check: Check) -> tuple[float, list[float]]:
    """The row's mark and the ends it draws, in points: the mean difference and its intervals'
    ends, or for a kept set the mean over seeds and each seed's purity minus chance."""
    if check.kept_sets:
        values = [100 * (t.purity - t.chance) for t in check.kept_sets]
        return sum(values) / len(values), values
    comparison = check.comparison
    ends = [100 * v for interval in (comparison.seed_interval, comparison.bootstrap_interval) if interval is not None
            for v in interval]
    return 100 * comparison.mean, [v for v in ends if math.isfinite(v)]


def edge_labels(check: Check, limits: tuple[float, float]) -> list[tuple[float, str, str]]:
    """What the row of ``check`` writes at the axis' edges, as (x, text, alignment): where its
    mark is beyond an edge, the mark's own value, said to be off scale (the mark is drawn at
    the edge); else, where an interval (a kept set's seed) reaches beyond it, the farthest end."""
    mean, ends = _points(check)
    low, high = limits
    found = []
    for edge, align, beyond in ((low, "left", lambda v: v < low), (high, "right", lambda v: v > high)):
        farthest = sorted((v for v in ends if beyond(v)), key=abs)
        if beyond(mean):
            text = f"{format_points(mean)}, off scale"
        elif farthest:
            text = f"{'a seed at' if check.kept_sets else 'interval to'} {format_points(farthest[-1])}"
        else:
            continue
        found.append((edge, f"◀ {text}" if edge == low else f"{text} ▶", align))
    return found


def _draw_row(ax: Axes, y: float, check: Check, limits: tuple[float, float]) -> None:
    style = VERDICT_STYLES.get(check.verdict, VERDICT_STYLES[UNDECIDED])
    colour = style["color"]

    def bounded(value: float) -> float:
        return min(max(value, limits[0]), limits[1])

    mean, ends = _points(check)
    if check.kept_sets:
        ax.plot([bounded(v) for v in ends], [y] * len(ends), linestyle="none", marker="|", markersize=10, color=colour)
        threshold = 0.0
    else:
        comparison = check.comparison
        for interval, offset, width, alpha in ((comparison.seed_interval, 0.12, 3.2, 0.8),
                                               (comparison.bootstrap_interval, -0.12, 1.2, 1.0)):
            if interval is not None:
                ax.hlines(y + offset, *(bounded(100 * v) for v in interval), color=colour, linewidth=width, alpha=alpha)
        threshold = 100 * comparison.threshold
    ax.plot([bounded(mean)], [y], linestyle="none", markersize=6, **style)
    ax.plot([threshold] * 2, [y - 0.4, y + 0.4], color="black", linewidth=0.9, linestyle="--")
    for x, text, align in edge_labels(check, limits):
        ax.text(x, y + 0.33, text, ha=align, va="center", fontsize=FONT - 1, color=colour,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.3})


def _halves(heights: list[float]) -> int:
    """Where to cut the panels (in order) into two columns of heights as even as can be."""
    total = sum(heights)
    cuts = [(abs(total - 2 * sum(heights[:i])), i) for i in range(1, len(heights) + 1)]
    return min(cuts)[1]


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


def _rows(lines: list[tuple[str, ForestRow | None]]) -> tuple[list[str], list[float]]:
    """Each line's label wrapped to :data:`LABEL_CHARS` and its height (in rows): a label
    wrapped onto more lines takes :data:`LINE_STEP` more per further line."""
    labels = [textwrap.fill(text, LABEL_CHARS) for text, _ in lines]
    return labels, [1.0 + LINE_STEP * label.count("\n") for label in labels]


def _panel(ax: Axes, lines: list[tuple[str, ForestRow | None]], limits: tuple[float, float], xlabel: str,
           title: str) -> None:
    labels, heights = _rows(lines)
    total = sum(heights)
    tops = [total - sum(heights[:i]) for i in range(len(lines))]
    centres = [top - height / 2 for top, height in zip(tops, heights)]
    for i, ((_, row), top, y) in enumerate(zip(lines, tops, centres)):
        if row is None:
            if i:
                ax.axhline(top, color="0.55", linewidth=0.8)
            continue
        _draw_row(ax, y, row.check, limits)
    ax.set_yticks(centres, labels, fontsize=FONT - 1, linespacing=0.95)
    for label, (_, row) in zip(ax.get_yticklabels(), lines):
        if row is None:
            label.set_fontweight("bold")
    ax.set_ylim(-0.2, total + 0.2)
    ax.set_xlim(*limits)
    ax.tick_params(axis="x", labelsize=FONT)
    ax.axvline(0.0, color="#bbbbbb", linewidth=0.6, zorder=0)
    if title:
        ax.set_title(title, loc="left", fontsize=FONT + 1, fontweight="bold")
    ax.set_xlabel(textwrap.fill(xlabel, XLABEL_CHARS), fontsize=FONT - 1)
    ax.grid(axis="x", alpha=0.3)


@styled
def draw_forest(panels: dict[str, list[ForestRow]], metric: str | None = None) -> Figure:
    """The forest plot of ``panels`` (:func:`forest_panels`): per unit one axes, or several
    short ones (:data:`PANEL_LINES`) on the unit's one scale, each with its axis, in two columns of even height."""
    parts = []
    for unit, rows in panels.items():
        limits = x_limits(rows)
        xlabel = UNITS[unit].format(metric=metric or "the headline recall")
        chunks = _chunks(_layout(rows))
        parts += [(chunk, limits, xlabel, unit if i == 0 else f"{unit} (continued)") for i, chunk in enumerate(chunks)]
    heights = [sum(_rows(chunk)[1]) + PANEL_ROOM for chunk, *_ in parts]
    split = _halves(heights)
    columns = [list(zip(parts[:split], heights[:split])), list(zip(parts[split:], heights[split:]))]
    columns = [c for c in columns if c]
    tallest = max(sum(h for _, h in column) for column in columns)
    width = WIDTH if len(columns) > 1 else WIDTH / 1.6
    fig = Figure(figsize=(width, 1.9 + ROW_HEIGHT * tallest), dpi=DPI, layout="constrained")
    for sub, column in zip(fig.subfigures(1, len(columns), squeeze=False)[0], columns):
        ratios = [h for _, h in column] + ([tallest - sum(h for _, h in column)] if sum(h for _, h in column) < tallest else [])
        axes = sub.subplots(len(ratios), 1, squeeze=False, gridspec_kw={"height_ratios": ratios})[:, 0]
        for ax, ((chunk, limits, xlabel, title), _) in zip(axes, column):
            _panel(ax, chunk, limits, xlabel, title)
        for ax in axes[len(column):]:
            ax.remove()  # the shorter column's filler: its room stays empty
    handles = [Line2D([], [], linestyle="none", markersize=7, label=verdict, **style) for verdict, style in VERDICT_STYLES.items()]
    handles += [Line2D([], [], color="black", linewidth=3.2, label="seed interval (95% t)"),
                Line2D([], [], color="black", linewidth=1.2, label="query / sample interval (95% bootstrap)"),
                Line2D([], [], color="black", marker="|", linestyle="none", markersize=9, label="one seed's purity - chance"),
                Line2D([], [], color="black", linestyle="--", label="threshold")]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, frameon=False, fontsize=FONT)
    figure_title(fig, "The claims' comparisons by unit, in percentage points: each difference with its two intervals "
                      "against its threshold, grouped by claim", width)
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
           "coloured by verdict (green holds, wine red does not hold, grey undecided); a mean beyond the axis is drawn "
           "at its edge with its value, said to be off scale.")
    return save_figure(draw_forest(panels, metric), out, "claims_forest",
                       "The claims at a glance: each comparison against its threshold, by unit",
                       "One panel per unit (recall, purity, AUROC; a long one split into short panels on the same scale), "
                       "the rows grouped by claim (numbered as in the claims table), in percentage points of recall on the "
                       "validation queries at each run's held-out-selected epoch (the claims' rule), or of purity and AUROC "
                       "(x100) at each run's last epoch: the dot is the mean difference over seeds, the thick bar its 95% t interval over seeds, the "
                       "thin bar its 95% paired bootstrap interval over validation queries (training samples for purity and "
                       "AUROC), the dashed line the threshold it must clear. A check holds (green) when both bars lie above "
                       "the threshold, does not hold (wine red) when both lie below it or, against a threshold of 0, both lie "
                       "inside the claim's margin (equivalent), and is undecided (grey) otherwise. A kept set against chance "
                       "shows each seed's purity minus the training set's clean share "
                       "(ticks) and their mean; it holds when the exact test puts every seed above chance (p < 0.01). A mean "
                       "beyond the axis (an outlier that would squeeze every other row) is drawn at the edge with its own "
                       "value written there, \"off scale\"; an interval (a seed) that only reaches beyond it is drawn to the "
                       "edge, its farthest end written there (◀ or ▶).",
                       alt)
