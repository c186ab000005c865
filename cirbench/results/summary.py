"""The run summary of ``cirbench run``: per cell, the final headline recall, purity and
AUROC as the store holds them, the collapse and below-chance flags, and the cells whose
final validation had non-finite scores (pandas only: the CLI prints it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cirbench.results.chance import judge_below_chance
from cirbench.results.headline import headline_rows
from cirbench.results.store import MAIN_SCORE, CellKey, ResultsStore

SUMMARY_RECALLS = ("recall@1", "recall@10", "recall@50")


@dataclass
class SummaryRow:
    """One cell of the summary; a value is None where the store holds none."""

    key: CellKey
    status: str
    recall: dict[str, float | None]
    purity: float | None
    auroc: float | None
    collapse_reason: str = ""
    below_chance_reason: str = ""
    privileged: str = ""
    """What the run read beside the data, in words (``reads the true flags``, ``told the
    noise rate``; a kept-set cell inherits its source's), or ``""``."""


@dataclass
class RunSummary:
    """The summary rows in grid order (reference rows last) and the (run id, count) of every
    cell with validation queries whose score was NaN or infinite."""

    rows: list[SummaryRow] = field(default_factory=list)
    nonfinite: list[tuple[str, int]] = field(default_factory=list)


def _grid_order(order: list[str]):
    """Sort key of a cell: grid order of its method, then noise rate and seed; reference rows last."""
    index = {name: i for i, name in enumerate(order)}
    return lambda cell: (math.isnan(cell[0].noise_rate), index.get(cell[0].method, len(index)), cell[0].noise_rate, cell[0].seed)


def _final(frame, column: str) -> float | None:
    """``column`` of the last epoch's first row of ``frame`` (None when it is empty)."""
    last = frame[frame.epoch == frame.epoch.max()] if len(frame) else frame
    return float(last[column].iloc[0]) if len(last) else None


def run_summary(store: ResultsStore, cells: list[tuple[CellKey, str]], order: list[str]) -> RunSummary:
    """The summary of ``cells`` ((key, outcome status) pairs) from ``store``, in the order of
    the method labels ``order``. A locked cell's parts are someone else's: its numbers are not
    read. Raises :class:`~cirbench.results.store.ResultsFolderError` on an unreadable part."""
    ids = [key.run_id for key, status in cells if status != "locked"]
    metrics, purity, runs = (store.read(table, ids) for table in ("metrics", "purity", "runs"))
    flags = judge_below_chance(runs, purity).set_index("run_id")  # "" when healthy (cirbench.results.collapse, .chance)
    reasons, chance = flags.collapse_reason.fillna(""), flags.below_chance_reason
    privileged = {row.run_id: ", ".join(words for words, read in (("reads the true flags", row.is_oracle),
                                                                   ("told the noise rate", row.reads_noise_rate))
                                        if read == True)  # noqa: E712 - a flag may be null in old runs
                  for row in runs.itertuples(index=False)}
    purity = purity[(purity.score_name == MAIN_SCORE) & (purity.noise_type == "all")]
    summary = RunSummary(nonfinite=[(row.run_id, int(row.n_nonfinite_queries))
                                    for row in runs[runs.n_nonfinite_queries > 0].itertuples(index=False)])
    for key, status in sorted(cells, key=_grid_order(order)):
        m = headline_rows(metrics[metrics.run_id == key.run_id])  # FashionIQ: category average
        last = m[m.epoch == m.epoch.max()] if len(m) else m
        value = dict(zip(last.metric, last.value))
        p = purity[purity.run_id == key.run_id]
        summary.rows.append(SummaryRow(
            key, status, {name: value.get(name) for name in SUMMARY_RECALLS}, _final(p, "purity"), _final(p, "auroc"),
            str(reasons.get(key.run_id, "")), str(chance.get(key.run_id, "")), privileged.get(key.run_id, ""),
        ))
    return summary
