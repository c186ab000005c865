"""What a kept set is worth, in the report: a setting's kept-set cells (docs/kept-sets.md:
the purity frontier, the noise types one at a time, each method's filter replayed) read beside
its methods, on the claims' epoch rule and in percentage points.

Every run is read at the epoch the claims read (:func:`~cirbench.report.analysis.loading.selection.rule_view`
under :data:`~cirbench.results.selection.DEFAULT_RULE`): its headline and R@10 there, and the
purity of its kept set in that same epoch (an epoch in which a run recorded no kept set, a
warm-up, trained on every row: its purity there is the training set's clean share, and it
caught nothing). Three things come out of it:

- the points of the purity-recall chart (:mod:`cirbench.report.figures.kept_figure`): the frontier
  (the baseline at the clean share, the frontier cells, the perfect filter at purity 1), each
  partitioning method at (its purity, its score) and its replay at (the source's purity, the
  replay's score);
- the decomposition, by the claims' paired rule (:func:`~cirbench.report.analysis.verdicts.claims.recall_judge`):
  method - baseline = its filter (replay - baseline) + its other terms (method - replay), the
  three read on the same seeds, and what is left on the table (perfect filter - replay);
- the noise types: each type's cell against the perfect filter's, beside the share of that
  type each method caught.

The decomposition and the noise types are tabulated by :mod:`cirbench.report.tables.kept_worth`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from cirbench.data.noise.injection import NOISE_PROTOCOLS
from cirbench.report.analysis.statistics.bootstrap import N_RESAMPLES
from cirbench.report.analysis.verdicts.claims import Check, recall_judge
from cirbench.report.analysis.rankings.leaderboard import RECALL_COLUMNS, Judge
from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.loading.numbers import headline_column, rate_label, run_columns
from cirbench.report.analysis.loading.selection import rule_view
from cirbench.report.analysis.statistics.significance import DEFAULT_MARGIN, Term
from cirbench.results.labels import FRONTIER, NOISE_TYPE, REPLAY
from cirbench.results.replays import stale_replays
from cirbench.results.roles import BASELINE, PERFECT_FILTER
from cirbench.results.selection import DEFAULT_RULE

WORTH_TITLE = "What a kept set is worth"
NONE_LINE = ("No frontier or replay cells in these results, so what a kept set is worth is not measured here: "
             "`cirbench run --frontier --replay METHODS` makes them (docs/kept-sets.md).")
STALE_LINE = ("No frontier cell and no replay true to its source in these results, so what a kept set is worth is not "
              "measured here.")
BASELINE_POINT, PERFECT_POINT, METHOD_POINT = "baseline", "perfect filter", "method"
POINT_KINDS: tuple[str, ...] = (BASELINE_POINT, FRONTIER, PERFECT_POINT, METHOD_POINT, REPLAY, NOISE_TYPE)
"""What a point of the chart is: the frontier's (the baseline, a frontier cell, the perfect
filter), a method's own, its replay's, or a noise type's cell."""


@dataclass(frozen=True)
class Split:
    """One row of the decomposition: a method at a noise rate against the baseline, split into
    its filter and its other terms (fractions in each :class:`Check`'s comparison)."""

    rate: float
    method: str
    purity: float
    """Its kept set's purity (percent) at the epoch the claims read, mean over seeds."""
    total: Check
    filter: Check
    other: Check
    left: Check | None
    """The perfect filter - the replay (None without a perfect filter at the rate)."""


@dataclass(frozen=True)
class TypeCost:
    """One noise type's cell at a rate against the perfect filter's, and what each method caught of that type."""

    rate: float
    noise_type: str
    label: str
    """The cell in words, e.g. ``clean + caption swapped``."""
    headline: tuple[float, float, int]
    """The type cell's headline (percent): mean, std over seeds, seeds."""
    cost: Check | None
    caught: dict[str, float] = field(default_factory=dict)
    """Method -> share (percent) of this type's noisy triplets it did not keep, mean over seeds."""
    seeds: tuple[int, ...] = ()
    """The seeds its cell is read on."""


