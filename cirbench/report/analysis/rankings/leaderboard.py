"""The report's leaderboard, the first thing it shows: per setting, methods (rows) x noise
rates (columns), the claims' metric and R@10 side by side (mean ± std over seeds, percent) at
the epoch the claims read (:func:`~cirbench.report.analysis.loading.selection.rule_view` under the claims'
rule).

Each cell carries its paired comparison with the baseline (the method whose role is
``baseline``) at that rate and the column's leaders,
both judged by the claims' own rule (:func:`~cirbench.report.analysis.verdicts.claims.recall_judge`): the best
of a column is bold only where it beats every other ranked method; otherwise it and the
methods it does not beat are tied for the lead. Only hosted and plugin methods are ranked;
the perfect filter, the bound (the baseline at 0%) and the reference rows are lines of their
own, never ranked. A number below ``zero_shot``'s (the claims' metric or R@10) is marked: a
fine-tune that ends below where it began. :func:`first_screen` writes the lines above it: what
the data are, the noise protocol, the sizes and what its blank cells mean.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import pandas as pd

from cirbench.data.noise.injection import NOISE_PROTOCOLS
from cirbench.data.datasets.registry import DATASETS, ShapesLoader
from cirbench.report.analysis.statistics.bootstrap import N_RESAMPLES
from cirbench.report.analysis.verdicts.claims import Check, recall_judge
from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.loading.numbers import CLAIMS_EPOCH, headline_column, rate_label, run_columns, summarize
from cirbench.report.analysis.rankings.references import bound_label, reference_stats
from cirbench.report.analysis.loading.selection import RuleView, rule_view
from cirbench.report.analysis.statistics.significance import (
    DEFAULT_MARGIN, DOES_NOT_HOLD, EQUIVALENT, HOLDS, UNDECIDED, Term, difference,
)
from cirbench.results.labels import TEXT_BLIND_ROW, TEXT_ONLY_ROW, ZERO_SHOT_ROW
from cirbench.results.metrics import FASHIONIQ_AVERAGE, RECALL, metric_label
from cirbench.results.roles import BASELINE
from cirbench.results.selection import DEFAULT_RULE

RECALL_COLUMNS: tuple[str, ...] = (FASHIONIQ_AVERAGE.part_column(RECALL), metric_label(RECALL))
"""The R@10 shown beside the claims' metric: FashionIQ's category average, else the ``all`` group's."""
BETTER, WORSE, UNSEPARATED = "better", "worse", UNDECIDED
LEGACY_WORDS: dict[str, str] = {"inconclusive": UNSEPARATED}
"""Answers as files written before issue 70 word them (a ``leaderboard.csv``): read as today's."""


@dataclass(frozen=True)
class Answer:
    """How the report says one answer of the claims' rule to "is it better than the baseline?":
    its word, its mark (Unicode, LaTeX) and its colour (a claims table's verdict, the forest plot)."""

    word: str
    mark: str
    tex: str
    colour: str


ANSWERS: dict[str, Answer] = {
    BETTER: Answer("better", "▲", r"$\uparrow$", "#117733"),
    WORSE: Answer("worse", "▼", r"$\downarrow$", "#882255"),
    EQUIVALENT: Answer("equivalent", "=", r"$=$", "#999933"),
    UNSEPARATED: Answer("undecided", "○", r"$\circ$", "#8C8C8C"),
}
"""The one place the report's answers are worded, marked and coloured, in the order the legend,
the one-line answers and the figures list them: every table, figure and line reads it (a new
answer or a renamed one is one edit here). Colours: Paul Tol's green and wine and a grey, none an
Okabe-Ito method colour (:mod:`cirbench.report.figures.palette`); equivalent in Tol's olive."""
VERSUS: dict[str, str] = {HOLDS: BETTER, DOES_NOT_HOLD: WORSE, UNDECIDED: UNSEPARATED}
"""The claims' verdict of ``method - baseline > 0`` (and a claim's own verdict) as the answer it is."""
MARKS: dict[str, str] = {key: answer.mark for key, answer in ANSWERS.items()}
"""How the report marks each answer: the leaderboard, the one-line answers, the gain figure and the kept-set tables."""

