"""The report's figures, drawn with matplotlib's object API (no pyplot state; PNG via Agg).

Each function takes one :class:`~cirbench.report.analysis.loading.load.Setting` and an output folder and
returns the :class:`FigureFile` it wrote, or None when the setting has no data for it (a
method that never partitions has no purity bars; a grid without noise has no ROC curves).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from cirbench.report.analysis.loading.load import BELOW_CHANCE_MARK, COLLAPSE_MARK, Setting, final_epoch
from cirbench.report.analysis.loading.numbers import (
    CLAIMS_EPOCH, LAST_EPOCH, ON_VALIDATION, flagged_shares, format_percent, headline_column, rate_label, run_columns,
    summarize,
    validation_metrics, wide_columns,
)
from cirbench.report.analysis.rankings.leaderboard import RECALL_COLUMNS
from cirbench.report.analysis.rankings.references import reference_stats
from cirbench.report.figures.figure_file import (
    DPI, MAX_WIDTH, TEXT_SIZE, FigureFile, figure_title, save_figure, styled,
)
from cirbench.report.figures.palette import CLEAN_COLOUR, CLEAN_NAME, NOISY_COLOUR, NOISY_NAME, method_styles, reference_style
from cirbench.report.figures.score_figures import roc_curves, score_distributions
from cirbench.results.roles import BASELINE



def _label(setting: Setting, method: str) -> str:
    return setting.label(method)


def _ring_collapsed(ax: Axes, setting: Setting, method: str, rates, x, y) -> bool:
    """Ring the points (``x``, ``y``) of ``method`` whose noise rate collapsed on any seed;
    whether any was ringed."""
    hit = [i for i, rate in enumerate(rates) if setting.collapse_mark(method, float(rate))]
    if hit:
        ax.scatter(np.asarray(x)[hit], np.asarray(y)[hit], s=140, facecolors="none", edgecolors="red", linewidths=1.6, zorder=5)
    return bool(hit)


def _collapse_handle() -> Line2D:
    return Line2D([], [], marker="o", markersize=10, markerfacecolor="none", markeredgecolor="red", linestyle="none",
                  label=f"{COLLAPSE_MARK} collapsed on a seed")


def _grid(n: int, ncols: int, width: float, height: float, title: str, min_width: float = 8.0) -> tuple[Figure, list[Axes]]:
    """A figure of ``n`` panels in at most ``ncols`` balanced columns (fewer where ``ncols``
    panels would be wider than :data:`MAX_WIDTH`), at least ``min_width`` inches wide so the
    title and the shared legend fit."""
    ncols = max(1, min(ncols, int(MAX_WIDTH // width)))  # no wider than a page shows at full size
    nrows = math.ceil(n / max(1, ncols))
    ncols = max(1, math.ceil(n / nrows))
    width = max(width, min_width / ncols)
    fig = Figure(figsize=(width * ncols, height * nrows + 0.9), dpi=DPI, layout="constrained")
    axes = list(np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel())
    for ax in axes[n:]:
        ax.set_visible(False)
    figure_title(fig, title, width * ncols)
    return fig, axes[:n]


def _method_legend(fig: Figure, setting: Setting, methods: list[str], styles: dict[str, dict],
                   extra: list[Line2D] | None = None, ncols: int = 6) -> None:
    handles = [Line2D([], [], **styles[m], label=_label(setting, m)) for m in methods] + (extra or [])
    fitting = max(2, int(fig.get_figwidth() // 2.4))  # a column per 2.4 inches: no entry cut at the figure's edge
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), ncols, fitting), frameon=False)


def _rate_axis(ax: Axes, rates: list[float]) -> None:
    ax.set_xticks([r * 100 for r in rates], [rate_label(r) for r in rates])
    ax.set_xlabel("noise rate")
    ax.grid(alpha=0.3)


YLABEL_CHARS = 20
"""The longest line of a y-axis label (characters) that a panel's height holds."""
DODGE = 0.9
"""How far apart (noise-rate percent) the methods' points are set at each rate, so lines that
lie on each other are still told apart (each method has its marker too)."""