@dataclass
class KeptWorth:
    """What the kept sets of one setting are worth, or the one line saying it is not measured."""

    setting: Setting
    """The setting with its kept-set cells among its runs, read under the claims' rule."""
    metric: str | None
    recall: str | None
    points: pd.DataFrame
    """Per run (index ``run_id``): ``noise_rate``, ``seed``, ``kind`` (:data:`POINT_KINDS`),
    ``label``, ``method`` (a replay's: its source's method), ``purity`` and the two metrics (percent)."""
    baseline: str
    perfect: str
    splits: list[Split] = field(default_factory=list)
    costs: list[TypeCost] = field(default_factory=list)
    none: str = ""
    stale: int = 0
    """Replays whose source is not the run the report reads for that cell (rerun since)."""
    left_out: list[str] = field(default_factory=list)
    """One line per stale replay (its source now records other decisions), left out of the
    chart and the decomposition, naming the command that redoes it."""

    @property
    def drawn(self) -> bool:
        """Whether there is a frontier or a replay to draw."""
        return bool(len(self.points)) and self.points.kind.isin([FRONTIER, REPLAY]).any()


def with_kept_sets(setting: Setting) -> Setting:
    """``setting`` with its kept-set cells among its runs and tables (the claims' machinery
    then reads them like any method's cells; never done for the claims themselves)."""
    kept = setting.kept_sets
    if kept is None:
        return setting
    names = ("runs", "metrics", "purity", "scores", "losses", "ranks", "epoch_ranks", "extra_purity", "extra_scores")
    tables = {name: pd.concat([getattr(setting, name), getattr(kept, name)], ignore_index=True) for name in names}
    return replace(setting, kept_sets=None, **tables)


def clean_shares(purity: pd.DataFrame) -> pd.Series:
    """The training set's clean share per run (index ``run_id``), from its ``purity`` rows:
    1 - the noise types' samples over all samples (the first epoch's rows)."""
    if purity.empty:
        return pd.Series(dtype=float)
    rows = purity[purity.epoch == purity.groupby("run_id").epoch.transform("min")]
    total = rows[rows.noise_type == "all"].groupby("run_id").n_samples.first().astype(float)
    noisy = rows[~rows.noise_type.isin(["all", "clean"])].groupby("run_id").n_samples.sum().astype(float)
    return 1.0 - noisy.reindex(total.index).fillna(0.0) / total


def purity_at(purity: pd.DataFrame, epochs: pd.Series) -> pd.DataFrame:
    """Per run (index ``run_id``) at its epoch in ``epochs``: the kept set's ``purity`` and the
    share of each noise type caught (columns named by type), in percent. A run with purity rows
    but no kept set in that epoch (a warm-up) trained on every row: its clean share, nothing caught."""
    if purity.empty:
        return pd.DataFrame()
    rows = purity[purity.epoch == purity.run_id.map(epochs)]
    overall = rows[rows.noise_type == "all"].set_index("run_id")
    every_row = pd.to_numeric(overall.n_selected, errors="coerce").isna()
    out = pd.DataFrame(index=overall.index)
    out["purity"] = overall.purity.astype(float).where(~every_row, clean_shares(purity).reindex(overall.index)) * 100
    caught = rows[~rows.noise_type.isin(["all", "clean"])].pivot_table(
        index="run_id", columns="noise_type", values="noise_recall", aggfunc="mean", dropna=False)
    for kind in caught.columns:
        out[str(kind)] = caught[kind].reindex(out.index).astype(float).where(~every_row, 0.0) * 100
    return out


def _kinds(runs: pd.DataFrame, baseline: str, perfect: str, partitioning: set[str]) -> pd.Series:
    """Each run's :data:`POINT_KINDS` entry (empty for a run the chart does not draw)."""
    kept = runs.kept_set.fillna("").astype(str) if "kept_set" in runs.columns else pd.Series("", index=runs.index)
    kinds = kept.copy()
    kinds[runs.method.eq(baseline) & kept.eq("")] = BASELINE_POINT
    kinds[runs.method.eq(perfect) & kept.eq("")] = PERFECT_POINT
    kinds[runs.method.isin(partitioning) & kept.eq("")] = METHOD_POINT
    return kinds


def _left_out(setting: Setting, runs: pd.DataFrame) -> dict[str, str]:
    """The stale replays among ``runs`` (:func:`cirbench.results.replays.stale_replay`), each
    with its one-line note: the report does not price a kept set its source no longer holds."""
    replays = runs.index[runs.kind == REPLAY] if len(runs) else []
    stale = stale_replays(setting.root, list(replays)) if setting.root is not None else {}
    return {run_id: f"`{runs.at[run_id, 'method']}` at {rate_label(float(runs.at[run_id, 'noise_rate']))}, seed "
                    f"{int(runs.at[run_id, 'seed'])} left out: {reason}; `cirbench run` of its grid with `--replay "
                    f"{str(runs.at[run_id, 'method']).split(':', 1)[1]} --output {setting.root.name}` (this report's "
                    "results folder) redoes it."
            for run_id, reason in stale.items()}


