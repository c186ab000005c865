"""The report's "Do the papers' claims hold here?": each claim of the claims files
(:mod:`cirbench.report.analysis.verdicts.claim_files`: the shipped papers', and a study's or a plugin's own)
checked on a setting's results with the paired comparisons of :mod:`cirbench.report.analysis.statistics.significance`.
The methods a claim reads are named in its file, never here; the baseline is found by role.

A claim is one or more checks; each check is a comparison (or, for the kept set against
chance, a hypergeometric test per seed) with its own verdict, and the claim's verdict
combines them (:func:`~cirbench.report.analysis.statistics.significance.combine_verdicts`). A check whose cells
(method, variant, noise rate or seeds) are not in the results is "not run", never an error.
Recall is the setting's headline column, as the report's tables pick it
(:func:`~cirbench.report.analysis.loading.numbers.headline_column`), as a fraction.

Each difference gets one of four answers (better, worse, equivalent within the claim's
``margin``, undecided) and the check a verdict from it
(:func:`~cirbench.report.analysis.statistics.significance.verdict`): "X beats Y" does not hold when X is
equivalent to or worse than Y; "X loses no more than a point" keeps its threshold rule.

A check that reads a cell flagged collapsed on any seed (:mod:`cirbench.results.collapse`)
is undecided whatever its intervals say, and names the cell: a collapse is a defect to
explain, never a robustness result (its numbers are still shown).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from cirbench.report.analysis.statistics.bootstrap import N_RESAMPLES, QueryBootstrap, SampleBootstrap, rank_terms
from cirbench.report.analysis.verdicts.claim_files import ALL, METRICS, NOISY, CheckSpec, ClaimSpec, all_claims
from cirbench.report.analysis.loading.load import Setting, final_epoch
from cirbench.report.analysis.loading.numbers import format_number, headline_column, rate_label, run_columns
from cirbench.report.analysis.loading.selection import describe_rule, rule_view
from cirbench.report.analysis.statistics.significance import (
    EQUIVALENT, NOT_RUN, UNDECIDED, VERDICTS, Comparison, KeptSetTest, Term, cell_runs, combine_verdicts, difference,
    kept_set_test, kept_set_verdict, paired_comparison,
)
from cirbench.results.roles import ROLES
from cirbench.results.selection import DEFAULT_RULE, RULES
from cirbench.results.store import MAIN_SCORE

VERDICT_RULE = (
    "Verdict rule: each difference has one of four answers from its 95% t interval over seeds (paired by seed) and its "
    "95% paired bootstrap interval (validation queries, or training samples for purity and AUROC): better (both above 0), "
    "worse (both below 0), equivalent (neither, and both inside plus or minus the claim's margin, declared in its claims "
    "file before any result is read: 1 point unless it says otherwise; stricter than two one-sided tests at 90%) or "
    "undecided (otherwise, or with fewer than two seeds). 'X beats Y' holds when X is better, does not hold when X is "
    "worse or equivalent, and is undecided otherwise; 'loses no more than a point' holds when both intervals lie above "
    "-1 point and does not hold when both lie below it. Smallest decidable: the half-width of the wider of the two "
    "intervals, the least distance from 0 at which the mean would be better or worse at this spread. A kept set is "
    "cleaner than chance on a seed when the hypergeometric p < 0.01. A check that reads a cell flagged collapsed (see "
    "Collapsed cells) is undecided whatever its intervals. A claim holds if all its checks hold, does not hold if any "
    "does not, and is not run if none could run."
)


@dataclass
class Check:
    """One comparison behind a claim: what was compared, its numbers and its verdict."""

    label: str
    verdict: str
    numbers: str
    collapsed: tuple[str, ...] = ()
    """The cells read by the check that collapsed, e.g. ``m at 50% (seed 0)``."""
    comparison: Comparison | None = None
    """The paired comparison behind the numbers (its mean, intervals and threshold), for the
    forest plot; None for a check that is not a difference (the kept set against chance)."""
    unit: str = ""
    """What is compared: ``recall``, ``purity`` or ``AUROC`` (empty for a check not run)."""
    kept_sets: tuple[KeptSetTest, ...] = ()
    """The kept-set tests of a check against chance, one per seed (empty for a comparison)."""
    terms: tuple[Term, ...] = ()
    """The cells it reads (method, noise rate, weight); empty for a check not run."""

    @property
    def answer(self) -> str:
        """The difference's answer (better, worse, equivalent, undecided; undecided on a
        collapsed cell); ``""`` for a check that is not a difference or was not run."""
        if self.comparison is None or self.verdict == NOT_RUN:
            return ""
        return UNDECIDED if self.collapsed else self.comparison.answer

    @property
    def half_width(self) -> float | None:
        """The smallest decidable difference (:attr:`~cirbench.report.analysis.statistics.significance.Comparison.half_width`)."""
        return None if self.comparison is None else self.comparison.half_width


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
    methods: tuple[str, ...] = ()
    """The methods (labels) its checks read, roles filled in."""
    margin: float | None = None
    """The equivalence margin its claims file declares (fractions), None for a claim built by hand."""

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
    """The cells of ``terms`` flagged collapsed on any seed among ``runs``, e.g. ``m at 50% (seeds 0, 2)``."""
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
    """``check`` with the cells it reads, undecided and naming them when one collapsed (unless not run)."""
    check = replace(check, terms=tuple(terms))
    cells = _collapsed_cells(runs, terms)
    if not cells or check.verdict == NOT_RUN:
        return check
    return replace(check, verdict=UNDECIDED, collapsed=cells)


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

    def name(self, label: str) -> str:
        """``label``, or the method of the role it stands for (``{baseline}``)."""
        return self.fill(label)

    def fill(self, text: str) -> str:
        """``text`` with each ``{role}`` replaced by the setting's method of that role."""
        for role in ROLES:
            if f"{{{role}}}" in text:
                text = text.replace(f"{{{role}}}", self.setting.role(role))
        return text

    def rates(self, *methods: str) -> list[float]:
        """The noise rates at which every one of ``methods`` has a completed run."""
        sets = [set(self.runs.loc[self.runs.method == m, "noise_rate"].astype(float)) for m in methods]
        return sorted(set.intersection(*sets)) if sets else []

    def recall_check(self, label: str, terms: Sequence[Term], threshold: float = 0.0, margin: float | None = None) -> Check:
        """A paired comparison of the headline recall, bootstrapped over validation queries,
        equivalent within ``margin`` (None: never)."""
        if self.column is None:
            return Check(label, NOT_RUN, "not run: no recall in the results")

        def resample(run_ids: list[str]) -> np.ndarray | None:
            return self.queries.resample(run_ids) if self.queries is not None else None

        try:
            result = paired_comparison(label, terms, self.runs, self.recall, resample, threshold=threshold, margin=margin)
        except ValueError as exc:  # ranks that do not line up, or a headline not recomputable from ranks
            return Check(label, UNDECIDED, f"cannot compare: {exc}")
        return _guarded(Check(label, result.verdict, result.numbers(), comparison=result, unit="recall"), self.runs, terms)

    def sample_check(self, label: str, terms: Sequence[Term], metric: str, score_name: str = MAIN_SCORE,
                     noise_type: str | None = None, offset: float = 0.0, margin: float | None = None) -> Check:
        """A paired comparison of purity or AUROC, bootstrapped over training samples,
        equivalent within ``margin`` (None: never)."""
        scores = self.setting.named_scores(score_name)
        ids = [r for term in terms for r in cell_runs(self.runs, term).values()]
        if self.samples is None or scores.empty:
            return Check(label, NOT_RUN, f"not run: no per-sample {score_name} in the results")
        try:
            point = pd.Series({r: self._sample_point(scores, r, metric, noise_type) for r in ids}, dtype=float)
            result = paired_comparison(
                label, terms, self.runs, point.dropna(),
                lambda run_ids: self.samples.values(scores, run_ids, metric, noise_type),
                offset=offset, bootstrap_over="training samples", margin=margin,
            )
        except ValueError as exc:  # per-sample rows that do not line up: say so, keep the report
            return Check(label, UNDECIDED, f"cannot compare: {exc}")
        unit = "purity" if metric == "purity" else "AUROC"
        return _guarded(Check(label, result.verdict, result.numbers(), comparison=result, unit=unit), self.runs, terms)

    def _sample_point(self, scores: pd.DataFrame, run_id: str, metric: str, noise_type: str | None) -> float:
        values = self.samples.values(scores, [run_id], metric, noise_type, resampled=False)
        return math.nan if values is None else float(values[0, 0])


