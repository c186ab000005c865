"""Reading a results directory for a report: the completed runs' rows, and every cell of the
grid that has no completed run (failed, interrupted, never run, or completed with a damaged
record: :mod:`cirbench.results.verify`), listed rather than fatal."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from cirbench.data.noise.injection import NOISE_PROTOCOLS
from cirbench.report.analysis.loading.plans import PlanFileError, read_plans
from cirbench.results.chance import judge_below_chance
from cirbench.results.collapse import collapse_reason, final_recall
from cirbench.results.labels import TEXT_ONLY_ROW, TRIAL_LABEL
from cirbench.results.roles import BASELINE, role_method
from cirbench.results.selection import selection_values
from cirbench.results.store import MAIN_SCORE, ResultsStore
from cirbench.results.verify import check_folder

# A setting is one comparable grid: rows of different settings are never compared.
SETTING_COLUMNS: list[str] = ["dataset", "backbone", "noise_protocol"]
CELL_COLUMNS: list[str] = SETTING_COLUMNS + ["method", "noise_rate", "seed"]
DATA_TABLES: tuple[str, ...] = ("metrics", "purity", "scores", "losses", "ranks")
COLLAPSE_MARK = "†"
"""The marker of a (method, noise rate) collapsed on at least one seed (:mod:`cirbench.results.collapse`)."""
TOLD_RATE = "told the noise rate"
"""How a method that read the configured noise rate (``Method.reads_noise_rate``) is marked
beside its name: privileged information, as the perfect filter's ground truth is marked."""
BELOW_CHANCE_MARK = "‡"
"""The marker of a (method, noise rate) whose kept set is less clean than chance on at least
one seed (:mod:`cirbench.results.chance`)."""


class ReportError(ValueError):
    """A results directory a report cannot be built from (missing, or with no runs at all)."""