@styled
def recall_vs_noise(setting: Setting, out: Path) -> FigureFile | None:
    """Recall@K against noise rate, one panel per reported column, a line per method with a
    band of +-1 std over seeds (each run's last epoch of ``setting`` as given: the report gives
    it the view at the claims' epoch)."""
    per_run = run_columns(setting)
    columns = list(per_run.columns)
    if not columns:
        return None
    first = [c for c in (headline_column(columns), *RECALL_COLUMNS) if c in columns]
    columns = list(dict.fromkeys(first + columns))  # the headline first, then R@10, then the rest
    stats = summarize(setting, per_run)
    styles = method_styles(setting)
    references = reference_stats(setting)
    references_columns = set(references["mean"].columns) if len(references) else set()
    title = f"Validation recall vs noise rate, {CLAIMS_EPOCH} (mean ± std over seeds): {setting.describe()}"
    fig, axes = _grid(len(columns), 4, 3.6, 2.9, title)
    rates, ringed = setting.rates, False
    drawn = [m for m in setting.methods if m in stats.index.get_level_values("method")]
    for ax, column in zip(axes, columns):
        for i, method in enumerate(drawn):
            rows = stats.xs(method, level="method").sort_index()
            x = rows.index.to_numpy() * 100 + DODGE * (i - (len(drawn) - 1) / 2)  # side by side where lines meet
            mean, std = rows[("mean", column)].to_numpy(), rows[("std", column)].fillna(0).to_numpy()
            ax.plot(x, mean, **styles[method], label=_label(setting, method))
            ax.fill_between(x, mean - std, mean + std, color=styles[method]["color"], alpha=0.15, linewidth=0)
            ringed |= _ring_collapsed(ax, setting, method, rows.index, x, mean)
        for name in references.index if column in references_columns else []:
            value = references.loc[name, ("mean", column)]
            if pd.notna(value):
                ax.axhline(value, **reference_style(setting, name))
        ax.set_title(column)
        ax.set_ylabel(f"{column} (%)")
        _rate_axis(ax, rates)
    _method_legend(fig, setting, [m for m in setting.methods if m in stats.index.get_level_values("method")], styles,
                   extra=[Line2D([], [], **reference_style(setting, name), label=name) for name in references.index]
                   + ([_collapse_handle()] if ringed else []), ncols=5)
    return save_figure(fig, out, "recall_vs_noise", "Recall vs noise rate",
                 f"One panel per metric, the headline first, then R@10, {ON_VALIDATION} in percent {CLAIMS_EPOCH}; a line "
                 "per method (mean over seeds, its own marker, its points set a little apart at each rate) with a ±1 std "
                 "band. Horizontal lines are "
                 "the reference rows, not fine-tuned (zero_shot: the starting model; text_blind: the reference image "
                 f"alone; text_only: the text alone) and the bound: {setting.role(BASELINE)} trained on the uncorrupted "
                 "triplets. A red ring "
                 "marks a method at a noise rate where it collapsed on a seed (see Collapsed cells).",
                 _recall_alt(setting, stats, columns, drawn, list(references.index)))


def _recall_alt(setting: Setting, stats: pd.DataFrame, columns: list[str], drawn: list[str], references: list[str]) -> str:
    """The recall figure in words: every panel by name with the highest and the lowest method
    at the highest noise rate (perfect filters aside), then what each panel draws."""
    top = max(setting.rates)
    rated = stats.xs(top, level="noise_rate") if top in stats.index.get_level_values("noise_rate") else None
    ranked = [m for m in drawn if m not in setting.oracles]
    panels = []
    for column in columns:
        means = rated[("mean", column)].reindex(ranked).dropna() if rated is not None else pd.Series(dtype=float)
        extremes = (f" (at {rate_label(top)}: highest {setting.label(means.idxmax())} {format_percent(means.max())}, "
                    f"lowest {setting.label(means.idxmin())} {format_percent(means.min())})") if len(means) > 1 else ""
        panels.append(column + extremes)
    lines = "; horizontal lines for the reference rows and the bound (" + ", ".join(references) + ")" if references else ""
    return (f"Line charts in {len(columns)} panels, one per metric: " + "; ".join(panels) + ". Each panel draws the "
            f"metric in percent against the noise rate ({', '.join(rate_label(r) for r in setting.rates)}), a line per method "
            f"({', '.join(setting.label(m) for m in drawn)}) with a ±1 std band{lines}.")


