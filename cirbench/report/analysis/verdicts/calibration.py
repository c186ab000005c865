"""Is a benchmark setting in the papers' regime? The calibration checks of its results.

Every robust-CIR paper fine-tunes a pre-trained model whose composed queries already rank
targets above chance, on data where the text decides the target and noise costs the
ordinary baseline recall that a perfect filter would keep. A setting that lacks one of
these cannot test the papers' claims. The checks below involve the ordinary baseline, the
perfect filter (both found by role: :mod:`cirbench.results.roles`) and the reference rows
(:mod:`cirbench.results.labels`), and one more: in the papers every method fine-tunes long
enough to reach the baseline's clean level, so every hosted method's *clean* cell is read
(:func:`_hosted_learn`). No method's noisy cell is ever read, so a setting is never tuned to
how a method resists noise. ``docs/benchmark.md`` gives each target's source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from cirbench.settings.defaults import CALIBRATION_RATES, HOSTED_RATE
from cirbench.report.analysis.loading.load import Setting, final_epoch, load_results
from cirbench.report.analysis.loading.numbers import format_number, rate_label
from cirbench.report.analysis.verdicts.room import PUBLISHED, RoomToWin, paper_range, paper_shares, room_line, room_to_win
from cirbench.results.headline import headline_rows
from cirbench.results.labels import TEXT_BLIND_ROW, ZERO_SHOT_ROW
from cirbench.results.metrics import RECALL, metric_label
from cirbench.results.roles import BASELINE, PERFECT_FILTER

PREMISE_RATE, PREMISE_EPOCH = 0.5, 1
FINE_TUNE_RATIO = (0.2, 0.85)
"""The ``zero_shot`` / baseline R@10 ratio at 0%: above chance (the premise), and at most
zero-shot CIR's share of the baseline on CIRR (0.73 for Pic2Word to 0.84-0.88 for CIReVL, LinCIR,
CoVR and CASE; docs/benchmark.md)."""
FINE_TUNE_R1_HIGH = 0.75
"""The most ``zero_shot`` / baseline R@1 ratio at 0% (the same methods on CIRR: 0.68-0.74)."""
GENTLE_DROP = 0.01
"""The most the baseline's clean-data recall may lose from one epoch to the next (one point)."""
GENTLE_RESOLUTION = 2.0
"""How many standard errors of the start's recall (binomial, over the validation queries)
the perfect filter may end an epoch below the start and still count as not worse: a warm-up
epoch that barely moves the model ends within the evaluation's resolution of the start,
above or below it by chance, and a gentler rate does not change that (docs/benchmark.md);
a fine-tune that wrecks its start falls many standard errors (11 on the 4-epoch lr 1e-3
default). Without per-query ranks of the start the tolerance is 0."""
ROOM_SHARE = {0.5: 0.85, 0.8: 0.75}
"""The least mean share of the baseline's loss the perfect filter must win back at each rate:
about what the best robust method wins back on FashionIQ (0.89 at 50%, 0.74 at 80%; ConeSep Table 1)."""
ROOM_FLOOR_METHOD = PUBLISHED.floor
"""No seed's share may fall below what this published row (the shipped claims file's
``[published] floor``) wins back on FashionIQ at the rate: a filter whose kept set is about
half noise at 80% (ConeSep Fig. 6) still wins that back."""
HOSTED_SHARE = 0.90
"""The least share of the baseline's clean R@10 every hosted method must reach (mean over seeds,
last epoch): in the papers every hosted method reaches the baseline's clean level (HUG's Tables
1-2: HUG above SPRC on clean FashionIQ and CIRR; TME, HABIT, INTENT and ConeSep at or above
it, ConeSep Tables 1-2), so a method far below it on clean data measures the setting, not its robustness."""
ROOM_GAP = 0.12
"""The least mean gap perfect filter - baseline at 80% noise: the papers' robust methods gain
0.13 to 0.16 over the baseline on FashionIQ (a share alone can be met by lowering the baseline at 0%)."""
HARD_RATE = 0.8
EASY_NOISE, HARD_NOISE = ("reference", "target"), "caption"
EASY_AUROC, HARD_AUROC = 0.90, 0.80
"""*Hard noise is hard* (ConeSep Sec. 1, challenge C1): at :data:`HARD_RATE` noise, at its
last epoch, the baseline's per-sample loss separates the swapped images (:data:`EASY_NOISE`)
from the clean triplets at an AUROC of at least :data:`EASY_AUROC` each, and the swapped
captions (:data:`HARD_NOISE`: the reference and target differ by one edit, so the pair looks
matched) at no more than :data:`HARD_AUROC`; the thirds protocol makes a third of the noise hard."""


