"""Every claim that does not hold, traced to a measured cause (issue 79).

A claim's verdict against a paper's reading ("does not hold"; undecided is not a
disagreement) can come from how a method was ported, from its hyperparameters, from what its
kept set is worth, or from the setting itself. Each is probed on cells of the same results,
in this order, and the first probe that explains the verdict is the claim's cause. A probe
explains a claim only when it reaches every check that fails: a port's release cells or the
tuned picks at 50% and 80% say nothing of a check that fails at 0%, and the probe's line
names the checks it did not reach.

1. **port difference**: the claim checked again with every method it reads that has a
   ``<method>:release`` cell (the port on its release's readings, docs/parity.md) in that
   cell's place; it holds there: the readings carry the verdict (each single swap that is
   enough is named);
2. **hyperparameter**: the claim checked again on the tuned picks (each swept method's
   selected trial on every seed, :func:`~cirbench.report.analysis.rankings.tuned.tuned_setting`);
   it holds there: the defaults carry the verdict;
3. **kept set**: for a check of a method against the baseline whose decomposition was run
   (:mod:`~cirbench.report.analysis.rankings.kept_worth`): the baseline trained on the
   method's kept set is no better than the baseline (the kept set is worth nothing), or it is
   better and the method's other terms lose it;
4. **setting**: the calibration figure behind the claim's premise misses its target: the
   room to win (for recall; the perfect filter wins back less of the baseline's loss than the
   papers' methods do) or the small-loss premise (for purity and AUROC).

No cause is named without its cells: a probe whose cells were not run says so, and a claim
that no probe explains is "not traced". Every probe run is listed beside the cause, so the
causes ruled out are visible too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.loading.numbers import rate_label
from cirbench.report.analysis.loading.selection import rule_view
from cirbench.report.analysis.rankings.kept_worth import Split, kept_worth
from cirbench.report.analysis.rankings.tuned import picked_trials, picks_rerun, tuned_setting
from cirbench.report.analysis.statistics.bootstrap import N_RESAMPLES
from cirbench.report.analysis.statistics.significance import BETTER, DOES_NOT_HOLD, HOLDS, NOT_RUN, WORSE
from cirbench.report.analysis.verdicts.calibration import Check as Calibration
from cirbench.report.analysis.verdicts.calibration import ROOM_SHARE, calibration_checks, room_by_rate
from cirbench.report.analysis.verdicts.claim_files import ClaimSpec
from cirbench.report.analysis.verdicts.claims import Check, Claim, claims_on
from cirbench.results.metrics import format_number
from cirbench.results.roles import BASELINE, ROLES
from cirbench.results.selection import DEFAULT_RULE

PORT, HYPERPARAMETER, KEPT_SET, SETTING, NOT_TRACED = "port difference", "hyperparameter", "kept set", "setting", "not traced"
CAUSES: tuple[str, ...] = (PORT, HYPERPARAMETER, KEPT_SET, SETTING, NOT_TRACED)
RELEASE = ":release"
"""The label suffix of a port on its release's readings (a study's ``<method>:release`` grid)."""
TRACES_TITLE = "Why the claims that do not hold do not"
TRACES_INTRO = ("Each claim that does not hold, probed on cells of these results in order: the ports on their releases' "
                "readings, the tuned picks, what the kept set is worth (the decomposition), the setting's calibration; "
                "the first probe that explains the verdict (the claim holds under it, the decomposition locates the loss, "
                "or the setting misses its premise) is the cause.")
PREMISES = {"recall": "room to win", "purity": "small-loss premise", "AUROC": "small-loss premise"}
"""The calibration figure behind each kind of check: the setting's premise for it."""


@dataclass(frozen=True)
class Trace:
    """One claim that does not hold: its number in the report, its cause and the line that
    says it with its cells, and what each probe measured."""

    number: int
    claim: str
    cause: str
    line: str
    probes: tuple[str, ...]

    def text(self) -> str:
        """The trace as the report prints it: ``claim 3 (…): cause: line (also measured: …)``."""
        others = [p for p in self.probes if p != self.line]
        also = f" Also measured: {'; '.join(others)}." if others else ""
        return f"Claim {self.number} ({self.claim}): **{self.cause}**: {self.line}.{also}"


