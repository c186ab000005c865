"""What a report holds, independent of its format: per setting the leaderboard, the
at-a-glance lines, the papers' claims checked, the tables and the written figures; the failed
or missing cells; the provenance."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

import cirbench
from cirbench.report.analysis.verdicts.calibration import parity_lines, room_lines
from cirbench.report.analysis.verdicts.claims import (Claim, claims_metric, claims_selection, paper_claims, recall_judge,
                                                      setting_claims)
from cirbench.report.analysis.rankings.glance import at_a_glance
from cirbench.report.analysis.rankings.kept_worth import KeptWorth, kept_worth
from cirbench.report.analysis.rankings.traces import Trace, trace_claims
from cirbench.report.analysis.rankings.leaderboard import DEFAULT_BOARD, Leaderboard, build_leaderboard, first_screen
from cirbench.report.analysis.loading.load import ReportData, Setting
from cirbench.report.analysis.loading.machines import machine_lines
from cirbench.report.analysis.statistics.significance import DEFAULT_MARGIN
from cirbench.report.analysis.loading.selection import rule_view
from cirbench.report.analysis.rankings.tuned import TunedBoard, tuned_board
from cirbench.report.figures.figure_file import FigureFile
from cirbench.report.figures.forest import claims_forest
from cirbench.report.figures.gain_figure import gain_figure
from cirbench.report.figures.kept_figure import kept_figure
from cirbench.report.figures.setting_figures import all_figures
from cirbench.report.tables.claim_cells import claim_cells_tables
from cirbench.report.tables.comparison import ablation_table, gain_table, purity_table, recall_table
from cirbench.report.tables.kept_worth import decomposition_table, noise_type_table
from cirbench.report.tables.model import TableModel
from cirbench.report.tables.references import reference_table
from cirbench.report.tables.reproduction import reproduction_table
from cirbench.report.tables.selection import selection_table
from cirbench.report.tables.tuned import tuned_table
from cirbench.results.labels import TRIAL_LABEL
from cirbench.results.selection import DEFAULT_RULE


LEAD_FIGURES: tuple[str, ...] = ("recall_vs_noise", "purity_bars")
"""The figures a section shows first (by file name), after the gain over the baseline
(:func:`~cirbench.report.figures.gain_figure.gain_figure`)."""


@dataclass
class Section:
    """The part of a report about one setting (dataset, backbone, noise protocol)."""

    setting: Setting
    glance: list[str] = field(default_factory=list)
    tables: list[TableModel] = field(default_factory=list)
    figures: list[FigureFile] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    claims_metric: str | None = None
    claims_selection: str = ""
    room: list[str] = field(default_factory=list)
    """How much there is to win at each noise rate (the perfect filter's won-back share)."""
    claims_figure: FigureFile | None = None
    leaderboard: Leaderboard | None = None
    lead_figures: list[FigureFile] = field(default_factory=list)
    """The figures shown first, under the contents: the gain over the baseline, recall against noise, purity."""
    kept_worth: list[FigureFile | TableModel | str] = field(default_factory=list)
    """What a kept set is worth (:func:`kept_section`): the chart, the tables, or a line."""
    context: list[str] = field(default_factory=list)
    """The lines above the leaderboard: what the data are, the noise, the sizes, what blank cells mean."""
    tuned: TunedBoard | None = None
    """The tuned leaderboard beside the default one, where a sweep's picks ran on more seeds."""
    traces: list[Trace] = field(default_factory=list)
    """Each claim that does not hold, with its measured cause (:mod:`cirbench.report.analysis.rankings.traces`)."""


@dataclass
class ReportContent:
    """A whole report, ready to render as Markdown or HTML."""

    title: str
    subtitle: str
    sections: list[Section]
    problems: pd.DataFrame
    provenance: list[str]


def _repository(folder: Path) -> Path:
    """The git repository holding ``folder`` (the nearest folder above it with a ``.git``), else its parent."""
    for above in (folder, *folder.parents):
        if (above / ".git").exists():
            return above
    return folder.parent


def results_line(root: Path, output: Path) -> str:
    """Where the results were read from, never as a path of the machine that built the report:
    relative to the report's folder ``output`` when inside the repository holding it (else the
    folder above it), else the folder's name alone."""
    root, output = Path(root).resolve(), Path(output).resolve()
    if root.is_relative_to(_repository(output)):
        return f"Results: {Path(os.path.relpath(root, output)).as_posix()} (relative to this report's folder)"
    return f"Results: a folder named {root.name} (outside this report's repository: its name only)"


def _provenance(data: ReportData, output: Path) -> list[str]:
    runs = pd.concat([s.runs for s in data.settings], ignore_index=True) if data.settings else pd.DataFrame()
    lines = [
        results_line(data.root, output),
        f"Built: {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} by cirbench {cirbench.__version__}",
    ]
    if len(runs):
        for column, name in (("package_version", "cirbench versions of the runs"), ("git_commit", "git commits of the runs"),
                             ("torch_version", "torch versions"), ("device", "devices")):
            values = sorted({str(v) for v in runs[column].dropna() if str(v)})
            if values:
                lines.append(f"{name}: {', '.join(values)}")
        lines.extend(machine_lines(runs))  # the CPUs and kernels the runs were computed with (issue 77)
        lines.extend(_starts(runs))
        lines.extend(_holdout_shares(runs))
        versions = runs.groupby("method").method_version.agg(lambda v: ",".join(sorted(set(map(str, v)))))
        lines.append("method versions: " + ", ".join(f"{m} v{v}" for m, v in versions.items()))
    return lines


def _starts(runs: pd.DataFrame) -> list[str]:
    """A line per backbone naming the start(s) its runs were fine-tuned from
    (:meth:`~cirbench.backbones.base.Backbone.start_key`): two starts in one setting mean
    pooled numbers that should not be, and runs written before the key existed are counted."""
    lines = []
    for backbone, group in runs["start_key"].astype(str).groupby(runs["backbone"]):
        starts = sorted(set(group) - {""})
        unrecorded = int((group == "").sum())
        text = f"starts of {backbone}: {', '.join(starts) or 'not recorded'}"
        if unrecorded and starts:
            text += f" ({unrecorded} run(s) written before the start was recorded)"
        if len(starts) > 1:
            text = "WARNING: runs from different starts are pooled; " + text
        lines.append(text)
    return lines


def _holdout_shares(runs: pd.DataFrame) -> list[str]:
    """A line naming the held-out shares (``--holdout``) of the compared runs, sweep trials
    aside: the report keeps one run per cell whatever its share, so two shares in one folder
    mean methods compared on different training sets."""
    if "holdout" not in runs.columns:
        return []
    compared = runs[~runs.method.astype(str).str.fullmatch(TRIAL_LABEL.pattern)]
    counts = compared["holdout"].astype(float).fillna(0.0).round(6).value_counts().sort_index()
    if counts.empty:
        return []
    text = "held-out shares of the compared runs: " + ", ".join(f"{share:g} ({n} run(s))" for share, n in counts.items())
    if len(counts) > 1:
        text = "WARNING: runs trained with different held-out shares (different training sets) are compared; " + text
    return [text]


def kept_section(worth: KeptWorth | None, out: Path) -> list[FigureFile | TableModel | str]:
    """The report's parts on what a setting's kept sets are worth (``worth``, from
    :func:`kept_worth`), in reading order: the chart, the decomposition and the noise types,
    each where its cells exist, with the one line saying what is not measured (empty for a
    setting without a noisy rate)."""
    if worth is None:
        return []
    found = [part for part in (kept_figure(worth, out), decomposition_table(worth), noise_type_table(worth)) if part]
    return ([worth.none] if worth.none else []) + found


def assemble(data: ReportData, output: Path, published: pd.DataFrame | None = None) -> ReportContent:
    """Compute the tables and write the figures of every setting under ``output/<setting>/``;
    ``published``: the papers' numbers to set beside FashionIQ and CIRR runs (default: shipped)."""
    sections = []
    for setting in data.settings:
        read = rule_view(setting, DEFAULT_RULE).setting  # recall at the epoch the claims read; kept sets at the last
        candidates = (recall_table(read), ablation_table(read, recall_judge(read, margin=DEFAULT_MARGIN)), reference_table(read), gain_table(read),
                      purity_table(setting), selection_table(setting), tuned_table(setting),
                      reproduction_table(read, published))
        tables = [t for t in candidates if t is not None]
        claims, metric, board = paper_claims(setting), claims_metric(setting), build_leaderboard(setting)
        worth = kept_worth(setting)  # read by the kept-set section and the traces alike
        gain = [f for f in [gain_figure(setting, output / setting.slug, board=board)] if f is not None]
        figures = all_figures(setting, output / setting.slug, read)
        lead = gain + [f for f in figures if f.path.stem in LEAD_FIGURES]
        sections.append(Section(setting, at_a_glance(read, board), tables, [f for f in figures if f not in lead], claims, metric,
                                claims_selection(setting), room_lines(read) + parity_lines(read),
                                claims_forest(claims, output / setting.slug, metric), board, lead,
                                kept_section(worth, output / setting.slug), first_screen(setting, board)))
        sections[-1].tuned = tuned_board(setting, board)  # docs/selection.md#the-tuned-leaderboard
        sections[-1].tables += claim_cells_tables(read)
        sections[-1].traces = trace_claims(setting, claims, setting_claims(read),
                                             splits=worth.splits if worth else [])
        if sections[-1].tuned is not None and board is not None:
            board.name = DEFAULT_BOARD
    n_runs = sum(len(s.runs) for s in data.settings)
    n_kept = sum(len(s.kept_sets.runs) for s in data.settings if s.kept_sets is not None)
    kept = f" and {n_kept} kept-set cell(s)" if n_kept else ""
    subtitle = (
        f"{n_runs} completed cell(s){kept} in {len(data.settings)} setting(s); "
        f"{len(data.problems)} failed or missing cell(s) listed at the end."
    )
    return ReportContent("cirbench report", subtitle, sections, data.problems, _provenance(data, output))