RANKED, PERFECT_FILTER, BOUND_ROW, REFERENCE_ROW = "ranked", "perfect filter", "bound", "reference"
BEST, TIED = "best", "tied"
DEFAULT_BOARD, TUNED_BOARD = "defaults", "tuned"
"""The names of a setting's two leaderboards (:attr:`Leaderboard.name`) where it has both."""
Judge = Callable[[str, Sequence[Term]], Check]
"""The claims' comparison of ``terms > 0`` (:func:`~cirbench.report.analysis.verdicts.claims.recall_judge`)."""


def answers_words(margin: float = DEFAULT_MARGIN) -> str:
    """Every answer's mark and word for a legend, equivalent with its margin in points:
    ``▲ better, ▼ worse, = equivalent (both inside ±1 point), ○ undecided``."""
    return ", ".join(f"{answer.mark} {answer.word}" + (f" (both inside ±{100 * margin:g} point)" if key == EQUIVALENT else "")
                     for key, answer in ANSWERS.items())


@dataclass(frozen=True)
class Stat:
    """Mean, std (ddof 1) and number of seeds of one column of one cell, percent."""

    mean: float
    std: float
    n: int


@dataclass
class LeaderCell:
    """One cell: the claims' metric and R@10, and what the claims' rule says of it."""

    metric: Stat
    recall: Stat
    versus: str = ""
    """:data:`BETTER`, :data:`WORSE`, :data:`EQUIVALENT` (within :data:`DEFAULT_MARGIN`) or :data:`UNSEPARATED` than the
    baseline at the rate (empty: the baseline itself, or none)."""
    lead: str = ""
    """:data:`BEST` (ahead of every other ranked method), :data:`TIED` (a leader not separated) or empty."""
    below_start: bool = False
    """Its R@10 is below ``zero_shot``'s."""
    metric_below_start: bool = False
    """Its claims' metric is below ``zero_shot``'s."""
    collapsed: bool = False


@dataclass
class LeaderRow:
    """One line: a ranked method, the perfect filter (cells per rate), or the bound or a
    reference row (one ``span`` cell, the same at every rate)."""

    kind: str
    method: str
    label: str
    cells: dict[float, LeaderCell] = field(default_factory=dict)
    span: LeaderCell | None = None


@dataclass
class Leaderboard:
    """A setting's leaderboard: its columns, rows and how its numbers were read."""

    metric: str
    recall: str
    rates: list[float]
    rows: list[LeaderRow]
    rule: str
    epochs: str
    """Which epoch each run is read at, in words."""
    seeds: list[int]
    start: float
    """``zero_shot``'s R@10 (NaN without that row)."""
    baseline: str
    """The method each cell is compared with: the setting's baseline, by role."""
    metric_start: float = math.nan
    """``zero_shot``'s claims' metric (NaN without that row)."""
    queries: str = ""
    """How many validation queries the recall is measured on, as text (empty when not stored)."""
    name: str = ""
    """Which leaderboard it is where a setting has two: ``defaults`` (every method at its
    defaults) or ``tuned`` (each at its picked trial, :mod:`cirbench.report.analysis.rankings.tuned`);
    empty where the setting has one. The answers' intro names it (the first screen says which
    leaderboard a line reads)."""

    @property
    def ranked(self) -> list[LeaderRow]:
        """The rows ranked against each other."""
        return [r for r in self.rows if r.kind == RANKED]

    @property
    def unranked(self) -> list[LeaderRow]:
        """The perfect filter, the bound and the reference rows, in that order."""
        return [r for r in self.rows if r.kind != RANKED]