@dataclass(frozen=True)
class Check:
    """One calibration figure: its value, the target range, and whether it is met
    (``passed`` None: not measurable from these results, e.g. one seed for a spread)."""

    name: str
    figure: str
    value: float
    low: float | None
    high: float | None
    passed: bool | None
    detail: str = ""
    strict: bool = False  # the value must exceed ``low``, not merely reach it

    @property
    def target(self) -> str:
        """The target as text, e.g. ``0.2 - 0.75``, ``>= 0.05`` or ``> 0``."""
        if self.low is not None and self.high is not None:
            return f"{self.low:g} - {self.high:g}"
        if self.low is not None:
            return f"{'>' if self.strict else '>='} {self.low:g}"
        return f"<= {self.high:g}"

    @property
    def verdict(self) -> str:
        """``pass``, ``FAIL`` or ``n/a``."""
        return "n/a" if self.passed is None else ("pass" if self.passed else "FAIL")


def _check(name: str, figure: str, value: float, low: float | None = None, high: float | None = None,
           detail: str = "", measurable: bool = True, strict: bool = False) -> Check:
    ok = None
    if measurable and math.isfinite(value):
        above = low is None or (value > low if strict else value >= low - 1e-12)
        ok = above and (high is None or value <= high + 1e-12)
    return Check(name, figure, value, low, high, ok, detail, strict)


def _recall(frame: pd.DataFrame, metric: str) -> pd.Series:
    """Per-run final-epoch ``metric`` of the headline group."""
    return final_epoch(headline_rows(frame, metric)).set_index("run_id").value


def _curves(setting: Setting, method: str, rate: float, metric: str) -> dict[int, pd.Series]:
    """Per seed, ``metric`` after every epoch (indexed by epoch) of ``method`` at ``rate``."""
    runs = setting.runs[(setting.runs.method == method) & np.isclose(setting.runs.noise_rate, rate)]
    rows = headline_rows(setting.metrics, metric)
    seeds = runs.set_index("run_id").seed
    return {int(seeds[run]): part.set_index("epoch").value.sort_index()
            for run, part in rows[rows.run_id.isin(seeds.index)].groupby("run_id")}


def _gentle(setting: Setting, metric: str) -> Check:
    """The fine-tune does not first wreck its start: after every epoch the perfect filter at
    50% and 80% noise is at or above the start's recall less :data:`GENTLE_RESOLUTION`
    standard errors of it, and the baseline on clean data never loses more than
    :data:`GENTLE_DROP` from one epoch to the next. The value is the worse of the two slacks
    (the filter's lowest epoch minus that floor; the allowed drop minus the baseline's
    largest), so it passes at >= 0."""
    base, perfect = setting.role(BASELINE), setting.role(PERFECT_FILTER)
    start = _reference(setting, ZERO_SHOT_ROW, metric)
    n_queries = _start_queries(setting)
    error = math.sqrt(start * (1 - start) / n_queries) if n_queries and math.isfinite(start) else 0.0
    floor = start - GENTLE_RESOLUTION * error
    lows = {rate: min((float(c.min()) for c in _curves(setting, perfect, rate, metric).values()), default=float("nan"))
            for rate in CALIBRATION_RATES[1:]}
    drops = [float(-c.diff().min()) for c in _curves(setting, base, 0.0, metric).values() if len(c) > 1]
    drop = max(drops) if drops else float("nan")
    slack = min([low - floor for low in lows.values()] + [GENTLE_DROP - drop])
    label = metric_label(metric)
    detail = ", ".join(f"{perfect} at {rate_label(r)}: lowest epoch {format_number(low, 3)} vs start "
                       f"{format_number(start, 3)}" for r, low in lows.items())
    detail += (f" (floor {format_number(floor, 3)}: {GENTLE_RESOLUTION:g} x SE {format_number(error, 4)} over "
               f"{n_queries} queries)" if n_queries
               else " (no per-query ranks of the start: floor = start)")
    detail += f"; {base} at 0%: largest drop between epochs {format_number(drop, 3)} (at most {GENTLE_DROP:g})"
    figure = (f"worst slack: {perfect} epoch {label} - ({ZERO_SHOT_ROW} - {GENTLE_RESOLUTION:g} SE), "
              f"{GENTLE_DROP:g} - {base} 0% drop")
    return _check("gentle", figure, slack, 0.0, None, detail,
                  measurable=bool(drops) and all(map(math.isfinite, lows.values())))