def chart_points(setting: Setting, epochs: pd.Series, baseline: str, perfect: str) -> tuple[pd.DataFrame, int]:
    """The chart's points of ``setting`` (kept-set cells among its runs, metrics at ``epochs``;
    a stale replay left out: :func:`_left_out`, in ``points.attrs["left_out"]``) and the number
    of replays whose source is not the run read for its cell."""
    per_run = run_columns(setting)
    metric = headline_column(list(per_run.columns))
    recall = next((c for c in RECALL_COLUMNS if c in per_run.columns), metric)
    runs = setting.runs[setting.runs.noise_rate.astype(float) > 0].copy()
    own = setting.runs.kept_set.fillna("").eq("") if "kept_set" in setting.runs.columns else setting.runs.method.notna()
    partitioning = set(setting.runs.loc[own & setting.runs.partitions.eq(True), "method"]) - {perfect}
    partitioning -= {m for m in partitioning if ":" in m}  # ablation variants and sweep trials are never replayed
    runs["kind"] = _kinds(runs, baseline, perfect, partitioning)
    runs = runs[runs.kind != ""].set_index("run_id")
    left_out = _left_out(setting, runs)
    runs = runs.drop(index=list(left_out))
    purity = purity_at(setting.purity, epochs)
    points = pd.DataFrame({"noise_rate": runs.noise_rate.astype(float), "seed": runs.seed.astype(int), "kind": runs.kind,
                           "label": runs.method, "method": runs.method})
    points["purity"] = purity.purity.reindex(points.index) if "purity" in purity.columns else np.nan
    # the baseline keeps every row: its purity is the clean share of the cells of the same rate and seed
    shares = points.join(clean_shares(setting.purity).rename("share")).groupby(["noise_rate", "seed"]).share.first()
    at_share = points.kind.eq(BASELINE_POINT) & points.purity.isna()
    points.loc[at_share, "purity"] = [shares.get((r, s), np.nan) * 100 for r, s in
                                      zip(points.noise_rate[at_share], points.seed[at_share])]
    points.loc[points.kind.eq(PERFECT_POINT) & points.purity.isna(), "purity"] = 100.0  # keeps exactly the clean rows
    stale = 0
    replays = points.index[points.kind == REPLAY]
    cells = points[points.kind == METHOD_POINT].reset_index().set_index(["method", "noise_rate", "seed"]).run_id
    for run_id in replays:  # at the purity of the source's cell as the report reads it
        source = str(runs.at[run_id, "kept_set_source"])
        name = str(runs.at[run_id, "method"]).split(":", 1)[1]
        read = cells.get((name, points.at[run_id, "noise_rate"], points.at[run_id, "seed"]))
        stale += int(read is not None and read != source)
        points.at[run_id, "method"] = name
        points.at[run_id, "purity"] = points.purity.get(read, np.nan) if read is not None else np.nan
    points["metric"], points["recall"] = per_run[metric].reindex(points.index), per_run[recall].reindex(points.index)
    points = on_kept_seeds(points)
    points.attrs["left_out"] = list(left_out.values())
    return points, stale


def on_kept_seeds(points: pd.DataFrame) -> pd.DataFrame:
    """``points`` at each noise rate with kept-set cells read on those cells' seeds only: the
    methods, the baseline and the perfect filter may have run more seeds (the headline grid) than
    the frontier and the replays, and a mean over other seeds would move a point against its replay."""
    kept = points[points.kind.isin([FRONTIER, REPLAY, NOISE_TYPE])]
    seeds = kept.groupby("noise_rate").seed.agg(set)
    keep = [rate not in seeds.index or seed in seeds[rate] for rate, seed in zip(points.noise_rate, points.seed)]
    return points[np.array(keep, dtype=bool)]


