"""The report's "Do the papers' claims hold here?": each claim of the ConeSep and HUG papers
(including ConeSep's numbers for HABIT and INTENT) checked on a setting's results with the paired comparisons of
:mod:`cirbench.report.significance`.

A claim is one or more checks; each check is a comparison (or, for the kept set against
chance, a hypergeometric test per seed) with its own verdict, and the claim's verdict
combines them (:func:`~cirbench.report.significance.combine_verdicts`). A check whose cells
(method, variant, noise rate or seeds) are not in the results is "not run", never an error.
Recall is the setting's headline column, as the report's tables pick it
(:func:`~cirbench.report.tables.headline_column`), as a fraction.

A check that reads a cell flagged collapsed on any seed (:mod:`cirbench.results.collapse`)
is inconclusive whatever its intervals say, and names the cell: a collapse is a defect to
explain, never a robustness result (its numbers are still shown).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from cirbench.report.bootstrap import N_RESAMPLES, QueryBootstrap, SampleBootstrap, rank_terms
from cirbench.report.load import Setting, final_epoch
from cirbench.report.significance import (
    INCONCLUSIVE, NON_INFERIORITY, NOT_RUN, VERDICTS, Comparison, KeptSetTest, Term, cell_runs, combine_verdicts, difference,
    kept_set_test, kept_set_verdict, paired_comparison,
)
from cirbench.report.selection import describe_rule, rule_view
from cirbench.report.tables import BASELINE, headline_column, rate_label, run_columns
from cirbench.results.selection import DEFAULT_RULE, RULES
from cirbench.results.store import MAIN_SCORE

ROBUST = ("tme", "conesep")
CONESEP_MODULES: dict[str, str] = {"no_gfq": "GFQ", "no_nbl": "NBL", "no_btu": "BTU", "no_rcl": "RCL"}
"""ConeSep's standard ablation variants (``ConeSep.ablations``) and the module each removes."""
HUG_LADDER: tuple[str, ...] = (
    "hug:point_matching", "hug:probabilistic", "hug:component", "hug:instance", "hug:modality",
    "hug:cross_modal", "hug:coordination", "hug",
)
"""HUG's Table 3 rows in order (``TABLE3_ROWS`` in ``methods/hug.py``; the last is the full model)."""
CONESEP_TABLE_ROBUST = ("habit", "intent")
"""The robust methods of ConeSep's Tables 1-2 that are checked against its numbers only
(their own papers were not read; see ``docs/habit.md``, ``docs/intent.md``)."""
OVERALL_UNCERTAINTY = "overall_uncertainty"
CAPTION = "caption"

VERDICT_RULE = (
    "Verdict rule: a difference holds when both its 95% t interval over seeds (paired by seed) and its 95% paired "
    "bootstrap interval (validation queries, or training samples for purity and AUROC) lie above the threshold "
    "(0; -0.01 for 'loses no more than a point'), does not hold when both lie below it, and is inconclusive "
    "otherwise or with fewer than two seeds; a kept set is cleaner than chance on a seed when the hypergeometric "
    "p < 0.01. A check that reads a cell flagged collapsed (see Collapsed cells) is inconclusive whatever its intervals. "
    "A claim holds if all its checks hold, does not hold if any does not, and is not run if none could run."
)


@dataclass
class Check:
    """One comparison behind a claim: what was compared, its numbers and its verdict."""

    label: str
    verdict: str
    numbers: str
    collapsed: tuple[str, ...] = ()
    """The cells read by the check that collapsed, e.g. ``hug at 50% (seed 0)``."""
    comparison: Comparison | None = None
    """The paired comparison behind the numbers (its mean, intervals and threshold), for the
    forest plot; None for a check that is not a difference (the kept set against chance)."""
    unit: str = ""
    """What is compared: ``recall``, ``purity`` or ``AUROC`` (empty for a check not run)."""
    kept_sets: tuple[KeptSetTest, ...] = ()
    """The kept-set tests of a check against chance, one per seed (empty for a comparison)."""