def recall_judge(setting: Setting, n_resamples: int = N_RESAMPLES, seed: int = 0,
                 margin: float | None = None) -> Callable[[str, Sequence[Term]], Check]:
    """The claims' comparison of the headline recall on ``setting`` as given, its query
    resamples shared by every call: ``judge(label, terms)`` is the :class:`Check` a claim
    makes of ``terms > 0`` (collapsed cells undecided), with the same verdicts as the
    claims for the same ``n_resamples``, ``seed`` and ``margin``. With ``margin`` None no
    difference is equivalent (a check's verdict is then better: holds, worse: does not hold,
    else undecided); its :attr:`Check.half_width` is the same either way."""
    ev = _Evidence(setting, n_resamples, seed)
    return lambda label, terms: ev.recall_check(label, terms, margin=margin)


def threshold_words(threshold: float) -> str:
    """A check label's threshold in percentage points (the claims files write fractions):
    ``-0.01`` -> `` > -1 point``; ``""`` for 0 (beats)."""
    if not threshold:
        return ""
    value = 100 * threshold
    return f" > {value:g} point{'s' * (abs(value) != 1)}"


def _rate_checks(ev: _Evidence, winner: str, loser: str, margin: float, prefix: str = "", threshold: float = 0.0,
                 noisy: bool = False) -> list[Check]:
    """``winner - loser > threshold`` at every noise rate (above 0% if ``noisy``) where both
    were run (one check each), equivalent within ``margin``."""
    rates = [r for r in ev.rates(winner, loser) if r > 0 or not noisy]
    if not rates:
        which = "noisy" if noisy else "noise"
        return [Check(f"{prefix}{winner} - {loser}", NOT_RUN, f"not run: no {which} rate with both {winner} and {loser}")]
    suffix = threshold_words(threshold)
    return [ev.recall_check(f"{prefix}{winner} - {loser} at {rate_label(rate)}{suffix}", difference(winner, loser, rate),
                            threshold=threshold, margin=margin) for rate in rates]