def _counts(setting: Setting) -> pd.DataFrame:
    last = final_epoch(setting.purity)
    overall = last[last.noise_type == "all"].copy()
    for column in ("n_selected", "n_selected_clean", "n_selected_noisy"):
        overall[column] = pd.to_numeric(overall[column], errors="coerce")
    return overall.dropna(subset=["n_selected"])


@styled
def purity_bars(setting: Setting, out: Path) -> FigureFile | None:
    """ConeSep Figure 6: per method and noise rate the kept-clean set as stacked bars of truly
    clean (Real Positive) and truly noisy (Wrong Positive) samples, final epoch, mean over
    seeds, with the purity printed on top and the number of truly clean samples outlined."""
    counts = _counts(setting)
    if counts.empty:
        return None
    runs = setting.runs.set_index("run_id")
    counts = counts.join(runs[["n_train", "n_noisy"]], on="run_id")
    counts["n_clean_total"] = counts.n_train - counts.n_noisy
    counts["purity"] = 100 * counts.n_selected_clean / counts.n_selected
    means = counts.groupby(["method", "noise_rate"])[["n_selected_clean", "n_selected_noisy", "n_clean_total", "n_train",
                                                      "purity"]].mean()
    methods = [m for m in setting.methods if m in means.index.get_level_values("method")]
    title = f"Kept-clean set {LAST_EPOCH}, ConeSep Fig. 6 style (mean over seeds): {setting.describe()}"
    fig, axes = _grid(len(methods), 4, 3.6, 3.2, title)
    rates = setting.rates
    top = float((means[["n_selected_clean", "n_selected_noisy"]].sum(axis=1).max()))
    top = max(top, float(means.n_clean_total.max()))
    for ax, method in zip(axes, methods):
        rows = means.xs(method, level="method").reindex(rates)
        x = np.arange(len(rates))
        clean, noisy = rows.n_selected_clean.to_numpy(), rows.n_selected_noisy.to_numpy()
        ax.bar(x, clean, 0.6, color=CLEAN_COLOUR)
        ax.bar(x, noisy, 0.6, bottom=clean, color=NOISY_COLOUR)
        ax.bar(x, rows.n_clean_total.to_numpy(), 0.72, fill=False, edgecolor="0.35", linestyle=":", linewidth=1.2)
        # What a random subset of the same size would hold: kept x (clean share of the training set).
        chance = (clean + noisy) * rows.n_clean_total.to_numpy() / rows.n_train.to_numpy()
        ax.hlines(chance, x - 0.3, x + 0.3, colors="black", linestyles="--", linewidth=1.2)
        outline = rows.n_clean_total.to_numpy()
        for xi, c, n, total, purity in zip(x, clean, noisy, outline, rows.purity.to_numpy()):  # the tables' mean of each run's purity
            if np.isfinite(c) and c + n > 0:  # above the bar and its outline, so it crosses neither
                ax.text(xi, np.nanmax([c + n, total]) + top * 0.03, f"{format_percent(purity)}%", ha="center", va="bottom",
                        fontsize=TEXT_SIZE)
        ax.set_xticks(x, [rate_label(r) + setting.collapse_mark(method, r) + setting.below_chance_mark(method, r)
                          for r in rates])
        ax.set_ylim(0, top * 1.2)
        ax.set_title(_label(setting, method))
        ax.set_xlabel("noise rate")
        ax.set_ylabel("training samples kept as clean")
        ax.grid(axis="y", alpha=0.3)
    fig.legend(
        handles=[
            Patch(color=CLEAN_COLOUR, label="Real Positive (truly clean, kept)"),
            Patch(color=NOISY_COLOUR, label="Wrong Positive (truly noisy, kept)"),
            Patch(fill=False, edgecolor="0.35", linestyle=":", label="all truly clean samples"),
            Line2D([], [], color="black", linestyle="--", label="Real Positive of a random subset of that size"),
        ],
        loc="outside lower center", ncols=2, frameon=False,
    )
    return save_figure(fig, out, "purity_bars", "Kept-clean set (ConeSep Fig. 6)",
                 f"Stacked bars: the set each method kept as clean {LAST_EPOCH} (where its kept set is final), split into truly clean "
                 f"({CLEAN_NAME}) and truly noisy ({NOISY_NAME}) samples; the purity (clean share, the mean of each seed's) is printed on top and the dotted "
                 f"outline is the number of truly clean samples in the training set. The dashed tick is the {CLEAN_NAME} part a "
                 "random subset of the same size would have (purity 1 - noise rate): a method separates clean from noisy "
                 f"samples only where its {CLEAN_NAME} part rises above the tick. {COLLAPSE_MARK} after a rate: collapsed on a seed; "
                 f"{BELOW_CHANCE_MARK}: kept a set less clean than chance on a seed (see Kept sets below chance).")