def _start_queries(setting: Setting) -> int:
    """The number of validation queries a run of the setting ranked (every cell and the
    start rank the same ones); 0 without per-query ranks."""
    if setting.ranks.empty:
        return 0
    return int(setting.ranks.groupby("run_id")["query"].nunique().min())


def _per_seed(setting: Setting, method: str, rate: float, metric: str) -> pd.Series:
    runs = setting.runs[(setting.runs.method == method) & np.isclose(setting.runs.noise_rate, rate)]
    values = _recall(setting.metrics, metric)
    return runs.set_index("run_id").seed.to_frame().join(values, how="inner").set_index("seed").value.sort_index()


def _reference(setting: Setting, name: str, metric: str) -> float:
    refs = setting.references
    if refs.empty:
        return float("nan")
    values = _recall(refs[refs.method == name], metric)
    return float(values.mean()) if len(values) else float("nan")


def _premise(setting: Setting) -> tuple[float, dict[str, float]]:
    """Mean over seeds of the baseline's per-sample loss AUROC at 50% noise after the first
    epoch (the last epoch if the run had only one), overall and per noise type."""
    runs = setting.runs[(setting.runs.method == setting.role(BASELINE)) & np.isclose(setting.runs.noise_rate, PREMISE_RATE)]
    purity = setting.purity[setting.purity.run_id.isin(set(runs.run_id))]
    if purity.empty:
        return float("nan"), {}
    epoch = min(PREMISE_EPOCH, int(purity.epoch.max()))
    at = purity[purity.epoch == epoch].groupby("noise_type").auroc.mean()
    return float(at.get("all", float("nan"))), {k: float(v) for k, v in at.items() if k != "all"}


def _last_epoch_auroc(setting: Setting, rate: float) -> pd.DataFrame:
    """The baseline's main per-sample score AUROC at ``rate`` at each run's last epoch: one
    row per seed, one column per noise type (the clean samples plus that type)."""
    runs = setting.runs[(setting.runs.method == setting.role(BASELINE)) & np.isclose(setting.runs.noise_rate, rate)]
    last = final_epoch(setting.purity[setting.purity.run_id.isin(set(runs.run_id))])  # the main score's rows
    seeds = last.run_id.map(runs.set_index("run_id").seed)
    return last.assign(seed=seeds).pivot_table(index="seed", columns="noise_type", values="auroc", aggfunc="mean")