@dataclass
class Setting:
    """The completed runs of one (dataset, backbone, noise protocol) and their table rows.

    ``runs`` holds one row per cell (method, noise rate, seed): the latest completed run.
    Every data table is restricted to those runs; ``scores`` only to each run's final epoch.
    ``problems`` lists the cells of this setting's grid that have no completed run.
    ``references`` holds the final metrics rows of the setting's reference rows
    (:mod:`cirbench.engine.planning.reference`), which are drawn as lines and never ranked.
    ``ranks`` holds each run's final per-query ranks (empty for results written before
    the ``ranks`` table existed), ``epoch_ranks`` those of every epoch a selection rule
    picked (:mod:`cirbench.results.selection`) that the run stored.

    ``purity`` and ``scores`` are those of each method's main noise score (``score_name``
    ``noise_score``); ``extra_purity`` and ``extra_scores`` hold the rows of the further
    named scores a method gives (``StepOutput.extra_scores``), which only the claims use.
    """

    dataset: str
    backbone: str
    noise_protocol: str
    runs: pd.DataFrame
    metrics: pd.DataFrame
    purity: pd.DataFrame
    scores: pd.DataFrame
    losses: pd.DataFrame
    problems: pd.DataFrame = field(default_factory=pd.DataFrame)
    references: pd.DataFrame = field(default_factory=pd.DataFrame)
    ranks: pd.DataFrame = field(default_factory=pd.DataFrame)
    epoch_ranks: pd.DataFrame = field(default_factory=pd.DataFrame)
    extra_purity: pd.DataFrame = field(default_factory=pd.DataFrame)
    extra_scores: pd.DataFrame = field(default_factory=pd.DataFrame)
    root: Path | None = None
    """The results folder it was read from (its ``claims.toml``: :mod:`cirbench.report.analysis.verdicts.claim_files`)."""
    kept_sets: Setting | None = None
    """The setting's kept-set cells (frontier, noise types, replays: the runs whose ``kept_set``
    is set, docs/kept-sets.md) with their tables, read like a setting of their own; None when
    there are none. Reference cells: never in :attr:`runs`, so never ranked, drawn with the
    methods nor read by a claim. Their failed or damaged cells are in this setting's :attr:`problems`."""

    @property
    def slug(self) -> str:
        """A file-system-safe name for the setting's figure folder."""
        text = f"{self.dataset}_{self.backbone}_{self.noise_protocol}"
        return "".join(c if c.isalnum() or c in "-_." else "-" for c in text)

    @property
    def methods(self) -> list[str]:
        """The compared method labels in a stable order: the baseline (by role) first, oracles
        last, others by name. Ablation rows (:attr:`variants`) and sweep trials
        (:attr:`trials`) are not among them."""
        oracles, other, baseline = self.oracles, set(self.variants) | set(self.trials), self.role(BASELINE)
        return sorted(set(self.runs.method) - other, key=lambda m: (m in oracles, m != baseline, m))

    def role(self, role: str) -> str:
        """The method of ``role`` (:func:`cirbench.results.roles.role_method`): ``baseline``, ``perfect_filter``."""
        return role_method(self.runs, role)

    @property
    def variants(self) -> list[str]:
        """Ablation rows: labels ``name:variant`` whose full method ``name`` is in the setting
        too. The report shows them beside that method in their own table (and the claims
        read them), never ranked against or drawn with the compared methods."""
        labels = set(self.runs.method) - set(self.trials)
        return sorted(m for m in labels if ":" in m and m.split(":", 1)[0] in labels)

    @property
    def trials(self) -> list[str]:
        """Sweep rows (``name:trial<k>``, ``cirbench sweep``): shown in the tuned table only."""
        return sorted(m for m in set(self.runs.method) if TRIAL_LABEL.fullmatch(m))

    @property
    def oracles(self) -> set[str]:
        """Labels of methods that saw the ground-truth flags (perfect filters, not competitors)."""
        return set(self.runs.loc[self.runs.is_oracle.eq(True), "method"])

    @property
    def told_rate(self) -> set[str]:
        """Labels of methods told the configured noise rate (``runs.reads_noise_rate``), which
        the others are not given (none in runs written before it was recorded)."""
        if "reads_noise_rate" not in self.runs.columns:
            return set()
        return set(self.runs.loc[self.runs.reads_noise_rate.eq(True), "method"])

    @cached_property
    def selection(self) -> pd.DataFrame:
        """Each run's epoch and validation headline under every selection rule
        (:func:`cirbench.results.selection.selection_values`), computed once."""
        return selection_values(self.metrics)

    def named_scores(self, name: str) -> pd.DataFrame:
        """The final-epoch ``scores`` rows of the per-sample score ``name`` (main or extra)."""
        frame = self.scores if name == MAIN_SCORE else self.extra_scores
        return frame[frame.score_name == name] if len(frame) else frame

    def label(self, method: str, rate: float | None = None) -> str:
        """A method's display name; oracles are marked as the perfect filters they are, a
        method told the noise rate with :data:`TOLD_RATE`, and with ``rate`` a cell collapsed
        on any seed gets :data:`COLLAPSE_MARK`."""
        mark = "" if rate is None else self.collapse_mark(method, rate)
        notes = [note for note, marked in (("perfect filter", method in self.oracles), (TOLD_RATE, method in self.told_rate))
                 if marked]
        return f"{method} ({', '.join(notes)}){mark}" if notes else f"{method}{mark}"

    def flagged(self, column: str) -> pd.DataFrame:
        """The runs whose flag ``column`` (``collapsed``, ``below_chance``) is set, by method, rate and seed."""
        runs = self.runs
        flagged = runs[runs[column].eq(True)] if column in runs.columns else runs.iloc[:0]
        return flagged.sort_values(["method", "noise_rate", "seed"])

    @property
    def collapsed(self) -> pd.DataFrame:
        """The runs flagged collapsed (:mod:`cirbench.results.collapse`), by method, rate and seed."""
        return self.flagged("collapsed")

    @property
    def below_chance(self) -> pd.DataFrame:
        """The runs whose kept set is less clean than chance (:mod:`cirbench.results.chance`)."""
        return self.flagged("below_chance")

    def flag_counts(self, column: str, method: str, rate: float) -> tuple[int, int]:
        """(seeds on which ``method`` at ``rate`` is flagged ``column``, seeds it was run on)."""
        cell = self.runs[(self.runs.method == method) & np.isclose(self.runs.noise_rate.astype(float), rate)]
        flagged = cell[column].eq(True).sum() if column in cell.columns else 0
        return int(flagged), len(cell)

    def collapse_counts(self, method: str, rate: float) -> tuple[int, int]:
        """(seeds on which the cell collapsed, seeds it was run on) of ``method`` at ``rate``."""
        return self.flag_counts("collapsed", method, rate)

    def collapse_mark(self, method: str, rate: float) -> str:
        """:data:`COLLAPSE_MARK` when ``method`` at ``rate`` collapsed on any seed, else ``""``."""
        return COLLAPSE_MARK if self.collapse_counts(method, rate)[0] else ""

    def below_chance_mark(self, method: str, rate: float) -> str:
        """:data:`BELOW_CHANCE_MARK` when ``method``'s kept set at ``rate`` is below chance on any seed, else ``""``."""
        return BELOW_CHANCE_MARK if self.flag_counts("below_chance", method, rate)[0] else ""

    @property
    def noise_types(self) -> list[str]:
        """The noise types of this setting's results (what a noisy triplet had done to it:
        ``reference``, ``caption``, ``target`` for the built-in protocols, any name a plugin
        protocol records), in the order the ``purity`` table first lists them."""
        if self.purity.empty:
            return []
        return [str(t) for t in pd.unique(self.purity.noise_type) if t not in ("all", "clean")]

    @property
    def rates(self) -> list[float]:
        """The noise rates with at least one completed run, ascending."""
        return sorted(self.runs.noise_rate.unique())

    def describe(self, seeds: Iterable[int] | None = None) -> str:
        """What was run, for figure titles: dataset, backbone, protocol, epochs and seeds (``seeds``
        where a figure reads fewer than the setting holds)."""
        epochs = sorted({int(e) for e in self.runs.epochs.dropna()})
        seeds = sorted({int(s) for s in (self.runs.seed if seeds is None else seeds)})
        epoch_text = "/".join(str(e) for e in epochs) or "?"
        return (
            f"{self.dataset}, {self.backbone} backbone, {self.noise_protocol} noise, "
            f"{epoch_text} epoch{'' if epochs == [1] else 's'}, seeds {','.join(str(s) for s in seeds)}"
        )

    def noise_type_wording(self) -> str:
        """This setting's noise types as its protocol describes them (``NoiseProtocol.noise_types``),
        e.g. ``caption: caption swapped``; a type it does not describe (or a protocol not registered here) by name."""
        protocol = NOISE_PROTOCOLS.get(self.noise_protocol) if self.noise_protocol in NOISE_PROTOCOLS else None
        described = getattr(protocol, "noise_types", {})
        return "; ".join(f"{t}: {described[t]}" if t in described else t for t in self.noise_types)