def _splits(worth: KeptWorth, judge: Judge) -> list[Split]:
    """The decomposition of every method with a replay, per noise rate; the three terms of a
    row read the same seeds (each names every cell, weight 0 where it does not enter)."""
    points, base, perfect = worth.points, worth.baseline, worth.perfect
    splits = []
    for rate in sorted(points.noise_rate.unique()):
        here = points[points.noise_rate == rate]
        if not here.kind.eq(BASELINE_POINT).any():
            continue
        for method in sorted(set(here.method[here.kind == REPLAY]) & set(here.method[here.kind == METHOD_POINT])):
            replay = str(here.label[(here.kind == REPLAY) & (here.method == method)].iloc[0])
            m, r, b = (Term(method, rate, 0.0), Term(replay, rate, 0.0), Term(base, rate, 0.0))
            at = f", {rate_label(rate)}"
            total = judge(f"{method} - {base}{at}", [replace(m, weight=1.0), replace(b, weight=-1.0), r])
            filt = judge(f"{replay} - {base}{at}", [replace(r, weight=1.0), replace(b, weight=-1.0), m])
            other = judge(f"{method} - {replay}{at}", [replace(m, weight=1.0), replace(r, weight=-1.0), b])
            left = (judge(f"{perfect} - {replay}{at}", [Term(perfect, rate), Term(replay, rate, -1.0)])
                    if here.kind.eq(PERFECT_POINT).any() else None)
            purity = float(here.purity[(here.kind == METHOD_POINT) & (here.method == method)].mean())
            splits.append(Split(float(rate), method, purity, total, filt, other, left))
    return splits


def _type_words(setting: Setting, kind: str) -> str:
    """A noise type's cell in words, as its protocol describes the type: ``clean + caption swapped``."""
    protocol = NOISE_PROTOCOLS.get(setting.noise_protocol) if setting.noise_protocol in NOISE_PROTOCOLS else None
    return f"clean + {getattr(protocol, 'noise_types', {}).get(kind, kind)}"


def _costs(worth: KeptWorth, judge: Judge, caught: pd.DataFrame) -> list[TypeCost]:
    """Each noise type's cell at each rate against the perfect filter's, and what the methods caught of it."""
    points, costs = worth.points, []
    types = points[points.kind == NOISE_TYPE]
    cells = worth.setting.runs.set_index("run_id").reindex(types.index)
    for (rate, label), group in types.groupby([types.noise_rate, types.label], sort=True):
        kind = str(cells.loc[group.index, "kept_set_noise_type"].iloc[0])
        has_perfect = ((points.kind == PERFECT_POINT) & (points.noise_rate == rate)).any()
        cost = judge(f"{label} - {worth.perfect}, {rate_label(rate)}", [Term(label, rate), Term(worth.perfect, rate, -1.0)]) \
            if has_perfect else None
        methods = points[(points.kind == METHOD_POINT) & (points.noise_rate == rate)]
        shares = caught.reindex(methods.index)[kind] if kind in caught.columns else pd.Series(dtype=float)
        by_method = {m: float(v) for m, v in shares.groupby(methods.method).mean().items() if math.isfinite(v)}
        values = group.metric.astype(float)
        std = float(values.std(ddof=1)) if len(values) > 1 else math.nan
        costs.append(TypeCost(float(rate), kind, _type_words(worth.setting, kind), (float(values.mean()), std, len(values)),
                              cost, by_method, tuple(sorted({int(s) for s in group.seed}))))
    order = {kind: i for i, kind in enumerate(worth.setting.noise_types)}  # the protocol's order, as the purity table's
    return sorted(costs, key=lambda c: (c.rate, order.get(c.noise_type, len(order)), c.noise_type))


def kept_worth(setting: Setting, n_resamples: int = N_RESAMPLES, seed: int = 0, rule: str = DEFAULT_RULE) -> KeptWorth | None:
    """What ``setting``'s kept sets are worth, read under ``rule`` with the claims' paired rule
    (``n_resamples`` query resamples, seeded); None for a setting without a noisy rate (nothing to keep)."""
    if not any(rate > 0 for rate in setting.rates):
        return None
    baseline, perfect = setting.role(BASELINE), setting.role(PERFECT_FILTER)
    view = rule_view(with_kept_sets(setting), rule)
    per_run = run_columns(view.setting)
    metric = headline_column(list(per_run.columns))
    recall = next((c for c in RECALL_COLUMNS if c in per_run.columns), None)
    empty = KeptWorth(view.setting, metric, recall, pd.DataFrame(columns=["kind"]), baseline, perfect, none=NONE_LINE)
    if metric is None or setting.kept_sets is None:
        return empty
    points, stale = chart_points(view.setting, view.epochs, baseline, perfect)
    worth = KeptWorth(view.setting, metric, recall, points, baseline, perfect, stale=stale,
                      left_out=points.attrs.get("left_out", []))
    judge = recall_judge(view.setting, n_resamples, seed, margin=DEFAULT_MARGIN)
    worth.splits = _splits(worth, judge)
    worth.costs = _costs(worth, judge, purity_at(view.setting.purity, view.epochs))
    if not worth.drawn:
        worth.none = " ".join([STALE_LINE, *worth.left_out]) if worth.left_out else NONE_LINE
    return worth
