"""How much there is to win: the share of the ordinary baseline's loss under noise that the
perfect filter wins back, beside what the papers' robust methods win back.

At a noise rate ``r`` the ordinary baseline ``b`` loses ``b(0) - b(r)`` of its clean
recall; a method wins back ``(method(r) - b(r)) / (b(0) - b(r))`` of it. In the papers'
tables a robust method wins back most of the loss (about 0.62 to 0.74 of the baseline's
FashionIQ Avg R@10 at 80% noise), so noise costs the baseline mostly wrong gradients, not
missing data. A benchmark on which even the perfect filter (trained on the truly clean
triplets only) wins back much less caps every robust method's possible gain below the
papers'; the report prints that cap above its claims and :mod:`cirbench.report.analysis.verdicts.calibration`
checks it as *room to win*. The baseline and the perfect filter are found by role
(:mod:`cirbench.results.roles`); the papers' rows are named in the shipped claims file's
``[published]`` table (:func:`cirbench.report.analysis.verdicts.claim_files.read_published`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

import numpy as np
import pandas as pd

from cirbench.report.analysis.loading.numbers import format_number, rate_label
from cirbench.report.analysis.verdicts.claim_files import read_published
from cirbench.report.analysis.verdicts.published import load_published

PUBLISHED = read_published()
ROOM_TITLE = "How much there is to win"
ROOM_INTRO = (f"The share of `{PUBLISHED.baseline}`'s loss under noise (its R@10 at 0% minus at the rate, in percent, "
              "read at each run's held-out-selected epoch (the claims' rule)) that the perfect filter, trained on the truly "
              "clean triplets only, wins back, and its gap in percentage points: what a method that only removes noise can "
              f"reach here, beside what the papers' robust methods win back over {PUBLISHED.baseline_row} (ConeSep Tables "
              "1-2). Read every 'does not hold' under noise against it.")
PAPER_SOURCE = "ConeSep paper"
"""The published tables with noise rates (ConeSep Tables 1-2; HUG's have no injected noise)."""
PAPER_RECALL: dict[str, str] = {"fashioniq": "Avg R@10", "cirr": "R@10"}
"""The recall each dataset's won-back share is read on: the R@10 of FashionIQ's category
average and of CIRR, the metric the calibration reads on the embedded benchmark."""


@dataclass(frozen=True)
class PaperShare:
    """What one robust method of a paper wins back at one noise rate on one dataset."""

    dataset: str
    method: str
    rate: float
    share: float  # of the baseline's loss, (method - baseline) / (baseline at 0% - baseline)
    gain: float  # method - baseline, recall in [0, 1]


def percent(share: float) -> str:
    """A share as the report prints it, in percent: ``0.861`` -> ``86%``."""
    return f"{format_number(100 * share, 0)}%"


def points(difference: float) -> str:
    """A difference of recalls (fractions) in percentage points, signed: ``0.113`` -> ``+11.3``."""
    return format_number(100 * difference, 1, sign=True)


def won_back(clean: float, noisy: float, method: float) -> float:
    """The share of the baseline's loss ``clean - noisy`` that ``method`` wins back (NaN when
    the baseline lost nothing)."""
    loss = clean - noisy
    return (method - noisy) / loss if loss > 0 else float("nan")


@lru_cache(maxsize=1)
def _shipped_shares() -> tuple[PaperShare, ...]:
    """The shares of the shipped tables, read and validated once per process."""
    return tuple(paper_shares(load_published()))


def paper_shares(published: pd.DataFrame | None = None) -> list[PaperShare]:
    """Every robust method's won-back share in the published tables (the rows of
    :data:`PUBLISHED`), per dataset and noise rate above 0; ``published`` None: the shipped tables."""
    if published is None:
        return list(_shipped_shares())
    table = published
    table = table[table.source == PAPER_SOURCE]
    shares = []
    for dataset, metric in PAPER_RECALL.items():
        rows = table[(table.dataset == dataset) & table[metric].notna()]
        base = rows[rows.cirbench_method == PUBLISHED.baseline].set_index("noise_rate")[metric] / 100
        if 0.0 not in base.index:
            continue
        robust = rows[rows.cirbench_method.isin(list(PUBLISHED.robust))]
        for row in robust.itertuples():
            rate = float(row.noise_rate)
            if rate == 0.0 or rate not in base.index:
                continue
            value = float(rows.loc[row.Index, metric]) / 100
            shares.append(PaperShare(dataset, str(row.method), rate, won_back(base[0.0], base[rate], value),
                                     value - base[rate]))
    return shares


def paper_range(rate: float, shares: list[PaperShare] | None = None, fractions: bool = False) -> str:
    """The papers' won-back shares (percent) and gains (points) at ``rate`` as text, e.g.
    ``FashionIQ 62%-74% (gain +13.0 to +16.0 points, ...); CIRR ...``; empty when no paper reports the rate.
    ``fractions``: as the calibration's checks read, ``FashionIQ 0.62-0.74 (gain +0.13 to +0.16, ...)``."""
    shares = paper_shares() if shares is None else shares
    parts = []
    for dataset in PAPER_RECALL:
        here = [s for s in shares if s.dataset == dataset and math.isclose(s.rate, rate)]
        if here:
            low, high = min(s.share for s in here), max(s.share for s in here)
            gain_low, gain_high = min(s.gain for s in here), max(s.gain for s in here)
            name = "FashionIQ" if dataset == "fashioniq" else "CIRR"
            span = (f"{format_number(low)}-{format_number(high)} (gain {format_number(gain_low, sign=True)} to "
                    f"{format_number(gain_high, sign=True)}" if fractions else
                    f"{percent(low)}-{percent(high)} (gain {points(gain_low)} to {points(gain_high)} points")
            parts.append(f"{name} {span}, "
                         f"{', '.join(s.method for s in sorted(here, key=lambda s: s.share))})")
    return "; ".join(parts)


@dataclass(frozen=True)
class RoomToWin:
    """The perfect filter's won-back share and gap at one noise rate, per seed."""

    rate: float
    shares: dict[int, float]  # seed -> (filter - baseline) / (baseline at 0% - baseline)
    gaps: dict[int, float]  # seed -> filter - baseline
    learning_curve: float  # filter at this rate / baseline at 0%, mean over seeds

    @property
    def share(self) -> float:
        """Mean won-back share over seeds."""
        return float(np.mean(list(self.shares.values()))) if self.shares else float("nan")

    @property
    def gap(self) -> float:
        """Mean gap over seeds."""
        return float(np.mean(list(self.gaps.values()))) if self.gaps else float("nan")


def room_to_win(per_seed: Mapping[str, dict[float, pd.Series]], rate: float) -> RoomToWin | None:
    """The perfect filter's room at ``rate`` from per-seed final recalls
    (``per_seed[method][rate]``: a Series indexed by seed; the baseline's entry first, the
    perfect filter's second, whatever their names); seeds without all three cells are left
    out; None when no seed has them."""
    baseline, perfect = per_seed.values()
    clean, noisy = baseline.get(0.0), baseline.get(rate)
    filtered = perfect.get(rate)
    if clean is None or noisy is None or filtered is None:
        return None
    seeds = sorted(set(clean.index) & set(noisy.index) & set(filtered.index))
    if not seeds:
        return None
    shares = {s: won_back(float(clean[s]), float(noisy[s]), float(filtered[s])) for s in seeds}
    gaps = {s: float(filtered[s] - noisy[s]) for s in seeds}
    curve = float(np.mean([filtered[s] / clean[s] for s in seeds]))
    return RoomToWin(rate, shares, gaps, curve)


def room_line(room: RoomToWin, label: str = "R@10", baseline: str | None = None) -> str:
    """One line for a report: the perfect filter's share (percent) and gap (percentage points)
    at the rate beside the papers' (``baseline``: the results' baseline, by default the papers')."""
    seeds = ", ".join(percent(v) for v in room.shares.values())
    papers = paper_range(room.rate)
    baseline = baseline or PUBLISHED.baseline
    text = (f"{rate_label(room.rate)} noise: the perfect filter wins back {percent(room.share)} of `{baseline}`'s {label} loss "
            f"(per seed {seeds}), a gap of {points(room.gap)} points")
    return text + (f"; the papers' robust methods win back {papers}" if papers else "; no paper reports this rate")