@dataclass
class Claim:
    """One claim of a paper, its source, the checks behind it and the combined verdict."""

    text: str
    source: str
    checks: list[Check] = field(default_factory=list)
    short: str = ""
    """A title of a few words, for the forest plot's group labels."""
    other_rules: dict[str, str] = field(default_factory=dict)
    """The verdict under each other selection rule that gives a different one
    (:mod:`cirbench.results.selection`), e.g. ``{"val_peek": "holds"}``."""

    @property
    def verdict(self) -> str:
        """The checks' verdicts combined (all hold: holds; any does not hold: does not hold)."""
        return combine_verdicts(c.verdict for c in self.checks)

    @property
    def collapsed(self) -> list[str]:
        """The collapsed cells any of its checks read, in order, each once."""
        return list(dict.fromkeys(cell for c in self.checks for cell in c.collapsed))

    @property
    def verdict_text(self) -> str:
        """The verdict as the report prints it: with the collapsed cells named, and the
        verdicts other selection rules give where they differ, if any."""
        notes = [f"collapsed: {', '.join(self.collapsed)}"] if self.collapsed else []
        notes += [f"{rule}: {verdict}" for rule, verdict in self.other_rules.items()]
        return f"{self.verdict} ({'; '.join(notes)})" if notes else self.verdict


def _collapsed_cells(runs: pd.DataFrame, terms: Sequence[Term]) -> tuple[str, ...]:
    """The cells of ``terms`` flagged collapsed on any seed among ``runs``, e.g. ``hug at 50% (seeds 0, 2)``."""
    if "collapsed" not in runs.columns:
        return ()
    flagged = runs[runs.collapsed.eq(True)]
    cells = []
    for term in dict.fromkeys(Term(t.method, t.rate) for t in terms):
        seeds = sorted(cell_runs(flagged, term))
        if seeds:
            cells.append(f"{term.method} at {rate_label(term.rate)} (seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))})")
    return tuple(cells)


def _guarded(check: Check, runs: pd.DataFrame, terms: Sequence[Term]) -> Check:
    """``check``, inconclusive and naming them when a cell it reads collapsed (unless not run)."""
    cells = _collapsed_cells(runs, terms)
    if not cells or check.verdict == NOT_RUN:
        return check
    return replace(check, verdict=INCONCLUSIVE, collapsed=cells)


class _Evidence:
    """What the checks of one setting share: its runs, recall per run, and the resamples."""

    def __init__(self, setting: Setting, n_resamples: int, seed: int) -> None:
        self.setting, self.n_resamples, self.seed = setting, n_resamples, seed
        self.runs = setting.runs
        per_run = run_columns(setting)
        self.column = headline_column(list(per_run.columns))
        self.recall = per_run[self.column] / 100.0 if self.column else pd.Series(dtype=float)

    @cached_property
    def queries(self) -> QueryBootstrap | None:
        """The shared query resamples, or None without stored ranks."""
        if self.setting.ranks.empty or self.column is None:
            return None
        return QueryBootstrap(self.setting.ranks, rank_terms(self.column, self.setting.metrics), self.n_resamples, self.seed)

    @cached_property
    def samples(self) -> SampleBootstrap | None:
        """The shared training-sample resamples, or None without a scores table."""
        ids = pd.concat([self.setting.scores.sample_id, self.setting.extra_scores.get("sample_id", pd.Series(dtype=object))])
        return SampleBootstrap(ids.unique(), self.n_resamples, self.seed) if len(ids) else None

    def rates(self, *methods: str) -> list[float]:
        """The noise rates at which every one of ``methods`` has a completed run."""
        sets = [set(self.runs.loc[self.runs.method == m, "noise_rate"].astype(float)) for m in methods]
        return sorted(set.intersection(*sets)) if sets else []

    def recall_check(self, label: str, terms: Sequence[Term], threshold: float = 0.0) -> Check:
        """A paired comparison of the headline recall, bootstrapped over validation queries."""
        if self.column is None:
            return Check(label, NOT_RUN, "not run: no recall in the results")

        def resample(run_ids: list[str]) -> np.ndarray | None:
            return self.queries.resample(run_ids) if self.queries is not None else None

        try:
            result = paired_comparison(label, terms, self.runs, self.recall, resample, threshold=threshold)
        except ValueError as exc:  # ranks that do not line up, or a headline not recomputable from ranks
            return Check(label, INCONCLUSIVE, f"cannot compare: {exc}")
        return _guarded(Check(label, result.verdict, result.numbers(), comparison=result, unit="recall"), self.runs, terms)

    def sample_check(self, label: str, terms: Sequence[Term], metric: str, score_name: str = MAIN_SCORE,
                     noise_type: str | None = None, offset: float = 0.0) -> Check:
        """A paired comparison of purity or AUROC, bootstrapped over training samples."""
        scores = self.setting.named_scores(score_name)
        ids = [r for term in terms for r in cell_runs(self.runs, term).values()]
        if self.samples is None or scores.empty:
            return Check(label, NOT_RUN, f"not run: no per-sample {score_name} in the results")
        try:
            point = pd.Series({r: self._sample_point(scores, r, metric, noise_type) for r in ids}, dtype=float)
            result = paired_comparison(
                label, terms, self.runs, point.dropna(),
                lambda run_ids: self.samples.values(scores, run_ids, metric, noise_type),
                offset=offset, bootstrap_over="training samples",
            )
        except ValueError as exc:  # per-sample rows that do not line up: say so, keep the report
            return Check(label, INCONCLUSIVE, f"cannot compare: {exc}")
        unit = "purity" if metric == "purity" else "AUROC"
        return _guarded(Check(label, result.verdict, result.numbers(), comparison=result, unit=unit), self.runs, terms)

    def _sample_point(self, scores: pd.DataFrame, run_id: str, metric: str, noise_type: str | None) -> float:
        values = self.samples.values(scores, [run_id], metric, noise_type, resampled=False)
        return math.nan if values is None else float(values[0, 0])


