"""Is a difference between methods real? Paired comparisons over seeds and a paired
bootstrap, the verdict rule of the report's claims, and the kept-set test against chance.

A comparison is a contrast of cells (method, noise rate), e.g. ``a - baseline`` at 50%
noise, or ``(a - baseline at 80%) - (a - baseline at 50%)``: its value on one seed is the
weighted sum of the cells' metrics on that seed (same seed = same noisy subset, so the
cells are paired by seed), plus an optional offset (a comparison with a constant).

Two intervals are reported, each two-sided at 95%:

- the **seed interval**: a t interval (``scipy.stats.t``) of the mean of the per-seed
  values; none with one seed;
- the **bootstrap interval**: the percentile interval of the mean over seeds recomputed on
  resampled validation queries (or training samples), the same resample for every cell
  and seed (:mod:`cirbench.report.analysis.statistics.bootstrap`).

**Four answers** (:func:`answer`): a difference is *better* when both intervals lie
entirely above 0, *worse* when both lie entirely below 0, *equivalent* when neither and both
lie entirely inside plus or minus a margin declared before any result is read (per claim in
its claims file; :data:`DEFAULT_MARGIN`, 1 headline point, by default), and *undecided*
otherwise: when the intervals disagree or straddle 0 and reach past the margin, when there
are fewer than two seeds (no seed interval, so mean ± std alone is never an answer), or when
the stored ranks needed for the bootstrap are missing. Equivalence asks both 95% intervals
to lie inside the margin: stricter than the usual two one-sided tests, which ask it of a
90% interval. A difference both one-sided and inside the margin is better (or worse): it is
real, if small. Without a margin (``margin=None``) no difference is equivalent.

**Verdict rule** (:func:`verdict`): a claim "A beats B" (threshold 0) *holds* when A - B is
better, *does not hold* when it is worse or equivalent, and is *undecided* otherwise. A
non-inferiority claim ("A loses no more than a point", threshold -0.01) keeps its threshold
rule: it holds when both intervals lie entirely above the threshold, does not hold when both
lie entirely below it, and is undecided otherwise. A claim made of several comparisons
(:func:`combine_verdicts`) holds if all hold, does not hold if any does not hold, is "not
run" if none could be run, and is undecided otherwise.

**The smallest decidable difference** (:attr:`Comparison.half_width`): the half-width of the
wider of the two intervals, half its length (the bootstrap's percentile interval need not be
symmetric). A difference whose mean lies further from 0 than it would be better or worse at
this spread; one that is equivalent needs it below the margin less the mean's distance from 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from cirbench.report.analysis.loading.numbers import format_number, rate_label
from cirbench.results.chance import KEPT_SET_ALPHA, KeptSetTest, kept_set_test  # noqa: F401  (re-exported)

HOLDS, DOES_NOT_HOLD, UNDECIDED, NOT_RUN = "holds", "does not hold", "undecided", "not run"
VERDICTS: tuple[str, ...] = (HOLDS, DOES_NOT_HOLD, UNDECIDED, NOT_RUN)
BETTER, WORSE, EQUIVALENT = "better", "worse", "equivalent"
ANSWERS: tuple[str, ...] = (BETTER, WORSE, EQUIVALENT, UNDECIDED)
"""What a difference is, whatever the claim made of it (see the module docstring)."""
LEVEL = 0.95
NON_INFERIORITY = -0.01
"""The threshold of "loses no more than a point" (metrics are fractions; the report prints it as -1 point)."""
DEFAULT_MARGIN = 0.01
"""The equivalence margin of a claim that declares none: 1 headline point (metrics are
fractions), about the gaps the papers report between robust methods from one run each
(0.5-1.5 points, ConeSep Tables 1-2): a smaller difference is none worth claiming here."""

Interval = tuple[float, float]
Resampler = Callable[[list[str]], "np.ndarray | None"]
"""Run ids -> (n_resamples, runs) of the metric on every resample, or None when unavailable."""


@dataclass(frozen=True)
class Term:
    """One cell of a contrast: ``weight`` x the metric of ``method`` at noise ``rate``."""

    method: str
    rate: float
    weight: float = 1.0


def difference(a: str, b: str, rate: float) -> list[Term]:
    """The contrast ``a - b`` at one noise rate."""
    return [Term(a, rate, 1.0), Term(b, rate, -1.0)]


@dataclass
class Comparison:
    """The outcome of one paired comparison (see the module docstring)."""

    label: str
    threshold: float
    seeds: list[int] = field(default_factory=list)
    per_seed: list[float] = field(default_factory=list)
    mean: float = math.nan
    seed_interval: Interval | None = None
    bootstrap_interval: Interval | None = None
    verdict: str = NOT_RUN
    note: str = ""
    bootstrap_over: str = "queries"
    margin: float | None = None
    answer: str = UNDECIDED
    """:data:`BETTER`, :data:`WORSE`, :data:`EQUIVALENT` (within ``margin``) or :data:`UNDECIDED`."""

    @property
    def half_width(self) -> float | None:
        """The smallest decidable difference: the half-width of the wider of the two
        intervals (half its length); None when either is missing."""
        if self.seed_interval is None or self.bootstrap_interval is None:
            return None
        return max(half_width(self.seed_interval), half_width(self.bootstrap_interval))

    def numbers(self) -> str:
        """The estimate, its intervals and the smallest decidable difference in one line, in
        percentage points (the values are fractions), e.g. ``+5.2 points; seeds 0,1,2:
        [+3.1, +7.0]; queries: [+4.1, +6.3]; smallest decidable ±2.0``."""
        if self.verdict == NOT_RUN:
            return self.note
        parts = [f"{to_points(self.mean)} points"]
        seeds = ",".join(str(s) for s in self.seeds)
        parts.append(f"seeds {seeds}: " + (_interval(self.seed_interval) if self.seed_interval else "no interval (one seed)"))
        parts.append(f"{self.bootstrap_over}: " + (_interval(self.bootstrap_interval) if self.bootstrap_interval else "-"))
        parts.append(f"smallest decidable {half_width_text(self.half_width)}")
        return "; ".join(parts) + (f" ({self.note})" if self.note else "")


def half_width(interval: Interval) -> float:
    """Half the length of ``interval``."""
    return (interval[1] - interval[0]) / 2.0


def half_width_text(value: float | None) -> str:
    """The smallest decidable difference in points, e.g. ``±2.0`` (``-`` without one)."""
    if value is None or not math.isfinite(value):
        return "-"
    return "±" + to_points(value)[1:]


def to_points(value: float) -> str:
    """A difference of fractions in signed percentage points: ``0.0523`` -> ``+5.2``; two decimals below a tenth of a point."""
    points = 100 * value
    return format_number(points, 2 if 0 < abs(points) < 0.1 else 1, sign=True)


def _interval(interval: Interval) -> str:
    return f"[{to_points(interval[0])}, {to_points(interval[1])}]"


def seed_interval(values: Sequence[float], level: float = LEVEL) -> Interval | None:
    """The two-sided t interval of the mean of ``values`` (one per seed); None with fewer
    than two. Identical values give the degenerate interval at their mean."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2 or not np.isfinite(x).all():
        return None
    mean, sem = float(x.mean()), float(stats.sem(x))
    if sem == 0.0:
        return mean, mean
    low, high = stats.t.interval(level, df=len(x) - 1, loc=mean, scale=sem)
    return float(low), float(high)