def _hard_noise(setting: Setting) -> list[Check]:
    """*Hard noise is hard* (:data:`EASY_AUROC`, :data:`HARD_AUROC`): two checks, the swapped
    images found (the lower of their mean AUROCs over seeds) and the swapped captions hidden
    (their mean AUROC), each with its values per seed."""
    base = setting.role(BASELINE)
    at = _last_epoch_auroc(setting, HARD_RATE)
    where = f"{base} per-sample loss AUROC at {rate_label(HARD_RATE)}, last epoch"

    def values(kind: str) -> tuple[float, str]:
        if kind not in at.columns or not at[kind].notna().any():
            return float("nan"), f"{kind}: not recorded"
        per_seed = at[kind].dropna()
        each = ", ".join(format_number(v, 3) for v in per_seed)
        return float(per_seed.mean()), f"{kind} {format_number(per_seed.mean(), 3)} (per seed {each})"

    easy = [values(kind) for kind in EASY_NOISE]
    hard, hard_detail = values(HARD_NOISE)
    lowest = min((v for v, _ in easy), default=float("nan")) if all(math.isfinite(v) for v, _ in easy) else float("nan")
    return [
        _check("hard noise: swapped images found", f"{where}: {' and '.join(EASY_NOISE)} swaps, the lower", lowest,
               EASY_AUROC, None, "; ".join(d for _, d in easy)),
        _check("hard noise: swapped captions hidden", f"{where}: {HARD_NOISE} swaps", hard, None, HARD_AUROC, hard_detail),
    ]


def calibration_checks(setting: Setting, metric: str = RECALL) -> list[Check]:
    """The calibration figures of one setting's results, each beside its target."""
    base, perfect = setting.role(BASELINE), setting.role(PERFECT_FILTER)
    baseline = {rate: _per_seed(setting, base, rate, metric) for rate in CALIBRATION_RATES}
    filtered = {rate: _per_seed(setting, perfect, rate, metric) for rate in CALIBRATION_RATES[1:]}
    clean = float(baseline[0.0].mean()) if len(baseline[0.0]) else float("nan")
    label = metric_label(metric)
    checks = [
        _fine_tuning_matters(setting, baseline[0.0], metric),
        _check("text matters (ranking)", f"{TEXT_BLIND_ROW} {label} / {base} {label} at 0%",
               _reference(setting, TEXT_BLIND_ROW, metric) / clean, None, 0.5),
    ]
    subset = _per_seed(setting, base, 0.0, "recall_subset@1")
    checks.append(_check("text matters (subset)", f"{base} R_subset@1 at 0%", float(subset.mean()) if len(subset) else float("nan"),
                         0.5, None, "" if len(subset) else "the dataset has no subsets"))
    checks.append(_check("noise hurts, not to chance", f"{base} {label} at 80% / at 0%", float(baseline[0.8].mean()) / clean,
                         0.4, 0.8))
    spreads = {rate: float(v.std(ddof=1)) for rate, v in baseline.items() if len(v) >= 2}
    worst = max(spreads.values()) if spreads else float("nan")
    checks.append(_check("stable over seeds", f"largest seed std of {base} {label}", worst, None, 0.03,
                         ", ".join(f"{r:g}: {format_number(s, 3)}" for r, s in spreads.items()) or "needs two or more seeds",
                         measurable=bool(spreads)))
    for rate, low in ((0.5, 0.0), (0.8, 0.05)):
        gap = (filtered[rate] - baseline[rate]).dropna()
        checks.append(_check(f"something to win at {rate_label(rate)}", f"{perfect} - {base} {label} at {rate_label(rate)}, worst seed",
                             float(gap.min()) if len(gap) else float("nan"), low, None,
                             "per seed: " + ", ".join(format_number(g, 3, sign=True) for g in gap) if len(gap) else "not run", strict=low == 0.0))
    auroc, per_type = _premise(setting)
    checks.append(_check("small-loss premise", f"{base} per-sample loss AUROC at {rate_label(PREMISE_RATE)}, epoch {PREMISE_EPOCH + 1}",
                         auroc, 0.7, None, ", ".join(f"{k} {format_number(v, 3)}" for k, v in sorted(per_type.items()))))
    checks += _hard_noise(setting)
    checks.append(_gentle(setting, metric))
    room = _room(setting, baseline, filtered, label)
    checks.append(replace(room, detail=f"{_gains(setting, baseline, filtered, metric)}; {room.detail}"))
    checks.append(_hosted_learn(setting, baseline[0.0], metric))
    return checks