def recall_judge(setting: Setting, n_resamples: int = N_RESAMPLES, seed: int = 0) -> Callable[[str, Sequence[Term]], Check]:
    """The claims' comparison of the headline recall on ``setting`` as given, its query
    resamples shared by every call: ``judge(label, terms)`` is the :class:`Check` a claim
    makes of ``terms > 0`` (collapsed cells inconclusive), with the same verdicts as the
    claims for the same ``n_resamples`` and ``seed``."""
    return _Evidence(setting, n_resamples, seed).recall_check


def _robust_beat_sprc(ev: _Evidence) -> Claim:
    claim = Claim(f"Robust methods (tme, conesep) beat {BASELINE} at 50% and 80% noise, and the gap widens with the rate",
                  "ConeSep Sec. 4.2, Tables 1-2", short="tme, conesep beat sprc under noise")
    for method in ROBUST:
        for rate in (0.5, 0.8):
            claim.checks.append(ev.recall_check(f"{method} - {BASELINE} at {rate_label(rate)}", difference(method, BASELINE, rate)))
        widening = [Term(method, 0.8), Term(BASELINE, 0.8, -1.0), Term(method, 0.5, -1.0), Term(BASELINE, 0.5)]
        claim.checks.append(ev.recall_check(f"{method}: gap at 80% - gap at 50%", widening))
    return claim


def _rate_checks(ev: _Evidence, winner: str, loser: str, prefix: str = "", threshold: float = 0.0) -> list[Check]:
    """``winner - loser > threshold`` at every noise rate where both were run (one check each)."""
    rates = ev.rates(winner, loser)
    if not rates:
        return [Check(f"{prefix}{winner} - {loser}", NOT_RUN, f"not run: no noise rate with both {winner} and {loser}")]
    suffix = f" > {threshold:g}" if threshold else ""
    return [ev.recall_check(f"{prefix}{winner} - {loser} at {rate_label(rate)}{suffix}", difference(winner, loser, rate),
                            threshold=threshold) for rate in rates]


def _every_rate(ev: _Evidence, winner: str, loser: str, text: str, source: str) -> Claim:
    return Claim(text, source, _rate_checks(ev, winner, loser), short=f"{winner} beats {loser}")


def _cleaner_kept_set(ev: _Evidence) -> Claim:
    claim = Claim("conesep's kept set is cleaner than tme's at 80% noise, notably against caption swaps (hard noise)",
                  "ConeSep App. C.3, Fig. 6", short="conesep keeps a cleaner set than tme")
    terms = difference("conesep", "tme", 0.8)
    claim.checks.append(ev.sample_check("purity: conesep - tme at 80%", terms, "purity"))
    claim.checks.append(ev.sample_check("purity against caption swaps: conesep - tme at 80%", terms, "purity", noise_type=CAPTION))
    return claim


def _no_loss_without_noise(ev: _Evidence) -> Claim:
    claim = Claim(f"At 0% noise no robust method loses more than a point to {BASELINE}", "ConeSep Table 1 (0% rows)",
                  short="no loss at 0% (tme, conesep, hug)")
    for method in (*ROBUST, "hug"):
        claim.checks.append(ev.recall_check(f"{method} - {BASELINE} at 0% > -0.01", difference(method, BASELINE, 0.0),
                                            threshold=NON_INFERIORITY))
    return claim


def _conesep_modules(ev: _Evidence) -> Claim:
    claim = Claim("Each ConeSep module helps: the full method beats every variant without one", "ConeSep Table 3, Sec. 4.3",
                  short="each ConeSep module helps")
    for variant, module in CONESEP_MODULES.items():
        claim.checks += _rate_checks(ev, "conesep", f"conesep:{variant}", prefix=f"{module}: ")
    return claim