def _by_type(setting: Setting) -> pd.DataFrame:
    last = final_epoch(setting.purity)
    return last[last.noise_type.isin(setting.noise_types) & (last.noise_rate > 0)]


def _grouped_bars(ax: Axes, frame: pd.DataFrame, value: str, methods: list[str], styles: dict, scale: float,
                  types: list[str]) -> None:
    stats = frame.groupby(["method", "noise_type"])[value].agg(["mean", "std"])
    width = min(0.28, 0.8 / max(1, len(methods)))
    x = np.arange(len(types))
    for i, method in enumerate(methods):
        rows = stats.xs(method, level="method").reindex(types) if method in stats.index.get_level_values(0) else None
        if rows is None or rows["mean"].isna().all():
            continue
        spread = None if rows["std"].isna().all() else rows["std"].fillna(0) * scale  # one seed: no error bar
        ax.bar(x + width * (i - (len(methods) - 1) / 2), rows["mean"] * scale, width, yerr=spread,
               color=styles[method]["color"], hatch="//" if styles[method]["linestyle"] == "--" else None,
               edgecolor="white", capsize=2, error_kw={"elinewidth": 0.8})
    ax.set_xticks(x, types)
    ax.set_xlabel("noise type")
    ax.grid(axis="y", alpha=0.3)


def _collapsed_at(setting: Setting, methods: list[str], rate: float) -> str:
    """A panel title's note of the ``methods`` that collapsed on a seed at ``rate``, e.g. ``(† a)``."""
    flagged = [m for m in methods if setting.collapse_mark(m, rate)]
    return f" ({COLLAPSE_MARK} {', '.join(flagged)})" if flagged else ""