def hosted_clean_recall(setting: Setting, metric: str = RECALL) -> dict[str, pd.Series]:
    """Per hosted method (a built-in method without a role that ran at 0% noise: no ablation
    row, sweep trial or plugin), its ``metric`` at the last epoch per seed on clean data."""
    runs = setting.runs
    clean = runs[np.isclose(runs.noise_rate.astype(float), HOSTED_RATE) & ~runs.is_reference.eq(True)]
    clean = clean[~clean.method.astype(str).str.contains(":", regex=False)]
    if "method_source" in clean.columns:
        clean = clean[clean.method_source.astype(str).str.startswith("built-in")]
    if "role" in clean.columns:
        clean = clean[clean.role.fillna("").astype(str).eq("")]
    roles = {setting.role(BASELINE), setting.role(PERFECT_FILTER)}
    names = sorted(set(clean.method.astype(str)) - roles)
    return {name: _per_seed(setting, name, HOSTED_RATE, metric) for name in names}


def _hosted_learn(setting: Setting, clean: pd.Series, metric: str) -> Check:
    """*Every hosted method learns*: at 0% noise every hosted method reaches at least
    :data:`HOSTED_SHARE` of the baseline's ``metric`` (means over seeds) and ends above the
    un-fine-tuned start (``zero_shot``). The value is the worst method's share."""
    base, label = setting.role(BASELINE), metric_label(metric)
    start = _reference(setting, ZERO_SHOT_ROW, metric)
    hosted = {name: v for name, v in hosted_clean_recall(setting, metric).items() if len(v)}
    reference = float(clean.mean()) if len(clean) else float("nan")
    shares = {name: float(v.mean()) / reference for name, v in hosted.items()}
    figure = f"worst hosted method's {label} / {base} {label} at 0% (each above {ZERO_SHOT_ROW})"
    if not shares or not math.isfinite(reference):
        return _check("every hosted method learns", figure, float("nan"), HOSTED_SHARE, None,
                      "hosted methods not run at 0% (cirbench calibrate runs them unless --no-hosted)", measurable=False)
    worst = min(shares.values())
    below_start = [name for name, v in hosted.items() if not float(v.mean()) > start]
    detail = ", ".join(f"{name} {format_number(shares[name], 2)} ({format_number(float(hosted[name].mean()), 3)})"
                       for name in sorted(shares))
    detail += f"; {base} {format_number(reference, 3)}, {ZERO_SHOT_ROW} {format_number(start, 3)}"
    if below_start:
        detail += f"; at or below {ZERO_SHOT_ROW}: {', '.join(below_start)}"
    check = _check("every hosted method learns", figure, worst, HOSTED_SHARE, None, detail)
    if check.passed and (below_start or not math.isfinite(start)):
        check = replace(check, passed=False if below_start else None)
    return check


def _fine_tuning_matters(setting: Setting, clean: pd.Series, metric: str) -> Check:
    """The start ranks above chance and the fine-tune still has something to learn: the
    ``zero_shot`` / baseline ratio at 0% within :data:`FINE_TUNE_RATIO` on ``metric`` and at
    most :data:`FINE_TUNE_R1_HIGH` on R@1 (zero-shot CIR against SPRC on CIRR). The value is
    the ``metric`` ratio."""
    label = metric_label(metric)
    base = setting.role(BASELINE)
    ratio = _reference(setting, ZERO_SHOT_ROW, metric) / float(clean.mean()) if len(clean) else float("nan")
    r1_clean = _per_seed(setting, base, 0.0, "recall@1")
    r1 = _reference(setting, ZERO_SHOT_ROW, "recall@1") / float(r1_clean.mean()) if len(r1_clean) else float("nan")
    low, high = FINE_TUNE_RATIO
    check = _check("fine-tuning matters", f"{ZERO_SHOT_ROW} {label} / {base} {label} at 0% (and R@1)", ratio, low, high,
                   f"R@1 ratio {format_number(r1, 3)} (<= {FINE_TUNE_R1_HIGH:g})")
    if check.passed and math.isfinite(r1):
        check = replace(check, passed=r1 <= FINE_TUNE_R1_HIGH + 1e-12)
    return check


