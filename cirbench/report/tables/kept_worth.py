"""What a kept set is worth, as tables (:mod:`cirbench.report.analysis.rankings.kept_worth` computes
it): the decomposition of each method against the baseline into its filter and its other
terms, and what each noise type costs the baseline, in points with the claims' marks."""

from __future__ import annotations

import math

from cirbench.report.analysis.verdicts.claims import Check
from cirbench.report.analysis.rankings.kept_worth import KeptWorth
from cirbench.report.analysis.rankings.leaderboard import BETTER, MARKS, UNSEPARATED, VERSUS, WORSE
from cirbench.report.analysis.statistics.significance import DEFAULT_MARGIN, EQUIVALENT
from cirbench.report.analysis.loading.load import COLLAPSE_MARK
from cirbench.report.analysis.loading.numbers import format_mean, format_number, rate_label
from cirbench.report.analysis.statistics.significance import half_width_text
from cirbench.report.tables.model import Cell, TableModel, seeds_by_row

DECOMPOSITION_TITLE = "What a kept set is worth: filter and other terms"
NOISE_TYPES_TITLE = "What each noise type costs the baseline"


def _mark(check: Check) -> str:
    """A check's mark as the leaderboard prints it (▲ ▼ = ○), with the collapse mark."""
    return MARKS.get(check.answer or VERSUS.get(check.verdict, ""), "") + (COLLAPSE_MARK if check.collapsed else "")


def points_text(check: Check | None) -> str:
    """A difference in points with the smallest difference it can decide and its mark, e.g.
    ``-3.10 ±1.2 ▼``; ``-`` when not run."""
    if check is None or check.comparison is None or not math.isfinite(check.comparison.mean):
        return "-"
    smallest = half_width_text(check.half_width) if check.half_width is not None else ""
    return " ".join(part for part in (format_number(check.comparison.mean * 100, sign=True), smallest, _mark(check)) if part)


SMALLEST = ("± the smallest difference the comparison can decide at its seeds and queries: the half-width of the wider "
            "of its two 95% intervals, in points (none with one seed)")


def decomposition_table(worth: KeptWorth) -> TableModel | None:
    """The decomposition as a table: per rate and method, its purity and the four differences
    in points with the claims' marks; None without a replay."""
    if not worth.splits:
        return None
    base, perfect = worth.baseline, worth.perfect
    columns = ["Purity (%)", f"method - {base}", f"filter: replay - {base}", "other terms: method - replay",
               f"left on the table: {perfect} - replay"]
    rows, last = [], None
    for split in worth.splits:
        cells = [Cell(format_number(split.purity, 1))]
        cells += [Cell(points_text(c)) for c in (split.total, split.filter, split.other, split.left)]
        rows.append((rate_label(split.rate) if split.rate != last else "", worth.setting.label(split.method), cells))
        last = split.rate
    seeds = worth.points.seed.nunique()
    one_seed = (" One seed: no interval over seeds, so every mark is undecided (a mean alone is never a verdict)."
                if seeds < 2 else "")
    stale = one_seed + (f" {worth.stale} replay(s) replay a run of their method that the report no longer reads "
                        "(rerun since): their row compares the replay with the newer run." if worth.stale else "")
    stale += "".join(f" {line}" for line in worth.left_out)
    note = (f"{worth.metric}, percentage points, each run at the epoch the claims read (its best held-out epoch), its "
            "kept set's purity at that same epoch (a warm-up epoch keeps every row: the clean share). A method against "
            f"`{base}` = its filter (its replay, `{base}`'s loss trained on the method's recorded kept set, against "
            f"`{base}`) + its other terms (the method against its replay); the three are read on the same seeds, so they "
            "add up to rounding. Left on the table: what the perfect filter reaches beyond the replay. Marks by the "
            f"claims' rule (both 95% intervals, over seeds and over queries, on one side of 0): {MARKS[BETTER]} above "
            f"0, {MARKS[WORSE]} below, {MARKS[EQUIVALENT]} equivalent (both inside ±{100 * DEFAULT_MARGIN:g} point), "
            f"{MARKS[UNSEPARATED]} undecided; {COLLAPSE_MARK} a cell read collapsed; {SMALLEST}. A replay "
            f"trains `{base}`'s loss: 'other terms' is every difference of the method's training beyond the rows it kept "
            "(its loss terms, what it does with the dropped rows, its hyperparameters, its own model's trajectory)." + stale)
    seeds = seeds_by_row({(s.method, s.rate): _check_seeds(s.total, s.filter, s.other, s.left) for s in worth.splits})
    return TableModel(DECOMPOSITION_TITLE, columns, rows, note, seeds)


def _check_seeds(*checks: Check | None) -> set[int]:
    """The seeds the comparisons of ``checks`` read."""
    return {int(s) for c in checks if c is not None and c.comparison is not None for s in c.comparison.seeds}


def noise_type_table(worth: KeptWorth) -> TableModel | None:
    """Per rate and noise type: its cell's headline, its cost against the perfect filter in
    points with the claims' mark, and the share of that type each method caught; None without noise-type cells."""
    if not worth.costs:
        return None
    methods = sorted({m for cost in worth.costs for m in cost.caught})
    columns = [f"{worth.metric} (%)", f"type - {worth.perfect}", *(f"{m}: caught (%)" for m in methods)]
    rows, last = [], None
    for cost in worth.costs:
        cells = [Cell(format_mean(*cost.headline)), Cell(points_text(cost.cost))]
        cells += [Cell(format_number(cost.caught[m], 1) if m in cost.caught else "-") for m in methods]
        rows.append((rate_label(cost.rate) if cost.rate != last else "", cost.label, cells))
        last = cost.rate
    note = (f"A noise type's cell: `{worth.baseline}`'s loss trained as the perfect filter trains, on every clean triplet "
            f"plus that type's noisy ones only. Type - {worth.perfect}: what keeping that type's noisy triplets costs the "
            f"baseline, in points (below 0: it costs), by the claims' paired rule and marks ({SMALLEST}); caught: the share of that "
            "type's noisy triplets each method did not keep, at the epoch the claims read (0 in a warm-up epoch, which "
            f"keeps every row). {worth.metric} mean ± std over seeds, each run at its best held-out epoch.")
    return TableModel(NOISE_TYPES_TITLE, columns, rows, note, seeds_by_row({(c.label, c.rate): c.seeds for c in worth.costs}))