@styled
def detection_by_type(setting: Setting, out: Path) -> FigureFile | None:
    """The hard-noise view: per noise rate the share of reference-, caption- and
    target-swapped samples each method caught (not kept), and the AUROC of each method's
    noise score against each noise type, bars side by side with +-1 std over seeds."""
    frame = _by_type(setting)
    if frame.empty:
        return None
    rates = sorted(frame.noise_rate.unique())
    caught = frame.dropna(subset=["noise_recall"])
    scored = frame.dropna(subset=["auroc"])
    rows = [(name, data) for name, data in (("caught", caught), ("auroc", scored)) if not data.empty]
    if not rows:
        return None
    styles = method_styles(setting)
    flagged = flagged_shares(setting)
    used = [m for m in setting.methods if m in set(caught.method) | set(scored.method)]
    title = f"Detection by noise type {LAST_EPOCH} (mean ± std over seeds): {setting.describe()}"
    ncols = len(rates)
    fig = Figure(figsize=(max(4.2 * ncols, 7.5), 3.3 * len(rows) + 1.1), dpi=DPI, layout="constrained")
    axes = fig.subplots(len(rows), ncols, squeeze=False)
    figure_title(fig, title, max(4.2 * ncols, 7.5))
    for r, (kind, data) in enumerate(rows):
        methods = [m for m in used if m in set(data.method)]
        for c, rate in enumerate(rates):
            ax = axes[r][c]
            at_rate = data[data.noise_rate == rate]
            if kind == "caught":
                _grouped_bars(ax, at_rate, "noise_recall", methods, styles, 100.0, setting.noise_types)
                for method, share in flagged.get(rate, {}).items():
                    if method not in styles:  # an ablation row: not drawn with the compared methods
                        continue
                    ax.axhline(100.0 * share, color=styles[method]["color"], linestyle="--", linewidth=1.1)
                ax.set_ylim(0, 105)
                ax.set_ylabel("noisy samples caught (%)")
                ax.set_title(f"caught (not kept as clean), noise {rate_label(rate)}{_collapsed_at(setting, methods, rate)}")
            else:
                _grouped_bars(ax, at_rate, "auroc", methods, styles, 1.0, setting.noise_types)
                ax.axhline(0.5, color="0.4", linestyle=":", linewidth=1)
                ax.set_ylim(0, 1.05)
                ax.set_ylabel("AUROC, clean vs this type")
                ax.set_title(f"noise-score AUROC, noise {rate_label(rate)}{_collapsed_at(setting, methods, rate)}")
    handles = [Patch(facecolor=styles[m]["color"], hatch="//" if m in setting.oracles else None, edgecolor="white",
                     label=_label(setting, m)) for m in used]
    if any(flagged.values()) and not caught.empty:
        handles.append(Line2D([], [], color="0.3", linestyle="--", label="its flag rate (what a random partition catches)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), frameon=False)
    return save_figure(fig, out, "detection_by_noise_type", "Detection by noise type",
                 f"Kept sets read {LAST_EPOCH} (where a kept set is final). Top: the share of each kind of noisy sample "
                 f"({setting.noise_type_wording()}) "
                 "that a partitioning method did not keep as clean; a low bar is noise the method misses. The dashed "
                 "line in a method's colour is the share of all training samples it flagged: a random partition with "
                 "that flag rate catches that share of every type, so only bars above the line are real detection. "
                 "Bottom: AUROC of the noise score, clean samples against that noise type (0.5 = chance).")


def _validation_per_epoch(setting: Setting) -> tuple[pd.DataFrame, str] | None:
    metrics = validation_metrics(setting)
    if metrics.empty:
        return None
    wide = wide_columns(metrics, ["run_id", "epoch"])
    column = headline_column(list(wide.columns))
    if column is None:
        return None
    frame = wide[[column]].reset_index().join(setting.runs.set_index("run_id")[["method", "noise_rate"]], on="run_id")
    return frame, column


@styled
def validation_curves(setting: Setting, out: Path) -> FigureFile | None:
    """Validation recall (the headline column) per epoch, a panel per noise rate and a line
    per method with a +-1 std band over seeds."""
    found = _validation_per_epoch(setting)
    if found is None:
        return None
    frame, column = found
    styles = method_styles(setting)
    rates = setting.rates
    fig, axes = _grid(len(rates), 4, 3.6, 2.9, f"Validation {column} per epoch (mean ± std over seeds): {setting.describe()}")
    used, ringed = [], False
    for ax, rate in zip(axes, rates):
        for method in setting.methods:
            cell = frame[(frame.method == method) & (frame.noise_rate == rate)]
            if cell.empty:
                continue
            stats = cell.groupby("epoch")[column].agg(["mean", "std"]).sort_index()
            x = stats.index.to_numpy() + 1
            ax.plot(x, stats["mean"], **styles[method])
            ax.fill_between(x, stats["mean"] - stats["std"].fillna(0), stats["mean"] + stats["std"].fillna(0),
                            color=styles[method]["color"], alpha=0.15, linewidth=0)
            ringed |= _ring_collapsed(ax, setting, method, [rate], x[-1:], stats["mean"].to_numpy()[-1:])
            if method not in used:
                used.append(method)
        ax.set_title(f"noise {rate_label(rate)}")
        ax.set_xlabel("epoch")
        ax.set_ylabel(textwrap.fill(f"validation {column} (%)", YLABEL_CHARS))  # no longer than its panel is tall
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    _method_legend(fig, setting, [m for m in setting.methods if m in used], styles, extra=[_collapse_handle()] if ringed else None)
    return save_figure(fig, out, "validation_curves", f"Validation {column} per epoch",
                 f"How retrieval ({ON_VALIDATION}) develops during training at each noise rate, after every epoch (the "
                 "tables read each run at its held-out-selected epoch); a red ring on the last epoch marks a "
                 "method that collapsed on a seed at that rate (see Collapsed cells).")


def _loss_curves(setting: Setting, method: str) -> pd.DataFrame:
    """Per-step losses of ``method``, averaged over seeds, with a fractional-epoch x."""
    losses = setting.losses[setting.losses.method == method].copy()
    if losses.empty:
        return losses
    position = losses.groupby(["run_id", "epoch"])["step"]
    low, high = position.transform("min"), position.transform("max")
    losses["x"] = losses.epoch + (losses.step - low + 1) / (high - low + 1)
    return losses.groupby(["noise_rate", "name", "epoch", "step"], as_index=False).agg(x=("x", "mean"), value=("value", "mean"))


@styled
def training_curves(setting: Setting, method: str, out: Path) -> FigureFile | None:
    """One method's training: a panel per logged component (``total`` first; per-step values,
    mean over seeds, smoothed over a fifth of an epoch) and its validation recall per epoch;
    a line per noise rate."""
    curves = _loss_curves(setting, method)
    if curves.empty:
        return None
    names = sorted(curves.name.unique(), key=lambda n: (n != "total", n))
    validation = _validation_per_epoch(setting)
    n_panels = len(names) + (validation is not None)
    rates = sorted(curves.noise_rate.unique())
    colours = colormaps["viridis"](np.linspace(0.0, 0.85, max(2, len(rates))))
    fig, axes = _grid(n_panels, 4, 3.4, 2.7, f"Training curves of {_label(setting, method)}: {setting.describe()}")
    for ax, name in zip(axes, names):
        for colour, rate in zip(colours, rates):
            series = curves[(curves.name == name) & (curves.noise_rate == rate)].sort_values(["epoch", "step"])
            steps_per_epoch = max(1, len(series) / max(1, series.epoch.nunique()))
            window = max(1, int(steps_per_epoch // 5))
            ax.plot(series.x, series.value.rolling(window, min_periods=1).mean(), color=colour)
        ax.set_xlim(0, float(curves.x.max()))  # components logged only in later epochs stay aligned
        ax.set_title("loss: total" if name == "total" else name)
        ax.set_xlabel("epoch")
        ax.set_ylabel("loss" if name == "total" else "logged value")
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.grid(alpha=0.3)
    if validation is not None:
        frame, column = validation
        ax = axes[-1]
        for colour, rate in zip(colours, rates):
            cell = frame[(frame.method == method) & (frame.noise_rate == rate)]
            stats = cell.groupby("epoch")[column].mean().sort_index()
            ax.plot(stats.index + 1, stats.to_numpy(), color=colour, marker="o")
        ax.set_title(f"validation {column}")
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"{column} (%)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=c, label=f"noise {rate_label(r)}{setting.collapse_mark(method, r)}") for c, r in zip(colours, rates)]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), frameon=False)
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in method)
    return save_figure(fig, out, f"training_{safe}", f"Training curves: {_label(setting, method)}",
                 "The total loss and each component the method logs, per step (mean over seeds, lightly smoothed; "
                 f"x in epochs), and the validation recall after every epoch, one line per noise rate ({COLLAPSE_MARK}: "
                 "collapsed on a seed at that rate).")


def all_figures(setting: Setting, out: Path, read: Setting | None = None) -> list[FigureFile]:
    """Every figure of a setting, in reading order, skipping those without data; ``read``:
    the setting at the epoch the claims read (:func:`~cirbench.report.analysis.loading.selection.rule_view`),
    which recall against noise draws (default: ``setting`` as given)."""
    figures = [
        recall_vs_noise(read if read is not None else setting, out), purity_bars(setting, out), detection_by_type(setting, out),
        score_distributions(setting, out), roc_curves(setting, out), validation_curves(setting, out),
    ]
    figures += [training_curves(setting, method, out) for method in setting.methods]
    return [f for f in figures if f is not None]