def _uncertainty_marks_noise(ev: _Evidence) -> Claim:
    claim = Claim("HUG's uncertainty marks bad triplets: AUROC against the true noise flags above 0.5",
                  "HUG, uncertainty analysis (Fig. 4)", short="HUG's uncertainty marks noise")
    rates = [r for r in ev.rates("hug") if r > 0]
    for rate in rates:
        for name, what in ((MAIN_SCORE, "coordination uncertainty"), (OVERALL_UNCERTAINTY, "overall uncertainty")):
            claim.checks.append(ev.sample_check(f"{what} AUROC - 0.5 at {rate_label(rate)}", [Term("hug", rate)], "auroc",
                                                score_name=name, offset=-0.5))
    if not rates:
        claim.checks.append(Check("hug AUROC", NOT_RUN, "not run: no hug cell with noise"))
    return claim


def _hug_ladder(ev: _Evidence) -> Claim:
    claim = Claim("HUG's Table 3 ladder: each added part does not lower recall (by more than a point)", "HUG Table 3",
                  short="HUG's ladder does not lower recall")
    for before, after in zip(HUG_LADDER, HUG_LADDER[1:]):
        claim.checks += _rate_checks(ev, after, before, threshold=NON_INFERIORITY)
    return claim


def _table_robust_beat_sprc(ev: _Evidence) -> Claim:
    claim = Claim(f"habit and intent beat {BASELINE} at every noise rate above 0% run",
                  "ConeSep, Tables 1-2: the HABIT and INTENT rows against SPRC at 20%, 50% and 80%",
                  short="habit, intent beat sprc under noise")
    for method in CONESEP_TABLE_ROBUST:
        rates = [r for r in ev.rates(method, BASELINE) if r > 0]
        claim.checks += [ev.recall_check(f"{method} - {BASELINE} at {rate_label(r)}", difference(method, BASELINE, r))
                         for r in rates]
        if not rates:
            claim.checks.append(Check(f"{method} - {BASELINE}", NOT_RUN, f"not run: no noisy rate with both {method} and {BASELINE}"))
    return claim


def _conesep_beats_table_robust(ev: _Evidence) -> Claim:
    claim = Claim("conesep beats habit and intent at every noise rate run",
                  "ConeSep, Sec. 4.2 and Tables 1-2: ConeSep against the HABIT and INTENT rows",
                  short="conesep beats habit, intent")
    for method in CONESEP_TABLE_ROBUST:
        claim.checks += _rate_checks(ev, "conesep", method)
    return claim


def _table_robust_no_loss_without_noise(ev: _Evidence) -> Claim:
    claim = Claim(f"At 0% noise habit and intent lose no more than a point to {BASELINE}",
                  "ConeSep, Tables 1-2: the 0% rows of HABIT, INTENT and SPRC", short="no loss at 0% (habit, intent)")
    for method in CONESEP_TABLE_ROBUST:
        claim.checks.append(ev.recall_check(f"{method} - {BASELINE} at 0% > -0.01", difference(method, BASELINE, 0.0),
                                            threshold=NON_INFERIORITY))
    return claim


def kept_set_check(setting: Setting, method: str, rate: float) -> Check:
    """Is ``method``'s final kept set at ``rate`` cleaner than a random subset of the same
    size on every seed (hypergeometric p < 0.01 each)? Fewer than two seeds: inconclusive."""
    label = f"{method} at {rate_label(rate)}"
    last = final_epoch(setting.purity)
    rows = last[(last.method == method) & np.isclose(last.noise_rate.astype(float), rate) & (last.noise_type == "all")]
    rows = rows.merge(setting.runs[["run_id", "n_noisy"]], on="run_id").dropna(subset=["n_selected", "n_selected_clean"])
    if rows.empty:
        return Check(label, NOT_RUN, f"not run: no kept set of {method} at {rate_label(rate)}")
    tests, parts = [], []
    for row in rows.sort_values("seed").itertuples(index=False):
        test = kept_set_test(int(row.n_samples), int(row.n_samples - row.n_noisy), int(row.n_selected), int(row.n_selected_clean))
        tests.append(test)
        parts.append(f"seed {row.seed}: {100 * test.purity:.1f}% clean vs {100 * test.chance:.1f}% by chance "
                     f"({p_value(test.p_cleaner)})")
    if len(tests) < 2:  # as for the intervals: one seed is never a verdict
        check = Check(label, INCONCLUSIVE, "; ".join(parts + ["one seed"]), unit="purity", kept_sets=tuple(tests))
    else:
        check = Check(label, combine_verdicts(kept_set_verdict(t) for t in tests), "; ".join(parts), unit="purity",
                      kept_sets=tuple(tests))
    return _guarded(check, setting.runs, [Term(method, rate)])