def _stat(stats: pd.DataFrame, key: object, column: str | None) -> Stat:
    if column is None or key not in stats.index or ("mean", column) not in stats.columns:
        return Stat(math.nan, math.nan, 0)
    n = stats.loc[key, ("n", column)]
    return Stat(float(stats.loc[key, ("mean", column)]), float(stats.loc[key, ("std", column)]), int(n) if pd.notna(n) else 0)


def epochs_text(view: RuleView) -> str:
    """The epoch the leaderboard (and the claims) read each run at, in words: :data:`CLAIMS_EPOCH`
    under the default rule, with the runs read at their last epoch for want of a held-out split."""
    if view.rule == DEFAULT_RULE:
        return CLAIMS_EPOCH + (f" ({view.fallback} of {len(view.epochs)} runs, without a held-out split, at their last "
                               "epoch)" if view.fallback else "")
    return f"at the epoch the `{view.rule}` rule selects"


def _mark_leaders(rows: list[LeaderRow], rates: list[float], judge: Judge) -> None:
    """Mark each column's leader :data:`BEST` where the claims' rule puts it ahead of every
    other ranked method, else it and those it is not ahead of :data:`TIED`."""
    for rate in rates:
        contenders = [(row.method, row.cells[rate]) for row in rows
                      if row.kind == RANKED and rate in row.cells and math.isfinite(row.cells[rate].metric.mean)]
        if len(contenders) < 2:
            continue
        top, top_cell = max(contenders, key=lambda pair: pair[1].metric.mean)
        tied = [cell for method, cell in contenders if method != top
                and judge(f"{top} vs {method}, {rate_label(rate)}", difference(top, method, rate)).verdict != HOLDS]
        top_cell.lead = TIED if tied else BEST
        for cell in tied:
            cell.lead = TIED


def _cells(setting: Setting, stats: pd.DataFrame, method: str, columns: tuple[str, str | None], start: tuple[float, float],
           judge: Judge) -> dict[float, LeaderCell]:
    cells, baseline = {}, setting.role(BASELINE)
    for rate in setting.rates:
        metric = _stat(stats, (rate, method), columns[0])
        if not math.isfinite(metric.mean):
            continue
        cell = LeaderCell(metric, _stat(stats, (rate, method), columns[1]), collapsed=bool(setting.collapse_mark(method, rate)))
        cell.metric_below_start, cell.below_start = cell.metric.mean < start[0], cell.recall.mean < start[1]
        if method != baseline and (rate, baseline) in stats.index:
            check = judge(f"{method} vs {baseline}, {rate_label(rate)}", difference(method, baseline, rate))
            cell.versus = check.answer or VERSUS.get(check.verdict, "")  # the four answers; a check without a difference by its verdict
        cells[rate] = cell
    return cells


def build_leaderboard(setting: Setting, n_resamples: int = N_RESAMPLES, seed: int = 0,
                      rule: str = DEFAULT_RULE) -> Leaderboard | None:
    """The leaderboard of ``setting`` read as the claims read it (``rule``, the bootstrap's
    ``n_resamples`` and ``seed``); None without validation recall."""
    view = rule_view(setting, rule)
    per_run = run_columns(view.setting)
    metric = headline_column(list(per_run.columns))
    if metric is None:
        return None
    recall = next((c for c in RECALL_COLUMNS if c in per_run.columns), None)
    stats = summarize(view.setting, per_run[list(dict.fromkeys(c for c in (metric, recall) if c))])
    references = reference_stats(view.setting)
    start = _stat(references, ZERO_SHOT_ROW, metric).mean, _stat(references, ZERO_SHOT_ROW, recall).mean
    judge = recall_judge(view.setting, n_resamples, seed, margin=DEFAULT_MARGIN)
    rows = [LeaderRow(PERFECT_FILTER if m in setting.oracles else RANKED, m, setting.label(m),
                      _cells(setting, stats, m, (metric, recall), start, judge)) for m in setting.methods]
    _mark_leaders(rows, setting.rates, judge)
    rows = [r for r in rows if r.kind == RANKED] + [r for r in rows if r.kind != RANKED]
    bound, baseline = bound_label(setting), setting.role(BASELINE)
    for name in sorted(references.index, key=lambda n: n != bound):
        span = LeaderCell(_stat(references, name, metric), _stat(references, name, recall))
        if name == bound:
            span.metric_below_start, span.below_start = span.metric.mean < start[0], span.recall.mean < start[1]
        rows.append(LeaderRow(BOUND_ROW if name == bound else REFERENCE_ROW, baseline if name == bound else str(name),
                              str(name), span=span))
    seeds = sorted({int(s) for s in setting.runs.seed})
    return Leaderboard(metric, recall or "", setting.rates, rows, rule, epochs_text(view), seeds, start[1], baseline,
                       start[0], validation_queries(setting))


