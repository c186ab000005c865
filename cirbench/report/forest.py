"""The claims at a glance: a forest plot of every paired comparison behind the report's
claims, each difference with its seed interval and its query (or sample) interval against
the threshold it must clear, coloured by its verdict."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Sequence

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from cirbench.report.claims import Check, Claim
from cirbench.report.figures import DPI, FigureFile, figure_title, save_figure
from cirbench.report.significance import DOES_NOT_HOLD, HOLDS, INCONCLUSIVE

VERDICT_COLOURS: dict[str, str] = {HOLDS: "#2e7d32", DOES_NOT_HOLD: "#c62828", INCONCLUSIVE: "#757575"}
ROW_HEIGHT = 0.26  # inches per check


def plotted_checks(claims: Sequence[Claim]) -> list[tuple[int, Check]]:
    """Every check with a paired comparison and a finite difference, with its claim's number
    (1-based, in the report's order)."""
    return [(number, check) for number, claim in enumerate(claims, 1) for check in claim.checks
            if check.comparison is not None and math.isfinite(check.comparison.mean)]


def claims_forest(claims: Sequence[Claim], out: Path, metric: str | None = None) -> FigureFile | None:
    """The forest plot of ``claims`` written under ``out``; None when no check has a difference."""
    rows = plotted_checks(claims)
    if not rows:
        return None
    height = 1.4 + ROW_HEIGHT * len(rows)
    fig = Figure(figsize=(9.5, height), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    for y, (number, check) in enumerate(reversed(rows)):
        comparison = check.comparison
        colour = VERDICT_COLOURS.get(check.verdict, "#757575")
        if comparison.seed_interval is not None:
            ax.hlines(y + 0.12, *comparison.seed_interval, color=colour, linewidth=3.2, alpha=0.8)
        if comparison.bootstrap_interval is not None:
            ax.hlines(y - 0.12, *comparison.bootstrap_interval, color=colour, linewidth=1.2)
        ax.plot([comparison.mean], [y], marker="o", color=colour, markersize=5)
        ax.plot([comparison.threshold] * 2, [y - 0.4, y + 0.4], color="black", linewidth=0.9, linestyle="--")
    labels = [f"{number}. {textwrap.shorten(check.label, 58)}" for number, check in reversed(rows)]
    ax.set_yticks(range(len(rows)), labels, fontsize=7.5)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.axvline(0.0, color="#bbbbbb", linewidth=0.6, zorder=0)
    ax.set_xlabel(f"difference ({metric or 'headline'}; purity and AUROC as fractions)")
    ax.grid(axis="x", alpha=0.3)
    handles = [Line2D([], [], color=c, linewidth=3, label=v) for v, c in VERDICT_COLOURS.items()]
    handles += [Line2D([], [], color="black", linewidth=3.2, label="seed interval (95% t)"),
                Line2D([], [], color="black", linewidth=1.2, label="query / sample interval (95% bootstrap)"),
                Line2D([], [], color="black", linestyle="--", label="threshold")]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False, fontsize=8)
    figure_title(fig, "The claims' comparisons: each difference with its two intervals against its threshold", 9.5)
    return save_figure(fig, out, "claims_forest", "The claims at a glance",
                 "One row per paired comparison behind a claim (numbered as in the claims table): the dot is the "
                 "mean difference over seeds, the thick bar its 95% t interval over seeds, the thin bar its 95% "
                 "paired bootstrap interval over validation queries (training samples for purity and AUROC), the "
                 "dashed line the threshold it must clear. A check holds (green) when both bars lie above the "
                 "threshold, does not hold (red) when both lie below it, and is inconclusive (grey) otherwise.")
