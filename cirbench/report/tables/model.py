"""What every table of the report is made of: a :class:`TableModel` of worded cells
(:class:`Cell`), the one mark a cell may carry (:data:`TOP_MARK`) and the footnotes a table
adds for the cells it shows that are flagged collapsed or below chance."""

from __future__ import annotations

from dataclasses import dataclass

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