def _gains(setting: Setting, baseline: dict[float, pd.Series], filtered: dict[float, pd.Series], metric: str) -> str:
    """The share of the fine-tune's gain that the clean part of the data gives: (the perfect
    filter at 50% or 80% - ``zero_shot``) / (the baseline at 0% - ``zero_shot``), means over seeds."""
    start = _reference(setting, ZERO_SHOT_ROW, metric)
    clean = float(baseline[0.0].mean()) if len(baseline[0.0]) else float("nan")
    parts = []
    for rate, share in ((0.8, "a fifth"), (0.5, "a half")):
        kept = float(filtered[rate].mean()) if len(filtered.get(rate, ())) else float("nan")
        parts.append(f"gain at {share} {format_number((kept - start) / (clean - start), 2)}")
    return ", ".join(parts)


def _room_floors() -> dict[float, float]:
    """The least share a seed may win back at each rate: TME's on FashionIQ (:data:`ROOM_FLOOR_METHOD`)."""
    return {s.rate: s.share for s in paper_shares() if s.dataset == "fashioniq" and s.method == ROOM_FLOOR_METHOD}


def _room_met(room: RoomToWin | None, floors: dict[float, float]) -> bool | None:
    """Whether ``room`` meets the room-to-win target at its rate (None: not run)."""
    if room is None:
        return None
    meets = room.share >= ROOM_SHARE[room.rate] and min(room.shares.values()) >= floors.get(room.rate, 0.0)
    return meets and room.gap >= ROOM_GAP if room.rate == 0.8 else meets


def room_by_rate(setting: Setting, metric: str = RECALL) -> dict[float, tuple[bool | None, float]]:
    """At each rate of :data:`ROOM_SHARE`: whether the room to win is met there (None: not
    run) and the mean share of the baseline's loss the perfect filter wins back there."""
    base, perfect = setting.role(BASELINE), setting.role(PERFECT_FILTER)
    per_seed = {base: {rate: _per_seed(setting, base, rate, metric) for rate in (0.0, *ROOM_SHARE)},
                perfect: {rate: _per_seed(setting, perfect, rate, metric) for rate in ROOM_SHARE}}
    floors = _room_floors()
    rooms = {rate: room_to_win(per_seed, rate) for rate in ROOM_SHARE}
    return {rate: (_room_met(room, floors), room.share if room is not None else math.nan) for rate, room in rooms.items()}


def _room(setting: Setting, baseline: dict[float, pd.Series], filtered: dict[float, pd.Series], label: str) -> Check:
    """*Room to win*: at 50% and 80% noise the perfect filter wins back, on average over
    seeds, at least :data:`ROOM_SHARE` of the baseline's loss and on no seed less than
    :data:`ROOM_FLOOR_METHOD` does on FashionIQ, and at 80% its mean gap over the baseline is
    at least :data:`ROOM_GAP`. The value is the mean share at 80%; the detail has every figure
    per seed beside the papers'."""
    base, perfect = setting.role(BASELINE), setting.role(PERFECT_FILTER)
    per_seed = {base: baseline, perfect: filtered}
    floors = _room_floors()
    rooms = {rate: room_to_win(per_seed, rate) for rate in ROOM_SHARE}
    parts, ok = [], True
    for rate, room in rooms.items():
        if room is None:
            parts.append(f"{rate_label(rate)}: not run")
            continue
        floor = floors.get(rate, 0.0)
        ok = ok and bool(_room_met(room, floors))
        each = ", ".join(format_number(v, 2) for v in room.shares.values())
        parts.append(f"{rate_label(rate)}: share per seed {each} "
                     f"(mean {format_number(room.share, 2)}, target >= {ROOM_SHARE[rate]:g}, each >= {format_number(floor, 2)}), "
                     f"gap {format_number(room.gap, 3, sign=True)}{f' (>= {ROOM_GAP:g})' if rate == 0.8 else ''}, "
                     f"{perfect} / {base} at 0% {format_number(room.learning_curve, 2)}; papers: {paper_range(rate, fractions=True)}")
    measurable = all(room is not None for room in rooms.values())
    value = rooms[0.8].share if rooms[0.8] is not None else float("nan")
    return Check("room to win", f"share of {base}'s {label} loss the {perfect} wins back at 80% (and 50%, gap)", value,
                 ROOM_SHARE[0.8], None, ok if measurable else None, "; ".join(parts))


