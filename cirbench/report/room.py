"""How much there is to win: the share of the ordinary baseline's loss under noise that the
perfect filter wins back, beside what the papers' robust methods win back.

At a noise rate ``r`` the ordinary baseline loses ``sprc(0) - sprc(r)`` of its clean
recall; a method wins back ``(method(r) - sprc(r)) / (sprc(0) - sprc(r))`` of it. In the
papers' tables a robust method wins back most of the loss (ConeSep Tables 1-2: TME 0.62
and ConeSep 0.74 of SPRC's FashionIQ Avg R@10 at 80% noise), so noise costs the baseline
mostly wrong gradients, not missing data. A benchmark on which even the perfect filter
(``oracle``, trained on the truly clean triplets only) wins back much less caps every
robust method's possible gain below the papers'; the report prints that cap above its
claims and :mod:`cirbench.report.calibration` checks it as *room to win*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from cirbench.report.published import load_published

ROOM_TITLE = "How much there is to win"
ROOM_INTRO = ("The share of `sprc`'s loss under noise (R@10 at 0% minus at the rate, last epoch) that the perfect "
              "filter, trained on the truly clean triplets only, wins back: what a method that only removes noise "
              "can reach here, beside what the papers' robust methods win back over SPRC (ConeSep Tables 1-2). "
              "Read every 'does not hold' under noise against it.")
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
    share: float  # of SPRC's loss, (method - SPRC) / (SPRC at 0% - SPRC)
    gain: float  # method - SPRC, recall in [0, 1]


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
    """Every robust method's won-back share in the published tables (SPRC as the baseline),
    per dataset and noise rate above 0; ``published`` None: the shipped tables."""
    if published is None:
        return list(_shipped_shares())
    table = published
    table = table[table.source == PAPER_SOURCE]
    shares = []
    for dataset, metric in PAPER_RECALL.items():
        rows = table[(table.dataset == dataset) & table[metric].notna()]
        sprc = rows[rows.cirbench_method == "sprc"].set_index("noise_rate")[metric] / 100
        if 0.0 not in sprc.index:
            continue
        robust = rows[rows.cirbench_method.isin(["tme", "habit", "intent", "conesep"])]
        for row in robust.itertuples():
            rate = float(row.noise_rate)
            if rate == 0.0 or rate not in sprc.index:
                continue
            value = float(rows.loc[row.Index, metric]) / 100
            shares.append(PaperShare(dataset, str(row.method), rate, won_back(sprc[0.0], sprc[rate], value),
                                     value - sprc[rate]))
    return shares


def paper_range(rate: float, shares: list[PaperShare] | None = None) -> str:
    """The papers' won-back shares and gains at ``rate`` as text, e.g. ``FashionIQ: won back
    0.62-0.74, gain +0.13-+0.16; CIRR: ...``; empty when no paper reports the rate."""
    shares = paper_shares() if shares is None else shares
    parts = []
    for dataset in PAPER_RECALL:
        here = [s for s in shares if s.dataset == dataset and math.isclose(s.rate, rate)]
        if here:
            low, high = min(s.share for s in here), max(s.share for s in here)
            gain_low, gain_high = min(s.gain for s in here), max(s.gain for s in here)
            name = "FashionIQ" if dataset == "fashioniq" else "CIRR"
            parts.append(f"{name} {low:.2f}-{high:.2f} (gain {gain_low:+.2f} to {gain_high:+.2f}, "
                         f"{', '.join(s.method for s in sorted(here, key=lambda s: s.share))})")
    return "; ".join(parts)


@dataclass(frozen=True)
class RoomToWin:
    """The perfect filter's won-back share and gap at one noise rate, per seed."""

    rate: float
    shares: dict[int, float]  # seed -> (oracle - sprc) / (sprc at 0% - sprc)
    gaps: dict[int, float]  # seed -> oracle - sprc
    learning_curve: float  # oracle at this rate / sprc at 0%, mean over seeds

    @property
    def share(self) -> float:
        """Mean won-back share over seeds."""
        return float(np.mean(list(self.shares.values()))) if self.shares else float("nan")

    @property
    def gap(self) -> float:
        """Mean gap over seeds."""
        return float(np.mean(list(self.gaps.values()))) if self.gaps else float("nan")


def room_to_win(per_seed: dict[str, dict[float, pd.Series]], rate: float) -> RoomToWin | None:
    """The perfect filter's room at ``rate`` from per-seed final recalls
    (``per_seed[method][rate]``: a Series indexed by seed, for ``sprc`` and ``oracle``);
    seeds without all three cells are left out; None when no seed has them."""
    clean, noisy = per_seed["sprc"].get(0.0), per_seed["sprc"].get(rate)
    oracle = per_seed["oracle"].get(rate)
    if clean is None or noisy is None or oracle is None:
        return None
    seeds = sorted(set(clean.index) & set(noisy.index) & set(oracle.index))
    if not seeds:
        return None
    shares = {s: won_back(float(clean[s]), float(noisy[s]), float(oracle[s])) for s in seeds}
    gaps = {s: float(oracle[s] - noisy[s]) for s in seeds}
    curve = float(np.mean([oracle[s] / clean[s] for s in seeds]))
    return RoomToWin(rate, shares, gaps, curve)


def room_line(room: RoomToWin, label: str = "R@10") -> str:
    """One line for a report: the perfect filter's share and gap at the rate beside the papers'."""
    seeds = ", ".join(f"{v:.2f}" for v in room.shares.values())
    papers = paper_range(room.rate)
    text = (f"{room.rate:.0%} noise: the perfect filter wins back {room.share:.2f} of `sprc`'s {label} loss "
            f"(per seed {seeds}), a gap of {room.gap:+.3f}")
    return text + (f"; the papers' robust methods win back {papers}" if papers else "; no paper reports this rate")
