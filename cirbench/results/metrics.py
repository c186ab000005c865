"""Each metric of an evaluation and the headline, defined once: the recalls' names and
labels, the recall read where no average is asked for, and the papers' averages (which
parts, over which groups, the report's column, the stored name). The evaluator names its
metrics here, the datasets' summaries, the tables' columns, the headline, selection, the
bootstrap, the claims, the README block and ``cirbench reproduce`` read them from here; and the
one rule every number the report, its files and the README print is rounded by
(:func:`format_number`). Plain Python: the command line reads it to print its help.

Adding a headline average is one :class:`Average` in :data:`AVERAGES`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Sequence

RECALL_NAME = re.compile(r"recall(?P<subset>_subset)?@(?P<k>\d+)")
"""A recall metric's stored name: ``recall@K`` (over the gallery) or ``recall_subset@K`` (CIRR's subsets)."""
RECALL = "recall@10"
"""The recall read where no average is asked for: the progress line, the collapse guard, the
calibration checks and the README block; and the headline where no :class:`Average` applies."""
REPRODUCED: tuple[str, ...] = ("recall@5", "recall@10", "recall_subset@1")
"""The metrics ``cirbench reproduce`` compares by default (the ``all`` group's)."""
AVERAGE_GROUP = "average"
"""The group a dataset's summary stores its category averages under (FashionIQ's)."""


def recall_name(k: int, subset: bool = False) -> str:
    """The stored name of the recall at ``k``: ``recall@10``, ``recall_subset@1`` with ``subset``."""
    return f"recall{'_subset' if subset else ''}@{k}"


def metric_label(metric: str) -> str:
    """``recall@10`` -> ``R@10``, ``recall_subset@1`` -> ``R_sub@1``; other names unchanged."""
    return metric.replace("recall_subset@", "R_sub@").replace("recall@", "R@")


@dataclass(frozen=True)
class Average:
    """One of the papers' headline averages: the mean of ``parts`` (stored metric names),
    read in the ``all`` group, or (``over_categories``) each part averaged over the
    categories first (a column ``Avg <part>`` each) and those means averaged. ``column``
    is the report's column; :attr:`stored` the name a dataset's summary stores it under."""

    column: str
    parts: tuple[str, ...]
    over_categories: bool = False

    @property
    def stored(self) -> str:
        """The metric name of the average in a stored ``metrics`` table: ``mean(recall@5,recall_subset@1)``."""
        return f"mean({','.join(self.parts)})"

    def part_column(self, part: str) -> str:
        """The column of one part's mean over the categories: ``recall@10`` -> ``Avg R@10``."""
        return f"Avg {metric_label(part)}"

    def of(self, values: Sequence[Any]) -> Any:
        """The average of the parts' ``values`` (numbers or pandas columns, in :attr:`parts`' order)."""
        return sum(values) / len(values)


FASHIONIQ_AVERAGE = Average("AVG", ("recall@10", "recall@50"), over_categories=True)
"""FashionIQ's: the category averages of R@10 and R@50, then their mean."""
CIRR_AVERAGE = Average("Avg(R@5, R_sub@1)", ("recall@5", "recall_subset@1"))
"""CIRR's: (R@5 + R_sub@1) / 2 of the ``all`` group."""
AVERAGES: tuple[Average, ...] = (FASHIONIQ_AVERAGE, CIRR_AVERAGE)
"""The headline averages, in the order the tables show them and the headline prefers them."""
FIQ_AVG, CIRR_AVG = FASHIONIQ_AVERAGE.column, CIRR_AVERAGE.column


def headline_column(columns: list[str]) -> str | None:
    """The single number that decides "best" among a table's ``columns``: the first of the
    :data:`AVERAGES` present, else the :data:`RECALL`, else the first column."""
    for name in (*(a.column for a in AVERAGES), metric_label(RECALL)):
        if name in columns:
            return name
    return columns[0] if columns else None


STORED_PLACES = 6
"""The decimals the report's CSV files keep (:func:`format_number` writes them): a printed number
is read at them first, so that a number and its CSV copy print alike."""


def format_number(value: float | None, places: int = 2, *, sign: bool = False, digits: int | None = None) -> str:
    """The one rule every number of the report, its CSV files and the README prints by: ``value``
    rounded half away from zero on its decimal value, at ``places`` decimals (first at
    :data:`STORED_PLACES`, as its CSV copy holds it: ``92.02499999999999`` and ``92.025`` both
    print ``92.03``), or with ``digits`` at that many significant digits (``2.3e-28`` -> ``2e-28``);
    ``sign``: ``+`` before a positive number; ``-`` without a finite value."""
    if value is None or not math.isfinite(value):
        return "-"
    exact = Decimal(repr(float(value)))
    plus = "+" if sign else ""
    if digits is not None:
        step = Decimal(1).scaleb(exact.adjusted() - digits + 1) if exact else Decimal(1)
        return f"{float(exact.quantize(step, ROUND_HALF_UP)):{plus}.{digits}g}"
    stored = exact.quantize(Decimal(1).scaleb(-STORED_PLACES), ROUND_HALF_UP)
    return f"{stored.quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP):{plus}f}"