def percentile_interval(samples: np.ndarray, level: float = LEVEL) -> Interval | None:
    """The two-sided percentile interval of bootstrap ``samples`` (NaN resamples dropped)."""
    x = np.asarray(samples, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return None
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(x, [tail, 100.0 - tail])
    return float(low), float(high)


def _side(seed: Interval | None, bootstrap: Interval | None, threshold: float) -> str:
    """:data:`BETTER` when both intervals lie entirely above ``threshold``, :data:`WORSE`
    when both lie entirely below, :data:`UNDECIDED` otherwise (including a missing interval)."""
    if seed is None or bootstrap is None:
        return UNDECIDED
    if seed[0] > threshold and bootstrap[0] > threshold:
        return BETTER
    if seed[1] < threshold and bootstrap[1] < threshold:
        return WORSE
    return UNDECIDED


def answer(seed: Interval | None, bootstrap: Interval | None, margin: float | None = DEFAULT_MARGIN) -> str:
    """What a difference is: :data:`BETTER` or :data:`WORSE` when both intervals lie on one
    side of 0, else :data:`EQUIVALENT` when both lie entirely inside ``[-margin, +margin]``
    (never with ``margin`` None), else :data:`UNDECIDED` (a missing interval included)."""
    side = _side(seed, bootstrap, 0.0)
    if side != UNDECIDED or margin is None or seed is None or bootstrap is None:
        return side
    if min(seed[0], bootstrap[0]) >= -margin and max(seed[1], bootstrap[1]) <= margin:
        return EQUIVALENT
    return UNDECIDED


def verdict(seed: Interval | None, bootstrap: Interval | None, threshold: float = 0.0,
            margin: float | None = None) -> str:
    """The verdict of the claim "difference > ``threshold``". A non-zero threshold (non-
    inferiority) keeps the threshold rule: :data:`HOLDS` when both intervals lie entirely
    above it, :data:`DOES_NOT_HOLD` when both lie entirely below, :data:`UNDECIDED`
    otherwise. At 0 ("beats") it reads the :func:`answer`: better holds, worse or
    equivalent (within ``margin``) does not hold, undecided is undecided."""
    if threshold:
        return {BETTER: HOLDS, WORSE: DOES_NOT_HOLD}.get(_side(seed, bootstrap, threshold), UNDECIDED)
    return {BETTER: HOLDS, WORSE: DOES_NOT_HOLD, EQUIVALENT: DOES_NOT_HOLD}.get(answer(seed, bootstrap, margin), UNDECIDED)


def combine_verdicts(verdicts: Iterable[str]) -> str:
    """The verdict of a claim made of several comparisons: not run if none was run, does
    not hold if any does not hold, holds if all hold, undecided otherwise."""
    found = list(verdicts)
    unknown = set(found) - set(VERDICTS)
    if unknown:
        raise ValueError(f"unknown verdicts {sorted(unknown)}; verdicts are {', '.join(VERDICTS)}")
    if not found or all(v == NOT_RUN for v in found):
        return NOT_RUN
    if DOES_NOT_HOLD in found:
        return DOES_NOT_HOLD
    if all(v == HOLDS for v in found):
        return HOLDS
    return UNDECIDED


def cell_runs(runs: pd.DataFrame, term: Term) -> dict[int, str]:
    """seed -> run id of the cell (``term.method``, ``term.rate``) among ``runs``."""
    own = runs[(runs.method == term.method) & np.isclose(runs.noise_rate.astype(float), term.rate)]
    return {int(seed): str(run_id) for seed, run_id in zip(own.seed, own.run_id)}


def paired_comparison(
    label: str,
    terms: Sequence[Term],
    runs: pd.DataFrame,
    point: pd.Series,
    resample: Resampler,
    offset: float = 0.0,
    threshold: float = 0.0,
    level: float = LEVEL,
    bootstrap_over: str = "queries",
    margin: float | None = None,
) -> Comparison:
    """Compare ``sum(term.weight * metric(term's cell)) + offset`` against ``threshold``,
    its :func:`answer` within ``margin`` (None: never equivalent).

    ``runs`` has ``run_id, method, noise_rate, seed`` (one completed run per cell and seed);
    ``point`` is each run's metric by run id (missing or NaN: not available); ``resample``
    gives the metric on the shared resamples. The seeds compared are those on which every
    cell has a value; none is "not run". Fewer than two seeds is undecided.
    """
    if not terms:
        raise ValueError("a comparison needs at least one term")
    cells = [cell_runs(runs, term) for term in terms]
    available = [
        {s for s, r in cell.items() if r in point.index and np.isfinite(point[r])} for cell in cells
    ]
    seeds = sorted(set.intersection(*available))
    result = Comparison(label, threshold, bootstrap_over=bootstrap_over, margin=margin)
    if not seeds:
        missing = [f"{t.method} at {rate_label(t.rate)}" for t, have in zip(terms, available) if not have]
        result.note = "not run: no result for " + ", ".join(missing) if missing else "not run: no seed with every cell"
        return result
    weights = np.array([t.weight for t in terms])
    ids = [[cell[s] for cell in cells] for s in seeds]  # seeds x terms
    per_seed = np.array([point[row].to_numpy(dtype=float) @ weights for row in ids]) + offset
    result.seeds, result.per_seed, result.mean = seeds, per_seed.tolist(), float(per_seed.mean())
    result.seed_interval = seed_interval(per_seed, level)
    flat = [r for row in ids for r in row]
    resampled = resample(flat)
    notes = []
    if resampled is not None:
        contrast = resampled.reshape(len(resampled), len(seeds), len(terms)) @ weights + offset
        result.bootstrap_interval = percentile_interval(contrast.mean(axis=1), level)
    else:
        notes.append(f"no {bootstrap_over} bootstrap: per-item results not stored")
    if len(seeds) < 2:
        notes.append("one seed")
    result.note = "; ".join(notes)
    result.answer = answer(result.seed_interval, result.bootstrap_interval, margin)
    result.verdict = verdict(result.seed_interval, result.bootstrap_interval, threshold, margin)
    return result


def kept_set_verdict(test: KeptSetTest, alpha: float = KEPT_SET_ALPHA) -> str:
    """Cleaner than chance at ``alpha`` holds; dirtier at ``alpha`` does not; else undecided."""
    if test.p_cleaner < alpha:
        return HOLDS
    if test.p_dirtier < alpha:
        return DOES_NOT_HOLD
    return UNDECIDED