REFERENCE_TERMS: dict[str, str] = {
    ZERO_SHOT_ROW: "the start before fine-tuning",
    TEXT_BLIND_ROW: "the reference image alone",
    TEXT_ONLY_ROW: "the modification text alone: it can pick the target among a query's few similar images "
                   "(R_sub) but hardly among all of them",
}
"""What each reference row is (not fine-tuned, never ranked)."""
RECALL_TERMS: tuple[tuple[str, str], ...] = (
    (r"R_sub@(\d+)", "the target in the top {k} of the query's few similar images (CIRR's subset recall)"),
    (r"R@(\d+)", "the target in the top {k} of all images"),
)


def recall_terms(column: str) -> dict[str, str]:
    """Each recall a column name holds (``Avg(R@5, R_sub@1)`` holds two), defined."""
    found = []
    for pattern, words in RECALL_TERMS:
        found += [(match.start(), match[0], words.format(k=match[1])) for match in re.finditer(rf"(?<![\w_]){pattern}", column)]
    return {name: words for _, name, words in sorted(found)}


def terms(board: Leaderboard) -> dict[str, str]:
    """Every name the first screen uses, each defined in a few words: the columns and the
    recalls they hold, the baseline, the perfect filter, the bound and the reference rows
    (the Terms line, and the HTML's hover text on the column and row names)."""
    found = {board.metric: "the headline, the claims' metric" + (": the mean of " + " and ".join(recall_terms(board.metric))
                                                                if len(recall_terms(board.metric)) > 1 else "")}
    found.update(recall_terms(board.metric))
    if board.recall and board.recall != board.metric:
        found.update(recall_terms(board.recall))
    found[board.baseline] = "the baseline, trained on every triplet as given; every mark compares with it"
    for row in board.rows:
        if row.kind == PERFECT_FILTER:
            found[row.label] = f"the perfect filter: `{board.baseline}` trained on the truly clean triplets only; not ranked"
        elif row.kind == BOUND_ROW:
            found[row.label] = f"the bound: `{board.baseline}` without noise"
        elif row.kind == REFERENCE_ROW:
            found[row.label] = REFERENCE_TERMS.get(row.label, "a reference row") + "; not fine-tuned"
    return found


def terms_line(board: Leaderboard) -> str:
    """The first screen's line of definitions (Markdown), from :func:`terms`."""
    return "**Terms**: " + "; ".join(f"`{name}`: {words}" for name, words in terms(board).items()) + "."


def validation_queries(setting: Setting) -> str:
    """The number of validation queries each run's recall is measured on, from the stored
    per-query ranks (``1,600`` or ``1,600 or 3,200`` where runs differ; empty without ranks)."""
    ranks = setting.ranks
    if ranks.empty:
        return ""
    counts = sorted({int(n) for n in ranks.groupby("run_id")["query"].nunique()})
    return " or ".join(f"{n:,}" for n in counts)


def _count(values: pd.Series) -> str:
    found = sorted({int(v) for v in values.dropna()})
    return " or ".join(f"{v:,}" for v in found) or "?"