def _recall_checks(ev: _Evidence, spec: CheckSpec, method: str, other: str, margin: float) -> list[Check]:
    prefix = f"{spec.label}: " if spec.label else ""
    if isinstance(spec.rates, str):
        return _rate_checks(ev, method, other, margin, prefix, spec.threshold, noisy=spec.rates == NOISY)
    suffix = threshold_words(spec.threshold)
    checks = [ev.recall_check(f"{prefix}{method} - {other} at {rate_label(rate)}{suffix}", difference(method, other, rate),
                              threshold=spec.threshold, margin=margin) for rate in spec.rates]
    if spec.widening:
        low, high = spec.rates
        widening = [Term(method, high), Term(other, high, -1.0), Term(method, low, -1.0), Term(other, low)]
        checks.append(ev.recall_check(f"{prefix}{method}: gap at {rate_label(high)} - gap at {rate_label(low)}", widening,
                                      margin=margin))
    return checks


def _sample_checks(ev: _Evidence, spec: CheckSpec, method: str, other: str | None, margin: float) -> list[Check]:
    metric = METRICS[spec.metric]
    if isinstance(spec.rates, str):
        rates = [r for r in (ev.rates(method, other) if other else ev.rates(method)) if r > 0 or spec.rates == ALL]
        if not rates and other:
            which = "noisy" if spec.rates == NOISY else "noise"
            return [Check(f"{spec.label or metric}: {method} - {other}", NOT_RUN,
                          f"not run: no {which} rate with both {method} and {other}")]
        if not rates:
            return [Check(f"{method} {metric}", NOT_RUN, f"not run: no {method} cell{' with noise' * (spec.rates == NOISY)}")]
    else:
        rates = list(spec.rates)
    offset = f" {'-' if spec.offset < 0 else '+'} {100 * abs(spec.offset):g}" if spec.offset else ""
    checks = []
    for rate in rates:
        terms = difference(method, other, rate) if other else [Term(method, rate)]
        for score, wording in spec.scores or ((MAIN_SCORE, ""),):
            if other:
                label = f"{spec.label or metric}: {method} - {other} at {rate_label(rate)}"
            else:
                label = f"{wording or spec.label or method} {metric}{offset} at {rate_label(rate)}"
            checks.append(ev.sample_check(label, terms, spec.metric, score_name=score, noise_type=spec.noise_type,
                                          offset=spec.offset, margin=margin))
    return checks