@dataclass
class ReportData:
    """Everything a report shows: one :class:`Setting` per comparable grid, and the problems."""

    root: Path
    settings: list[Setting]
    problems: pd.DataFrame


def _last_line(error: object) -> str:
    lines = [line.strip() for line in str(error or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _problems(runs: pd.DataFrame, kept: pd.DataFrame, planned: pd.DataFrame) -> pd.DataFrame:
    """Cells without a completed run: failed, interrupted or damaged ones with their error
    (a damaged run is listed even where an older run of the cell is intact), and the
    combinations of method x rate x seed of a setting that were never run at all. A method
    is expected at every noise rate of its setting; an ablation variant (``name:variant``)
    or a perfect filter only at the rates it was run at (an ablation grid runs at the
    paper's ablation rate, ``calibrate`` runs the perfect filter at 50% and 80%), at every
    seed; a perfect filter never at 0% (there it is the baseline, ``Method.same_at_no_noise``).
    Every cell of a study's plan (``planned``, :mod:`~cirbench.report.analysis.loading.plans`)
    is expected too, and a planned variant at its planned seeds alone."""
    columns = CELL_COLUMNS + ["status", "error", "run_id"]
    rows = []
    done = set(map(tuple, kept[CELL_COLUMNS].itertuples(index=False)))
    seen = set()
    bad = runs[runs.status != "completed"].sort_values("finished", ascending=False)  # latest attempt first
    for row in bad.itertuples(index=False):
        cell = tuple(getattr(row, c) for c in CELL_COLUMNS)
        if cell in done and row.status != "damaged":
            continue
        seen.add(cell)
        rows.append({**dict(zip(CELL_COLUMNS, cell)), "status": row.status, "error": _last_line(row.error), "run_id": row.run_id})
    for setting, group in runs[~is_kept_set(runs)].groupby(SETTING_COLUMNS):  # a kept-set cell is expected nowhere
        all_rates, seeds = sorted(group.noise_rate.unique()), sorted(group.seed.unique())
        oracles = set(group.method[group.is_oracle.fillna(False).astype(bool)])
        own_rates_only = oracles | set(group.method[group.method.str.contains(":")])
        swept = sweep_seeds(group)
        variants = group[group.method.str.contains(":") & ~group.method.str.fullmatch(TRIAL_LABEL.pattern)]
        ablation_seeds = variants.groupby(variants.method.str.split(":").str[0]).seed.unique()
        plan = planned[(planned[SETTING_COLUMNS] == pd.Series(dict(zip(SETTING_COLUMNS, setting)))).all(axis=1)]
        planned_labels = set(plan.method)
        expected = [  # a sweep's trials, an ablation's variants at the seeds their grid ran (either may run fewer)
            (method, rate, seed, "never run")
            for method, rows in group.groupby("method")
            if not (method in own_rates_only and method in planned_labels)  # a planned variant: its plan says
            for rate in (sorted(rows.noise_rate.unique()) if method in own_rates_only else all_rates)
            for seed in _expected_seeds(method, float(rate), seeds, swept, ablation_seeds, rows)
            if not (method in oracles and rate == 0.0)
        ] + [(row.method, row.noise_rate, row.seed, f"never run (planned by {row.study})")
             for row in plan.itertuples(index=False)]
        for method, rate, seed, error in expected:
            cell = (*setting, method, float(rate), int(seed))
            if cell not in done and cell not in seen:
                seen.add(cell)
                rows.append({**dict(zip(CELL_COLUMNS, cell)), "status": "missing", "error": error, "run_id": ""})
    return pd.DataFrame(rows, columns=columns).sort_values(CELL_COLUMNS).reset_index(drop=True)


def sweep_seeds(runs: pd.DataFrame) -> dict[tuple[str, float], list[int]]:
    """The seeds a sweep ran each (method, noise rate) of ``runs`` (a ``runs`` table) at: those
    where the method has two or more trial labels (``<method>:trial<k>``) at that rate, or the
    most it has anywhere (a sweep of two trials has one). A picked trial re-run on further
    seeds (a sweep's ``tuned_seeds``, docs/selection.md) adds one label there, not a sweep: its
    other trials are not expected at those seeds."""
    labels = runs.method.astype(str)
    trials = runs[labels.str.fullmatch(TRIAL_LABEL.pattern)]
    if trials.empty:
        return {}
    base = trials.method.astype(str).str.extract(TRIAL_LABEL)["method"]
    counts = trials.assign(base=base).groupby(["base", "noise_rate", "seed"]).method.nunique()
    found: dict[tuple[str, float], list[int]] = {}
    for (method, rate), block in counts.groupby(level=[0, 1]):
        top = block.max()
        found[(str(method), float(rate))] = sorted(int(key[2]) for key, n in block.items() if n == top or n >= 2)
    return found


def _expected_seeds(method: str, rate: float, seeds: list, swept: dict[tuple[str, float], list[int]],
                    ablation_seeds: pd.Series, rows: pd.DataFrame) -> list:
    """The seeds ``method`` is expected at, at ``rate``: a sweep trial's, the seeds its sweep
    ran at that rate (:func:`sweep_seeds`) and those it ran at itself (a picked trial's further
    seeds); an ablation variant's (``name:variant``), the seeds of any variant of ``name`` (its
    grid's); any other, ``seeds``. ``rows``: the method's runs."""
    trial = TRIAL_LABEL.fullmatch(method)
    if trial:
        own = rows.loc[rows.noise_rate.astype(float) == rate, "seed"]
        return sorted(set(swept.get((trial["method"], rate), [])) | {int(s) for s in own})
    if ":" in method:
        return sorted(ablation_seeds[method.split(":", 1)[0]])
    return seeds


def _other_damage(problems: pd.DataFrame, damaged: dict[str, str], runs: pd.DataFrame, references: pd.DataFrame) -> pd.DataFrame:
    """``problems`` with a row, listed last, for each damaged reference row and each cell
    whose ``runs`` part could not be read (its setting unknown: named by its run id)."""
    rows = []
    for run_id, error in sorted(damaged.items()):
        if run_id in set(runs.run_id):
            continue
        known = references[references.run_id == run_id]
        cell = dict(known.iloc[0][CELL_COLUMNS]) if len(known) else {
            "dataset": "?", "backbone": "?", "noise_protocol": "?", "method": run_id, "noise_rate": float("nan"), "seed": "?"}
        rows.append({**cell, "status": "damaged", "error": error, "run_id": run_id})
    return pd.concat([problems, pd.DataFrame(rows, columns=problems.columns)], ignore_index=True) if rows else problems


def load_results(root: Path | str) -> ReportData:
    """Read the results tables under ``root`` (see :mod:`cirbench.results.store`).

    Only ``completed`` runs whose parts are as their ``runs`` row recorded count for
    numbers (a damaged one is listed with status ``damaged`` and the reason, an unreadable
    ``runs`` part too); where one cell (setting, method, rate, seed) has several completed
    runs (a rerun with other hyperparameters or epochs), the latest finished one is kept.
    Raises :class:`ReportError` if ``root`` holds no runs table.
    """
    root = Path(root)
    if not root.is_dir():
        raise ReportError(f"results directory {str(root)!r} does not exist")
    store = ResultsStore(root)
    check = check_folder(root)
    runs = store.read("runs", check.run_ids)
    if runs.empty and not check.problems:
        raise ReportError(f"results directory {str(root)!r} has no runs (expected {root / 'runs'}/*.parquet)")
    damaged = {run_id: "; ".join(str(p) for p in problems) for run_id, problems in check.damaged().items()}
    hit = runs.run_id.isin(set(damaged)) & (runs.status == "completed")
    runs.loc[hit, "error"] = runs.loc[hit, "run_id"].map(damaged)
    runs.loc[hit, "status"] = "damaged"
    is_reference = runs.is_reference.eq(True)
    reference_runs, runs = runs[is_reference], runs[~is_reference]
    completed = runs[runs.status == "completed"].sort_values("finished")
    kept = completed.drop_duplicates(CELL_COLUMNS, keep="last").reset_index(drop=True)
    try:
        planned = read_plans(root)
    except PlanFileError as exc:
        raise ReportError(str(exc)) from None
    problems = _other_damage(_problems(runs, kept, planned), damaged, runs, reference_runs)
    references = reference_runs[reference_runs.status == "completed"].sort_values("finished")
    references = references.drop_duplicates(SETTING_COLUMNS + ["method", "seed"], keep="last")
    tables = {name: store.read(name, [*kept.run_id, *references.run_id]) for name in DATA_TABLES}
    tables["ranks"] = _epoch_filled(tables["ranks"], tables["metrics"])
    kept = judge_below_chance(_judge_unflagged(kept, references, tables), tables["purity"])
    kept_sets = is_kept_set(kept)
    settings = []
    for values, setting_runs in kept[~kept_sets].groupby(SETTING_COLUMNS, sort=True):
        mask = (problems[SETTING_COLUMNS] == pd.Series(dict(zip(SETTING_COLUMNS, values)))).all(axis=1)
        own = (references[SETTING_COLUMNS] == pd.Series(dict(zip(SETTING_COLUMNS, values)))).all(axis=1)
        reference_ids = set(references.loc[own, "run_id"])
        reference_metrics = tables["metrics"][tables["metrics"].run_id.isin(reference_ids)].reset_index(drop=True)
        setting = Setting(*values, runs=setting_runs.reset_index(drop=True), problems=problems[mask],
                          references=reference_metrics, root=root, **_parts(setting_runs, tables))
        cells = kept[kept_sets & (kept[SETTING_COLUMNS] == pd.Series(dict(zip(SETTING_COLUMNS, values)))).all(axis=1)]
        if len(cells):
            setting.kept_sets = Setting(*values, runs=cells.reset_index(drop=True), references=reference_metrics,
                                        root=root, **_parts(cells, tables))
        settings.append(setting)
    return ReportData(root, settings, problems)


def is_kept_set(runs: pd.DataFrame) -> pd.Series:
    """Which of ``runs`` (a ``runs`` table) are kept-set cells (``kept_set`` set: docs/kept-sets.md)."""
    if "kept_set" not in runs.columns:
        return pd.Series(False, index=runs.index)
    return runs.kept_set.fillna("").astype(str).ne("")


def _parts(runs: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The data tables' rows of ``runs`` as a :class:`Setting` holds them: ``scores`` of the
    final epoch only, the main score's rows apart from the extra scores', the final ``ranks``
    and those of every epoch (``epoch_ranks``)."""
    ids = set(runs.run_id)
    parts = {name: frame[frame.run_id.isin(ids)].reset_index(drop=True) for name, frame in tables.items()}
    parts["epoch_ranks"] = parts["ranks"]
    parts["ranks"] = final_epoch(parts["ranks"]).reset_index(drop=True)
    scores = parts["scores"]
    if len(scores):
        last = scores.groupby("run_id")["epoch"].transform("max")
        scores = scores[scores.epoch == last]
    for name in ("purity", "scores"):
        frame = scores if name == "scores" else parts[name]
        main = frame.score_name == MAIN_SCORE
        parts[name], parts[f"extra_{name}"] = frame[main].reset_index(drop=True), frame[~main].reset_index(drop=True)
    return parts


def _epoch_filled(ranks: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """``ranks`` with the ``epoch`` of parts written before it was recorded (null) set to
    their run's last validation epoch, the only one such parts hold."""
    if ranks.empty or not ranks.epoch.isna().any():
        return ranks
    last = metrics[metrics.split == "val"].groupby("run_id")["epoch"].max()
    ranks = ranks.copy()
    ranks["epoch"] = ranks.epoch.fillna(ranks.run_id.map(last)).fillna(0).astype("int64")
    return ranks


def _judge_unflagged(runs: pd.DataFrame, references: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """``runs`` with the collapse guard applied, from their stored tables, to every run
    written before it existed (``collapse_reason`` null), against the ``text_only`` row of
    the same setting and seed."""
    todo = runs.collapse_reason.isna() if "collapse_reason" in runs.columns else pd.Series(True, index=runs.index)
    if not todo.any():
        return runs
    runs = runs.copy()
    runs["collapsed"] = runs.get("collapsed", pd.Series(pd.NA, index=runs.index)).astype(object)
    text_only = references[references.method == TEXT_ONLY_ROW].set_index(SETTING_COLUMNS + ["seed"]).run_id
    metrics, losses = tables["metrics"].groupby("run_id"), tables["losses"].groupby("run_id")
    empty = {"metrics": tables["metrics"].iloc[:0], "losses": tables["losses"].iloc[:0]}
    for index, run in runs[todo].iterrows():
        ref = text_only.get(tuple(run[c] for c in SETTING_COLUMNS) + (run.seed,))
        bar = final_recall(metrics.get_group(ref)) if ref is not None and ref in metrics.groups else float("nan")
        own = {name: groups.get_group(run.run_id) if run.run_id in groups.groups else empty[name]
               for name, groups in (("metrics", metrics), ("losses", losses))}
        reason = collapse_reason(own["metrics"], own["losses"], bar)
        runs.loc[index, ["collapsed", "collapse_reason"]] = [bool(reason), reason]
    return runs


def final_epoch(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of each run's last epoch (the highest ``epoch`` that run has in ``frame``)."""
    if frame.empty:
        return frame
    last = frame.groupby("run_id")["epoch"].transform("max")
    return frame[frame.epoch == last]