def first_screen(setting: Setting, board: Leaderboard | None) -> list[str]:
    """The two or three lines above a setting's leaderboard (Markdown): what the data are and
    whether the papers' numbers compare, the noise protocol, the training and validation sizes,
    and what a blank cell means."""
    lines = []
    if is_synthetic(setting.dataset):
        lines.append(f"**Synthetic data**: `{setting.dataset}` is generated coloured-shape scenes and `{setting.backbone}` "
                     "a small model, so these numbers test the methods' mechanics and are not comparable to the papers' "
                     "FashionIQ and CIRR numbers (the real path: `docs/real-datasets.md`).")
    runs = setting.runs
    noise = NOISE_PROTOCOLS.get(setting.noise_protocol) if setting.noise_protocol in NOISE_PROTOCOLS else None
    described = getattr(noise, "noise_types", {})
    kinds = ", ".join(described.get(t, t) for t in described) or setting.noise_type_wording() or setting.noise_protocol
    protocol = (f"**Noise**: `{setting.noise_protocol}`: at a noise rate r, a share r of the training triplets is "
                f"corrupted, in equal parts {kinds}" if setting.noise_protocol == "thirds" else
                f"**Noise**: `{setting.noise_protocol}`: " + (getattr(noise, "description", "") or kinds))
    held = runs.n_holdout.fillna(0).gt(0) if "n_holdout" in runs.columns else pd.Series(False, index=runs.index)
    sizes = f"{_count(runs.n_train)} training triplets"
    if held.any():
        sizes += f" (and {_count(runs.loc[held, 'n_holdout'])} held out, noisy like them, that only pick the epoch)"
    queries = board.queries if board is not None else validation_queries(setting)
    sizes += f"; recall on {queries} validation queries" if queries else "; recall on the validation queries"
    lines.append(f"{protocol}. **Sizes**: {sizes}.")
    if board is not None:
        blank = _blank_cells(setting, board)
        if blank:
            lines.append("**Blank cells**: " + "; ".join(blank) + ".")
    return lines


def _blank_cells(setting: Setting, board: Leaderboard) -> list[str]:
    """What each kind of blank cell of ``board`` means: the perfect filter at 0% (it would be
    the baseline's cell), a cell that failed (or was interrupted or damaged), one never run."""
    problems = setting.problems
    failed = ({(str(p.method), float(p.noise_rate)) for p in problems.itertuples() if p.status != "missing"}
              if len(problems) else set())
    notes, missing, broken = [], [], []
    for row in board.ranked + [r for r in board.unranked if r.kind == PERFECT_FILTER]:
        for rate in board.rates:
            if rate in row.cells:
                continue
            if row.kind == PERFECT_FILTER and rate == 0:
                notes.append(f"the perfect filter at 0% is not run: with no noise to remove it is `{board.baseline}`'s "
                             "cell (the bound row)")
            else:
                (broken if (row.method, rate) in failed else missing).append((row.method, rate))
    if missing:
        notes.append(f"not run: {_grouped(missing)}")
    if broken:
        notes.append(f"no completed run (listed under Failed and missing cells): {_grouped(broken)}")
    return list(dict.fromkeys(notes))


def _grouped(cells: list[tuple[str, float]]) -> str:
    """Cells as few words: ``a, b at 50%, 80%; c at 80%`` (methods sharing their rates together)."""
    rates: dict[str, list[float]] = {}
    for method, rate in cells:
        rates.setdefault(method, []).append(rate)
    groups: dict[tuple[float, ...], list[str]] = {}
    for method, found in rates.items():
        groups.setdefault(tuple(found), []).append(method)
    return "; ".join(f"{', '.join(methods)} at {', '.join(map(rate_label, key))}" for key, methods in groups.items())


def is_synthetic(dataset: str) -> bool:
    """Whether ``dataset`` (a results label such as ``shapes`` or ``shapes-s10000``) is the
    embedded synthetic benchmark, generated rather than read from a paper's files."""
    base = re.sub(r"-s\d+$", "", dataset)
    loader = DATASETS.get(base) if base in DATASETS else None
    return isinstance(loader, ShapesLoader) or (isinstance(loader, type) and issubclass(loader, ShapesLoader))