def _checks(ev: _Evidence, spec: CheckSpec, margin: float) -> list[Check]:
    """The checks of one declared check, methods in order, then ``against``, then rates, each
    difference equivalent within its claim's ``margin``."""
    methods = [ev.name(m) for m in spec.methods]
    if spec.kind == "ladder":
        prefix = f"{spec.label}: " if spec.label else ""
        return [c for before, after in zip(methods, methods[1:])
                for c in _rate_checks(ev, after, before, margin, prefix, spec.threshold)]
    if spec.kind == "kept_set":
        return [kept_set_check(ev.setting, method, rate) for method in methods for rate in spec.rates]
    against = [ev.name(m) for m in spec.against]
    if spec.kind == "recall":
        return [c for m in methods for other in against for c in _recall_checks(ev, spec, m, other, margin)]
    return [c for m in methods for other in (against or [None]) for c in _sample_checks(ev, spec, m, other, margin)]


def check_claim(ev: _Evidence, spec: ClaimSpec) -> Claim:
    """One declared claim checked on the evidence (roles in its text filled in)."""
    methods = tuple(dict.fromkeys(ev.name(m) for check in spec.checks for m in (*check.methods, *check.against)))
    return Claim(ev.fill(spec.text), spec.source, [c for check in spec.checks for c in _checks(ev, check, spec.margin)],
                 short=ev.fill(spec.short), methods=methods, margin=spec.margin)


def kept_set_check(setting: Setting, method: str, rate: float) -> Check:
    """Is ``method``'s final kept set at ``rate`` cleaner than a random subset of the same
    size on every seed (hypergeometric p < 0.01 each)? Fewer than two seeds: undecided."""
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
        parts.append(f"seed {row.seed}: {format_number(100 * test.purity, 1)}% clean vs {format_number(100 * test.chance, 1)}% by chance "
                     f"({p_value(test.p_cleaner)})")
    if len(tests) < 2:  # as for the intervals: one seed is never a verdict
        check = Check(label, UNDECIDED, "; ".join(parts + ["one seed"]), unit="purity", kept_sets=tuple(tests))
    else:
        check = Check(label, combine_verdicts(kept_set_verdict(t) for t in tests), "; ".join(parts), unit="purity",
                      kept_sets=tuple(tests))
    return _guarded(check, setting.runs, [Term(method, rate)])


P_FLOOR = 1e-4
"""The smallest p-value printed as a number; below it the report says ``p < 1e-4``."""


def p_value(p: float) -> str:
    """A p-value as the report prints it: ``p=0.003``, or ``p < 1e-4`` below :data:`P_FLOOR`."""
    return "p < 1e-4" if p < P_FLOOR else f"p={format_number(p, digits=1)}"


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