def room_lines(setting: Setting, metric: str = RECALL) -> list[str]:
    """One line per noise rate at which the baseline (with its 0% cell) and the perfect filter
    both ran: the share of the baseline's loss the perfect filter wins back, its gap, and the
    papers' range (final epoch; the cap on what a method that only removes noise can win here)."""
    runs, base, perfect = setting.runs, setting.role(BASELINE), setting.role(PERFECT_FILTER)
    rates = sorted(set(runs.loc[runs.method == perfect, "noise_rate"].astype(float))
                   & set(runs.loc[runs.method == base, "noise_rate"].astype(float)) - {0.0})
    per_seed = {m: {r: _per_seed(setting, m, r, metric) for r in [0.0, *rates]} for m in (base, perfect)}
    rooms = [room_to_win(per_seed, rate) for rate in rates]
    label = metric_label(metric)
    return [room_line(room, label, base) for room in rooms if room is not None]


def parity_lines(setting: Setting, metric: str = RECALL) -> list[str]:
    """One line per hosted method below clean parity in ``setting`` (under :data:`HOSTED_SHARE`
    of the baseline's ``metric`` at 0%, or not above ``zero_shot``; the calibration's *every
    hosted method learns*): its share, so that its verdicts under noise are read as what they
    measure. None when every hosted method that ran at 0% reaches it."""
    base, label = setting.role(BASELINE), metric_label(metric)
    clean = _per_seed(setting, base, 0.0, metric)
    if not len(clean):
        return []
    reference, start = float(clean.mean()), _reference(setting, ZERO_SHOT_ROW, metric)
    lines = []
    for name, values in hosted_clean_recall(setting, metric).items():
        value = float(values.mean()) if len(values) else float("nan")
        if not math.isfinite(value) or (value / reference >= HOSTED_SHARE and not value <= start):
            continue
        below = f", below `{ZERO_SHOT_ROW}` ({format_number(100 * start, 1)}%)" if value <= start else ""
        lines.append(f"clean parity: `{name}` reaches {format_number(100 * value / reference, 0)}% of `{base}`'s {label} at "
                     f"0% noise ({format_number(100 * value, 1)}% against {format_number(100 * reference, 1)}%{below}; the "
                     "calibration's target is "
                     f"{format_number(100 * HOSTED_SHARE, 0)}%): "
                     f"it does not learn the clean task here as the papers' methods do, so its results under noise "
                     f"measure that before its robustness (docs/benchmark.md)")
    return lines


def run_calibration_checks(results: Path, dataset: str, backbone: str, noise_protocol: str) -> list[Check]:
    """Read ``results`` and compute the checks of the setting (dataset, backbone and noise
    protocol labels, as the results name them)."""
    data = load_results(results)
    wanted = (dataset, backbone, noise_protocol)
    for setting in data.settings:
        if (setting.dataset, setting.backbone, setting.noise_protocol) == wanted:
            return calibration_checks(setting)
    raise ValueError(f"no completed calibration runs for {wanted} in {results}")


def checks_markdown(checks: list[Check]) -> str:
    """The checks as a Markdown table: check, figure, value, target, verdict, detail."""
    lines = ["| check | figure | value | target | verdict | detail |", "|:--|:--|--:|--:|:--|:--|"]
    lines += [f"| {c.name} | {c.figure} | {format_number(c.value, 3)} | {c.target} | {c.verdict} | {c.detail} |" for c in checks]
    return "\n".join(lines)