Verdict = Callable[[Setting, ClaimSpec], str]


def _named(spec: ClaimSpec, setting: Setting, names: dict[str, str]) -> ClaimSpec:
    """``spec`` with each method (a role filled in first) replaced by its entry in ``names``."""
    def name(label: str) -> str:
        for role in ROLES:
            label = label.replace(f"{{{role}}}", setting.role(role))
        return names.get(label, label)

    checks = tuple(replace(c, methods=tuple(map(name, c.methods)), against=tuple(map(name, c.against))) for c in spec.checks)
    return replace(spec, checks=checks)


def _cells(names: Sequence[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _unreached(claim: Claim, reached: Callable[[str, float], bool]) -> str:
    """The failing checks of ``claim`` that read a cell (method, rate) a probe has no
    counterpart of, as a clause for the probe's line (``""`` when it reaches them all)."""
    missed = [c.label for c in _failing(claim) if not all(reached(t.method, t.rate) for t in c.terms)]
    return f"; it does not reach the failing check{'s' * (len(missed) > 1)} {', '.join(missed)}" if missed else ""


def port_probe(setting: Setting, claim: Claim, spec: ClaimSpec, verdict: Verdict) -> tuple[bool, str]:
    """(whether the release readings explain the claim, the probe's line): the claim checked
    with each ``<method>:release`` label in its method's place, at the rates that cell ran at."""
    labels = set(setting.runs.method)
    swaps = {m: f"{m}{RELEASE}" for m in claim.methods if f"{m}{RELEASE}" in labels}
    if not swaps:
        return False, "release readings: no `<method>:release` cell of its methods"
    ran = {(m, float(r)) for m, r in zip(setting.runs.method, setting.runs.noise_rate)}
    unreached = _unreached(claim, lambda m, r: m not in swaps or (swaps[m], float(r)) in ran)
    together = verdict(setting, _named(spec, setting, swaps))
    if together != HOLDS or unreached:
        return False, f"on the release readings ({_cells(swaps.values())}) it {_verb(together)}{unreached}"
    alone = [v for m, v in swaps.items() if verdict(setting, _named(spec, setting, {m: v})) == HOLDS]
    return True, (f"with {_cells(alone or swaps.values())} (the port{'s' * (len(alone or swaps) > 1)} on the release's "
                  f"readings) in place of the default{'s' * (len(alone or swaps) > 1)}, the claim holds")


def hyperparameter_probe(setting: Setting, view: Setting, claim: Claim, spec: ClaimSpec, verdict: Verdict) -> tuple[bool, str]:
    """(whether the tuned picks explain the claim, the probe's line): the picks read on
    ``setting`` (every epoch, for the held-out selection), the claim on ``view`` (the
    claims' epoch rule) restricted to them."""
    picks = picked_trials(setting)
    if picks.empty or setting.role(BASELINE) not in set(picks.method) or not picks_rerun(setting, picks):
        return False, "tuned picks: no sweep whose picks ran on more seeds"
    tuned = verdict(tuned_setting(view, picks), spec)
    changed = [f"`{p.method}` at {rate_label(float(p.noise_rate))}: {p.changed}" for p in picks.itertuples(index=False)
               if p.trial and p.method in _methods(spec, setting)]
    what = f" ({'; '.join(changed)})" if changed else " (every pick of its methods is the defaults)"
    picked = {(m, float(r)) for m, r in zip(picks.method, picks.noise_rate)}
    rates = {r for _, r in picked}
    unreached = _unreached(claim, lambda m, r: (m, float(r)) in picked or (m in setting.oracles and float(r) in rates))
    if tuned == HOLDS and not unreached:
        return True, f"on the tuned picks{what} the claim holds"
    return False, f"on the tuned picks{what} it {_verb(tuned)}{unreached}"


def _methods(spec: ClaimSpec, setting: Setting) -> set[str]:
    return {m for c in _named(spec, setting, {}).checks for m in (*c.methods, *c.against)}


def _verb(verdict: str) -> str:
    return {DOES_NOT_HOLD: "still does not hold", HOLDS: "holds", NOT_RUN: "is not run (a cell it reads is missing)"}.get(
        verdict, f"is {verdict}")


def kept_set_probe(claim: Claim, splits: Sequence[Split], baseline: str,
                   keeps_no_set: frozenset[str] = frozenset()) -> tuple[bool, str] | None:
    """The decomposition of every failing check of a method against the baseline; it explains
    the claim when each of them is explained (the kept set is worth nothing, or the other terms
    lose what it is worth) and no other check fails; None where no failing check compares a
    method with the baseline. ``keeps_no_set``: the methods that keep no set (nothing to replay)."""
    parts, missing, others, explained = [], [], [], True
    for check in _failing(claim):
        plus = [t.method for t in check.terms if t.weight > 0]
        minus = [t.method for t in check.terms if t.weight < 0]
        if len(plus) != 1 or minus != [baseline]:
            others.append(check.label)
            continue
        rate = check.terms[0].rate
        split = next((s for s in splits if s.method == plus[0] and abs(s.rate - rate) < 1e-9), None)
        if split is None:
            missing.append(f"`{plus[0]}` at {rate_label(rate)}" + (" (it keeps no set)" if plus[0] in keeps_no_set else
                                                                  " (no noise to filter)" if rate == 0 else ""))
            continue
        line, why = _decomposed(split, rate, baseline)
        parts.append(f"{line}: {why}" if why else line)
        explained = explained and bool(why)
    if len(others) == len(_failing(claim)):
        return None
    if missing:
        parts.append(f"kept set: no replay of the kept set of {', '.join(dict.fromkeys(missing))}")
    if others and explained and not missing:
        parts.append(f"not decomposed (not against `{baseline}`): {', '.join(others)}")
    return explained and not missing and not others, "; ".join(parts)


def _decomposed(split: Split, rate: float, baseline: str) -> tuple[str, str]:
    """One decomposition's line and what it explains (``""`` where it explains nothing)."""
    line = (f"`{split.method}` at {rate_label(rate)} keeps a set {format_number(split.purity, 1)}% clean; trained on it, "
            f"`{baseline}` moves {_points(split.filter)} ({split.filter.answer or 'no answer'}), its other terms "
            f"{_points(split.other)} ({split.other.answer or 'no answer'})")
    if split.filter.answer != BETTER:
        return line, "its kept set is worth nothing to the baseline"
    if split.other.answer == WORSE:
        return line, "the kept set helps and the method's other terms lose it"
    return line, ""


def _points(check: Check) -> str:
    mean = check.comparison.mean if check.comparison is not None else float("nan")
    return f"{format_number(100 * mean, 1, sign=True)} points" if mean == mean else "n/a"


def _failing(claim: Claim) -> list[Check]:
    return [c for c in claim.checks if c.verdict == DOES_NOT_HOLD and c.terms]


def setting_probe(claim: Claim, calibration: Sequence[Calibration],
                  room: dict[float, tuple[bool | None, float]]) -> tuple[bool, str]:
    """The setting's premise behind the claim's failing checks, at the noise rates they read:
    the room to win at each rate for recall (``room``: met or not, and the share the perfect
    filter wins back, :func:`~cirbench.report.analysis.verdicts.calibration.room_by_rate`), the
    small-loss premise for purity and AUROC (from ``calibration``); a check at 0% has none. It
    explains the claim when every failing check reads a rate whose premise is missed."""
    failing = _failing(claim)
    noisy = [c for c in failing if any(t.rate > 0 for t in c.terms)]
    if not noisy:
        return False, "setting: its failing checks read 0% noise, where no premise of the setting applies"
    parts = [_room_words(rate, *room.get(rate, (None, float("nan"))))
             for rate in sorted({t.rate for c in noisy if c.unit == "recall" for t in c.terms if t.rate > 0})]
    premise = next((c for c in calibration if c.name == PREMISES["purity"]), None)
    if any(c.unit in PREMISES and c.unit != "recall" for c in noisy):
        parts.append(f"{PREMISES['purity']} not measured" if premise is None or premise.passed is None else
                     f"{premise.name} {format_number(premise.value)} (target {premise.target}): "
                     f"{'missed' if premise.passed is False else 'met'}")

    def missed(check: Check) -> bool:
        if check.unit == "recall":
            return any(room.get(t.rate, (None, 0.0))[0] is False for t in check.terms if t.rate > 0)
        return check.unit in PREMISES and premise is not None and premise.passed is False

    explained = [missed(c) for c in failing]
    if any(explained) and not all(explained):
        parts.append(f"it does not reach the failing check{'s' * (explained.count(False) > 1)} "
                     f"{', '.join(c.label for c, e in zip(failing, explained) if not e)}")
    return all(explained), ("the setting misses its premise: " if all(explained) else "setting: ") + "; ".join(parts)


def _room_words(rate: float, met: bool | None, share: float) -> str:
    """The room to win at ``rate`` as the setting probe prints it."""
    if met is None:
        return f"room to win at {rate_label(rate)} not measured"
    target = f"{format_number(100 * ROOM_SHARE[rate], 0)}%" if rate in ROOM_SHARE else "?"
    return (f"room to win at {rate_label(rate)}: the perfect filter wins back {format_number(100 * share, 0)}% of "
            f"the baseline's loss (calibration target >= {target}): {'met' if met else 'missed'}")


def trace_claims(setting: Setting, claims: Sequence[Claim], specs: Sequence[ClaimSpec],
                 n_resamples: int = N_RESAMPLES, seed: int = 0, rule: str = DEFAULT_RULE,
                 splits: Sequence[Split] | None = None) -> list[Trace]:
    """A :class:`Trace` for every claim of ``claims`` (checked from ``specs``, in order, as
    :func:`~cirbench.report.analysis.verdicts.claims.paper_claims` reads ``setting``) that does not hold.
    ``splits``: the kept-set splits of the setting's :func:`kept_worth` where the caller has
    computed them already (empty for a setting without any); computed here when ``None``."""
    failing = [(n, c, s) for n, (c, s) in enumerate(zip(claims, specs), 1) if c.verdict == DOES_NOT_HOLD]
    if not failing:
        return []
    view = rule_view(setting, rule).setting

    def verdict(where: Setting, spec: ClaimSpec) -> str:
        return claims_on(where, n_resamples, seed, specs=[spec])[0].verdict

    if splits is None:
        worth = kept_worth(setting, n_resamples, seed, rule)
        splits = worth.splits if worth else []
    calibration, room = calibration_checks(setting), room_by_rate(setting)
    runs = setting.runs
    keeps_no_set = frozenset(runs.loc[runs.partitions.eq(False), "method"]) if "partitions" in runs else frozenset()
    traces = []
    for number, claim, spec in failing:
        probes: list[tuple[str, tuple[bool, str] | None]] = [
            (PORT, port_probe(view, claim, spec, verdict)),
            (HYPERPARAMETER, hyperparameter_probe(setting, view, claim, spec, verdict)),
            (KEPT_SET, kept_set_probe(claim, splits, setting.role(BASELINE), keeps_no_set)),
            (SETTING, setting_probe(claim, calibration, room)),
        ]
        ran = [(cause, found) for cause, found in probes if found is not None]
        cause, line = next(((c, f[1]) for c, f in ran if f[0]), (NOT_TRACED, "no probe explains the verdict"))
        traces.append(Trace(number, claim.short or claim.text, cause, line, tuple(f[1] for _, f in ran)))
    return traces
