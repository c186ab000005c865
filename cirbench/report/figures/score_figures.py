"""The figures of a setting's noise scores: how each method's per-sample score at each run's last epoch
separates truly clean from truly noisy training samples, as histograms and as ROC curves.

Each function takes one :class:`~cirbench.report.analysis.loading.load.Setting` and an output
folder and returns the :class:`FigureFile` it wrote, or None when no method scores samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from sklearn.metrics import roc_auc_score, roc_curve

from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.loading.numbers import LAST_EPOCH, rate_label
from cirbench.report.figures.figure_file import DPI, TEXT_SIZE, FigureFile, figure_title, save_figure, styled
from cirbench.report.figures.palette import CLEAN_COLOUR, CLEAN_NAME, NOISY_COLOUR, NOISY_NAME, method_styles
from cirbench.results.metrics import format_number


def _scored(setting: Setting) -> pd.DataFrame:
    scores = setting.scores
    scores = scores[np.isfinite(scores.score.to_numpy(dtype=float))]
    return scores[scores.noise_rate > 0]


@styled
def score_distributions(setting: Setting, out: Path) -> FigureFile | None:
    """Histograms of the final-epoch noise score of truly clean and truly noisy training
    samples, one panel per method (rows) and noise rate (columns), seeds pooled."""
    scores = _scored(setting)
    if scores.empty:
        return None
    methods = [m for m in setting.methods if m in set(scores.method)]
    rates = sorted(scores.noise_rate.unique())
    width = max(3.4 * len(rates), 7.0)
    fig = Figure(figsize=(width, 2.5 * len(methods) + 1.1), dpi=DPI, layout="constrained")
    axes = fig.subplots(len(methods), len(rates), squeeze=False)
    figure_title(fig, f"Final-epoch noise-score distributions, seeds pooled (higher = more likely noisy): {setting.describe()}", width)
    for r, method in enumerate(methods):
        for c, rate in enumerate(rates):
            ax = axes[r][c]
            cell = scores[(scores.method == method) & (scores.noise_rate == rate)]
            if cell.empty:
                ax.set_axis_off()
                continue
            values = cell.score.to_numpy(dtype=float)
            noisy = cell.is_noisy.to_numpy(dtype=bool)
            lo, hi = (float(v) for v in np.percentile(values, [0.5, 99.5]))  # a few outliers must not squash the rest
            hi = hi if hi > lo else lo + 1.0
            values = np.clip(values, lo, hi)
            bins = np.linspace(lo, hi, 41)
            for mask, colour, label in ((~noisy, CLEAN_COLOUR, "clean"), (noisy, NOISY_COLOUR, "noisy")):
                if mask.any():
                    ax.hist(values[mask], bins=bins, density=True, color=colour, alpha=0.6, label=label)
            ax.set_title(f"{setting.label(method, rate)}, noise {rate_label(rate)}", fontsize=TEXT_SIZE)
            ax.set_xlabel("noise score")
            ax.set_ylabel("density")
    fig.legend(handles=[Patch(color=CLEAN_COLOUR, alpha=0.6, label="truly clean"),
                        Patch(color=NOISY_COLOUR, alpha=0.6, label="truly noisy")],
               loc="outside lower center", ncols=2, frameon=False)
    return save_figure(fig, out, "score_distributions", "Noise-score distributions",
                 f"How well each method's per-sample noise score {LAST_EPOCH} separates truly clean ({CLEAN_NAME}) from truly "
                 f"noisy ({NOISY_NAME}) training samples; little overlap means a clean separation.")


def _roc(cell: pd.DataFrame, grid: np.ndarray) -> tuple[np.ndarray, list[float]] | None:
    """The mean ROC curve over the runs of ``cell`` on the false-positive ``grid``, and each run's
    AUROC; None where no run has both clean and noisy samples."""
    curves, aucs = [], []
    for _, run in cell.groupby("run_id"):
        truth = run.is_noisy.to_numpy(dtype=bool)
        if truth.all() or not truth.any():
            continue
        fpr, tpr, _ = roc_curve(truth, run.score.to_numpy(dtype=float))
        curves.append(np.interp(grid, fpr, tpr))
        aucs.append(roc_auc_score(truth, run.score.to_numpy(dtype=float)))
    return (np.mean(curves, axis=0), aucs) if curves else None


LEGEND_ROW = 0.27
"""The height (inches) of one legend entry under a ROC panel."""


@styled
def roc_curves(setting: Setting, out: Path) -> FigureFile | None:
    """ROC curves of the final-epoch noise score (noisy = positive), one panel per noise
    rate, the curve averaged over seeds on a common false-positive grid, AUROC in the legend
    under each panel (over none of its curves)."""
    scores = _scored(setting)
    if scores.empty:
        return None
    styles = method_styles(setting)
    rates = sorted(scores.noise_rate.unique())
    grid = np.linspace(0.0, 1.0, 201)
    width = max(4.2 * len(rates), 6.0)
    methods = [m for m in setting.methods if m in set(scores.method)]
    entries = LEGEND_ROW * (len(methods) + 1)
    fig = Figure(figsize=(width, 4.6 + entries), dpi=DPI, layout="constrained")
    axes, below = fig.subplots(2, len(rates), squeeze=False, gridspec_kw={"height_ratios": [4.0, entries]})
    figure_title(fig, f"ROC of the final-epoch noise score (noisy = positive, mean over seeds): {setting.describe()}", width)
    for ax, legend, rate in zip(axes, below, rates):
        for method in methods:
            found = _roc(scores[(scores.method == method) & (scores.noise_rate == rate)], grid)
            if found is None:
                continue
            curve, aucs = found
            spread = f" ± {format_number(np.std(aucs, ddof=1), 3)}" if len(aucs) > 1 else ""
            ax.plot(grid, curve, color=styles[method]["color"], linestyle=styles[method]["linestyle"],
                    label=f"{setting.label(method, rate)}: AUROC {format_number(np.mean(aucs), 3)}{spread}")
        ax.plot([0, 1], [0, 1], color="0.6", linestyle=":", linewidth=1, label="chance")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.01)
        ax.set_aspect("equal")
        ax.set_title(f"noise {rate_label(rate)}")
        ax.set_xlabel("false-positive rate (clean flagged)")
        ax.set_ylabel("true-positive rate (noisy flagged)")
        ax.grid(alpha=0.3)
        legend.set_axis_off()
        legend.legend(*ax.get_legend_handles_labels(), fontsize=TEXT_SIZE, loc="upper center", frameon=False)
    return save_figure(fig, out, "roc_curves", "ROC curves of the noise score",
                 f"Each method's noise score {LAST_EPOCH} as a detector of noisy triplets; the legend under each panel "
                 "gives the AUROC (mean ± std over seeds).")
