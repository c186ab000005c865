"""What every table of the report is made of: a :class:`TableModel` of worded cells
(:class:`Cell`) with the seeds it reads, its heading naming them (:func:`heading`), the one
mark a cell may carry (:data:`TOP_MARK`) and the footnotes a table adds for the cells it shows
that are flagged collapsed or below chance."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import pandas as pd

from cirbench.report.analysis.loading.load import BELOW_CHANCE_MARK, COLLAPSE_MARK, Setting
from cirbench.report.analysis.loading.numbers import rate_label


TOP_MARK = "•"
"""The other tables' one mark: the highest mean of its column at a noise rate, tested against
nothing. Bold and underline belong to the leaderboard, where they are the claims' verdicts."""
TOP_NOTE = (f"{TOP_MARK} the highest mean of its column at that noise rate (no test: the leaderboard's bold and "
            "underline say which leads are more than seed and query noise)")


@dataclass(frozen=True)
class Cell:
    """One rendered table cell; ``rank`` 1: the highest mean of its column (:data:`TOP_MARK`), 0 not marked."""

    text: str
    rank: int = 0


@dataclass
class TableModel:
    """A table ready to render: a title, column headers, and rows grouped by noise rate."""

    title: str
    columns: list[str]
    rows: list[tuple[str, str, list[Cell]]]  # (noise label, blank after a block's first row; method; cells)
    note: str = ""
    seeds: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """The seeds the table reads, by row (:func:`seeds_by_row`): its :func:`heading` names them."""


def seeds_by_row(found: Mapping[tuple[str, float], Iterable[int]]) -> dict[str, tuple[int, ...]]:
    """The seeds read per (method, noise rate) keyed as a heading names them: by method, or by
    method at a rate where one method is read on other seeds at another rate."""
    per_cell = {(method, float(rate)): tuple(sorted({int(s) for s in seeds})) for (method, rate), seeds in found.items()}
    per_method: dict[str, set[tuple[int, ...]]] = {}
    for (method, _), seeds in per_cell.items():
        per_method.setdefault(method, set()).add(seeds)
    out: dict[str, tuple[int, ...]] = {}
    for (method, rate), seeds in per_cell.items():
        out[method if len(per_method[method]) == 1 else f"{method} at {rate_label(rate)}"] = seeds
    return {key: seeds for key, seeds in out.items() if seeds}


def read_seeds(setting: Setting, cells: Iterable[tuple[str, float]],
               read: pd.Index | None = None) -> dict[str, tuple[int, ...]]:
    """:func:`seeds_by_row` of ``cells`` (method, noise rate) from ``setting``'s runs (those in
    ``read``, run ids, where given: the runs a table's numbers come from)."""
    runs = setting.runs if read is None else setting.runs[setting.runs.run_id.isin(read)]
    rates = runs.noise_rate.astype(float)
    return seeds_by_row({(m, r): runs.seed[(runs.method == m) & (rates == float(r))] for m, r in dict.fromkeys(cells)})


def seeds_words(seeds: Mapping[str, tuple[int, ...]]) -> str:
    """The seeds a table reads in words: ``seeds 0,1,2``, and where rows differ, those of most
    rows first and the others named: ``seeds 0,1,2 (method: seeds 0,1,2,3,4)``; ``""`` for none."""
    def words(group: tuple[int, ...]) -> str:
        return f"seed{'s' * (len(group) != 1)} {','.join(map(str, group))}"

    counts = Counter(seeds.values())
    if not counts:
        return ""
    main, *others = sorted(counts, key=lambda group: (-counts[group], group))
    named = [f"{', '.join(k for k, v in seeds.items() if v == group)}: {words(group)}" for group in others]
    return words(main) + (f" ({'; '.join(named)})" if named else "")


def heading(table: TableModel) -> str:
    """A table's heading: its title and the seeds it reads (:func:`seeds_words`)."""
    words = seeds_words(table.seeds)
    return f"{table.title}, {words}" if words else table.title


def _flag_note(setting: Setting, cells: list[tuple[str, float]], column: str, what: str) -> str:
    """The footnote of a table showing ``cells`` (method, noise rate): each of them flagged
    ``column`` on any seed, on how many, after ``what`` (``""`` when none is)."""
    parts = []
    for method, rate in dict.fromkeys(cells):
        flagged, seeds = setting.flag_counts(column, method, rate)
        if flagged:
            parts.append(f"{method} at {rate_label(rate)} on {flagged} of {seeds} seed{'s' * (seeds != 1)}")
    return f" {what}: {'; '.join(parts)}." if parts else ""


def collapse_note(setting: Setting, cells: list[tuple[str, float]]) -> str:
    """The footnote of the cells that collapsed on any seed, on how many (``""`` when none did)."""
    return _flag_note(setting, cells, "collapsed", f"{COLLAPSE_MARK} collapsed (R@10 below the text_only row or a "
                      "constant loss: a defect, not a robustness result; reasons under Collapsed cells)")


def below_chance_note(setting: Setting, cells: list[tuple[str, float]]) -> str:
    """The footnote of the cells whose kept set is less clean than chance on any seed (``""`` when none is)."""
    return _flag_note(setting, cells, "below_chance", f"{BELOW_CHANCE_MARK} kept set less clean than a random subset "
                      "of the same size (a flag, not a failure; numbers under Kept sets below chance)")
