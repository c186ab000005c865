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

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from cirbench.report.claims import Check, Claim
from cirbench.report.figure_file import DPI, FigureFile, figure_title, save_figure
from cirbench.report.significance import DOES_NOT_HOLD, HOLDS, INCONCLUSIVE

VERDICT_STYLES: dict[str, dict] = {
    HOLDS: {"color": "#0072B2", "marker": "o"},
    DOES_NOT_HOLD: {"color": "#D55E00", "marker": "X"},
    INCONCLUSIVE: {"color": "#6E6E6E", "marker": "D"},
}
"""Colour (Okabe-Ito blue and vermillion, grey: safe for colour-blind readers) and marker per verdict."""
UNITS: dict[str, str] = {
    "recall": "difference in {metric} (fraction)",
    "purity": "difference in kept-set purity (fraction); against chance: purity minus the clean share, per seed",
    "AUROC": "AUROC minus 0.5",
}
"""The forest's panels in order, each with its x-axis label."""
ROW_HEIGHT = 0.24  # inches per row or group label
_DIFFERENCE = re.compile(r"^(?P<head>.*?) - (?P<tail>.*?) at (?P<rate>[\d.]+%)(?: > -?[\d.]+)?$")


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


def _draw_row(ax: Axes, y: float, check: Check) -> None:
    style = VERDICT_STYLES.get(check.verdict, VERDICT_STYLES[INCONCLUSIVE])
    if check.kept_sets:
        values = [t.purity - t.chance for t in check.kept_sets]
        ax.plot(values, [y] * len(values), linestyle="none", marker="|", markersize=9, color=style["color"])
        ax.plot([sum(values) / len(values)], [y], linestyle="none", markersize=5, **style)
        ax.plot([0.0, 0.0], [y - 0.4, y + 0.4], color="black", linewidth=0.9, linestyle="--")
        return
    comparison = check.comparison
    if comparison.seed_interval is not None:
        ax.hlines(y + 0.12, *comparison.seed_interval, color=style["color"], linewidth=3.2, alpha=0.8)
    if comparison.bootstrap_interval is not None:
        ax.hlines(y - 0.12, *comparison.bootstrap_interval, color=style["color"], linewidth=1.2)
    ax.plot([comparison.mean], [y], linestyle="none", markersize=5, **style)
    ax.plot([comparison.threshold] * 2, [y - 0.4, y + 0.4], color="black", linewidth=0.9, linestyle="--")


def _panel(ax: Axes, unit: str, rows: list[ForestRow], metric: str) -> None:
    lines = _layout(rows)
    n = len(lines)
    for i, (_, row) in enumerate(lines):
        y = n - 1 - i
        if row is None:
            if i:
                ax.axhline(y + 0.5, color="0.55", linewidth=0.8)
            continue
        _draw_row(ax, y, row.check)
    ax.set_yticks([n - 1 - i for i in range(n)], [text for text, _ in lines], fontsize=7.5)
    for label, (_, row) in zip(ax.get_yticklabels(), lines):
        if row is None:
            label.set_fontweight("bold")
    ax.set_ylim(-0.7, n - 0.3)
    ax.axvline(0.0, color="#bbbbbb", linewidth=0.6, zorder=0)
    ax.set_title(unit, loc="left", fontsize=10, fontweight="bold")
    ax.set_xlabel(UNITS[unit].format(metric=metric), fontsize=8.5)
    ax.grid(axis="x", alpha=0.3)


def draw_forest(panels: dict[str, list[ForestRow]], metric: str | None = None) -> Figure:
    """The forest plot of ``panels`` (:func:`forest_panels`): one axes per unit, stacked."""
    heights = [len(_layout(rows)) + 2 for rows in panels.values()]
    fig = Figure(figsize=(10.0, 1.6 + ROW_HEIGHT * sum(heights)), dpi=DPI, layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, (unit, rows) in zip(axes, panels.items()):
        _panel(ax, unit, rows, metric or "the headline recall")
    handles = [Line2D([], [], linestyle="none", markersize=6, label=verdict, **style) for verdict, style in VERDICT_STYLES.items()]
    handles += [Line2D([], [], color="black", linewidth=3.2, label="seed interval (95% t)"),
                Line2D([], [], color="black", linewidth=1.2, label="query / sample interval (95% bootstrap)"),
                Line2D([], [], color="black", marker="|", linestyle="none", markersize=9, label="one seed's purity - chance"),
                Line2D([], [], color="black", linestyle="--", label="threshold")]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, frameon=False, fontsize=8)
    figure_title(fig, "The claims' comparisons by unit: each difference with its two intervals against its threshold, "
                      "grouped by claim", 10.0)
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
           "coloured by verdict (blue holds, vermillion does not hold, grey inconclusive).")
    return save_figure(draw_forest(panels, metric), out, "claims_forest",
                       "The claims at a glance: each comparison against its threshold, by unit",
                       "One panel per unit (recall, purity, AUROC), the rows grouped by claim (numbered as in the claims "
                       "table): the dot is the mean difference over seeds, the thick bar its 95% t interval over seeds, the "
                       "thin bar its 95% paired bootstrap interval over validation queries (training samples for purity and "
                       "AUROC), the dashed line the threshold it must clear. A check holds (blue) when both bars lie above "
                       "the threshold, does not hold (vermillion) when both lie below it, and is inconclusive (grey) "
                       "otherwise. A kept set against chance shows each seed's purity minus the training set's clean share "
                       "(ticks) and their mean; it holds when the exact test puts every seed above chance (p < 0.01).",
                       alt)