P_FLOOR = 1e-4
"""The smallest p-value printed as a number; below it the report says ``p < 1e-4``."""


def p_value(p: float) -> str:
    """A p-value as the report prints it: ``p=0.003``, or ``p < 1e-4`` below :data:`P_FLOOR`."""
    return "p < 1e-4" if p < P_FLOOR else f"p={p:.1g}"


def _kept_sets_beat_chance(ev: _Evidence) -> Claim:
    claim = Claim("The kept sets of tme and conesep are cleaner than a random subset of the same size at 50% and 80% "
                  "noise, on every seed", "ConeSep Fig. 6, App. C.3", short="kept sets cleaner than chance")
    claim.checks += [kept_set_check(ev.setting, method, rate) for method in ROBUST for rate in (0.5, 0.8)]
    return claim


def paper_claims(setting: Setting, n_resamples: int = N_RESAMPLES, seed: int = 0, rule: str = DEFAULT_RULE) -> list[Claim]:
    """Every claim checked on ``setting`` as selection ``rule`` reads it (bootstraps with
    ``n_resamples`` resamples, seeded), each with the verdicts the other rules give where
    they differ (a rule whose epochs lack stored ranks is left out: it would differ only by
    having less evidence)."""
    main = rule_view(setting, rule)
    claims = claims_on(main.setting, n_resamples, seed)
    for other in RULES:
        if other == rule:
            continue
        view = rule_view(setting, other)
        if not view.usable or view.epochs.equals(main.epochs):
            continue
        for claim, alternative in zip(claims, claims_on(view.setting, n_resamples, seed)):
            if alternative.verdict != claim.verdict:
                claim.other_rules[other] = alternative.verdict
    return claims


def claims_selection(setting: Setting, rule: str = DEFAULT_RULE) -> str:
    """The sentence that says which selection rule the verdicts use and which rules they
    were compared with."""
    text = describe_rule(rule_view(setting, rule))
    skipped = [other for other in RULES if other != rule and not rule_view(setting, other).usable]
    if skipped:
        text += (f" Not compared under {', '.join(skipped)}: some runs' per-query ranks were not stored at the epochs it "
                 "selects (runs written before the ranks of every selected epoch were kept).")
    return text


def claims_on(setting: Setting, n_resamples: int = N_RESAMPLES, seed: int = 0) -> list[Claim]:
    """Every claim checked on ``setting`` as given (its last epoch of each run)."""
    ev = _Evidence(setting, n_resamples, seed)
    return [
        _robust_beat_sprc(ev),
        _every_rate(ev, "conesep", "tme", "conesep beats tme at every noise rate run", "ConeSep Tables 1-2"),
        _cleaner_kept_set(ev),
        _no_loss_without_noise(ev),
        _conesep_modules(ev),
        _every_rate(ev, "hug", BASELINE, f"hug beats point matching ({BASELINE}) at every noise rate run", "HUG Tables 1-2"),
        _uncertainty_marks_noise(ev),
        _hug_ladder(ev),
        _kept_sets_beat_chance(ev),
        _table_robust_beat_sprc(ev),
        _conesep_beats_table_robust(ev),
        _table_robust_no_loss_without_noise(ev),
    ]


def claims_metric(setting: Setting) -> str | None:
    """The recall column the claims compare (the tables' headline column)."""
    return headline_column(list(run_columns(setting).columns))


CLAIMS_TITLE = "Do the papers' claims hold here?"


def claims_intro(metric: str | None, selection: str = "") -> str:
    """The line above the claims table: what is compared, at which epochs, and how the numbers read."""
    recall = f"recall is {metric} (the tables' headline column)" if metric else "no recall in these results"
    return (f"Each claim checked on these results; {recall}, purity and AUROC as fractions (purity and AUROC at "
            "each run's last epoch). " + (f"{selection} " if selection else "") + "Numbers: the mean "
            "difference over seeds; its 95% t interval over seeds; its 95% paired bootstrap interval.")


def verdict_summary(claims: Sequence[Claim]) -> str:
    """How many claims got each verdict, e.g. ``Verdicts of 9 claims: holds 0, does not hold 5, ...``."""
    counts = {v: sum(c.verdict == v for c in claims) for v in VERDICTS}
    return f"Verdicts of {len(claims)} claims: " + ", ".join(f"{v} {n}" for v, n in counts.items()) + "."


def check_line(check: Check) -> str:
    """One check as text: ``label: numbers (verdict)``, the verdict naming any collapsed cell."""
    collapsed = f"; collapsed: {', '.join(check.collapsed)}" if check.collapsed else ""
    return f"{check.label}: {check.numbers} ({check.verdict}{collapsed})"