def claims_on(setting: Setting, n_resamples: int = N_RESAMPLES, seed: int = 0,
              specs: Sequence[ClaimSpec] | None = None) -> list[Claim]:
    """Every claim checked on ``setting`` as given (its last epoch of each run): ``specs``,
    or those of every claims file that applies to it (:func:`setting_claims`)."""
    ev = _Evidence(setting, n_resamples, seed)
    return [check_claim(ev, spec) for spec in (setting_claims(setting) if specs is None else specs)]


def setting_claims(setting: Setting) -> list[ClaimSpec]:
    """The claims of every claims file that applies to ``setting``
    (:func:`~cirbench.report.analysis.verdicts.claim_files.claim_files`: the shipped papers', its results
    folder's, its plugins', ``CIRBENCH_CLAIMS``'s)."""
    sources = setting.runs.method_source.dropna().astype(str) if "method_source" in setting.runs.columns else ()
    return all_claims(setting.root, sources)


def claims_metric(setting: Setting) -> str | None:
    """The recall column the claims compare (the tables' headline column)."""
    return headline_column(list(run_columns(setting).columns))


CLAIMS_TITLE = "Do the papers' claims hold here?"


def claims_intro(metric: str | None, selection: str = "") -> str:
    """The line above the claims table: what is compared, at which epochs, and how the numbers read."""
    recall = f"recall is {metric} (the tables' headline column)" if metric else "no recall in these results"
    return (f"Each claim checked on these results; {recall} on the validation queries, purity and AUROC (x100, so "
            "chance is 50) of the training samples, all in percent (purity and AUROC at each run's last epoch, where the "
            "kept set is final). " + (f"{selection} " if selection else "") + "Numbers: the mean difference over seeds "
            "in percentage points; its 95% t interval over seeds; its 95% paired bootstrap interval; the smallest "
            "difference they can decide (the half-width of the wider interval); its answer.")


def verdict_summary(claims: Sequence[Claim]) -> str:
    """How many claims got each verdict, e.g. ``Verdicts of 9 claims: holds 0, does not hold 5, ...``."""
    counts = {v: sum(c.verdict == v for c in claims) for v in VERDICTS}
    return f"Verdicts of {len(claims)} claims: " + ", ".join(f"{v} {n}" for v, n in counts.items()) + "."


def none_run_line(claims: Sequence[Claim], setting: Setting) -> str:
    """The one line that stands for the claims table when no claim could be checked on
    ``setting`` (the methods they are about are not in its grid); ``""`` when one could."""
    if not claims or any(c.verdict != NOT_RUN for c in claims):
        return ""
    missing = sorted({m.split(":")[0] for c in claims for m in c.methods} - set(setting.runs.method))
    about = f": the methods they compare ({', '.join(missing)}) have no cells in these results" if missing else ""
    return f"None of the {len(claims)} claims could be checked here{about}."


def answer_text(check: Check) -> str:
    """A difference's answer as the claims table prints it, e.g. ``answer: better``,
    ``answer: equivalent within ±1 point``; ``""`` for a check that is not a difference."""
    if not check.answer:
        return ""
    margin = check.comparison.margin
    if check.answer == EQUIVALENT and margin is not None:
        points = format_number(100 * margin, digits=6)
        return f"answer: {EQUIVALENT} within ±{points} point{'s' * (points != '1')}"
    return f"answer: {check.answer}"


def check_line(check: Check) -> str:
    """One check as text: ``label: numbers; answer (verdict)``, the numbers ending in the
    smallest decidable difference, the verdict naming any collapsed cell."""
    collapsed = f"; collapsed: {', '.join(check.collapsed)}" if check.collapsed else ""
    answer = f"; {answer_text(check)}" if answer_text(check) else ""
    return f"{check.label}: {check.numbers}{answer} ({check.verdict}{collapsed})"

