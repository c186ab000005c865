"""The README's results, generated from a built report, never typed: a block between two
markers that ``cirbench report --readme README.md`` (or a study's ``readme``) rewrites from
the report it has just written, so a regenerated report updates what the README shows.

Per setting of the report: R@10 at the last epoch, mean ± std over seeds, of every compared
method at every noise rate (from the setting's ``final_metrics.csv``), the perfect filter's
room to win at each noise rate (:mod:`cirbench.report.room`, the report's own wording), and
the verdict counts of the papers' claims (read from ``report.md``, where they are computed).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd

from cirbench.report.cells_csv import FINAL_METRICS_FILE, read_final_metrics
from cirbench.report.room import room_line, room_to_win
from cirbench.results.atomic import atomic_write_text
from cirbench.results.metrics import RECALL
from cirbench.results.roles import BASELINE, PERFECT_FILTER, role_method

BEGIN = "<!-- results: generated from the committed report by `cirbench report --readme`; do not edit -->"
END = "<!-- results: end -->"
METRIC = RECALL
VERDICTS = re.compile(r"\*\*(Verdicts of \d+ claims: [^*]+)\.\*\*")


class ReadmeError(ValueError):
    """A README without the two markers of the generated block, or a report without its tables."""


def _order(methods: list[str], oracles: set[str], baseline: str) -> list[str]:
    """The baseline first, perfect filters last, the others by name (the report's order)."""
    return sorted(methods, key=lambda m: (m in oracles, m != baseline, m))


def _recall_table(cells: pd.DataFrame) -> list[str]:
    """The Markdown table: one row per compared method (no ablation row, no sweep trial); the
    baseline and the perfect filter by role (:func:`~cirbench.results.roles.role_method`: the
    table's ``role`` column, the legacy roles without it)."""
    compared = cells[~cells.method.str.contains(":")]
    stats = compared.groupby(["method", "noise_rate"])[METRIC].agg(["mean", "std"])
    rates = sorted(compared.noise_rate.unique())
    baseline = role_method(compared, BASELINE)
    oracles = {role_method(compared, PERFECT_FILTER)} & set(compared.method)
    lines = ["| method | " + " | ".join(f"{r:.0%} noise" for r in rates) + " |", "|:--|" + "--:|" * len(rates)]
    for method in _order(list(compared.method.unique()), oracles, baseline):
        row = []
        for rate in rates:
            if (method, rate) in stats.index:
                mean, std = stats.loc[(method, rate)]
                row.append(f"{mean:.3f} ± {std:.3f}" if pd.notna(std) else f"{mean:.3f}")
            else:
                row.append(f"= `{baseline}`" if method in oracles and rate == 0 else "-")
        name = f"`{method}` (perfect filter)" if method in oracles else f"`{method}`"
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return lines


def _room_lines(cells: pd.DataFrame) -> list[str]:
    """The report's line of the perfect filter's room to win at each noise rate it ran at."""
    roles = {role: role_method(cells, role) for role in (BASELINE, PERFECT_FILTER)}
    per_seed = {m: {float(r): part.set_index("seed")[METRIC] for r, part in cells[cells.method == m].groupby("noise_rate")}
                for m in roles.values()}
    rooms = [room_to_win(per_seed, rate) for rate in sorted(per_seed[roles[PERFECT_FILTER]]) if rate > 0]
    return [f"- {room_line(room, baseline=roles[BASELINE])}" for room in rooms if room is not None]


def _verdicts(report_md: str, cells: pd.DataFrame) -> str:
    """The verdict counts of the setting's section of ``report.md`` ("" when it has none)."""
    first = cells.iloc[0]
    heading = f"\n## {first.dataset}, {first.backbone} backbone, {first.noise_protocol} noise"
    section = report_md.split(heading, 1)[1].split("\n## ", 1)[0] if heading in report_md else ""
    found = VERDICTS.search(section)
    return found[1] if found else ""


def results_block(report_dir: Path, readme_dir: Path) -> str:
    """The generated block (markers included) for a README in ``readme_dir`` from the report
    in ``report_dir``; :class:`ReadmeError` when the report lacks its tables."""
    report_dir = Path(report_dir)
    try:
        report_md = (report_dir / "report.md").read_text(encoding="utf-8")
        table = read_final_metrics(report_dir)
    except (OSError, ValueError) as exc:
        raise ReadmeError(f"{report_dir}: no report to show in the README ({exc})") from None
    link = Path(os.path.relpath(report_dir, readme_dir)).as_posix()
    lines = [BEGIN]
    for (dataset, backbone, protocol), cells in table.groupby(["dataset", "backbone", "noise_protocol"], sort=True):
        seeds = ",".join(str(s) for s in sorted(cells.seed.unique()))
        slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in f"{dataset}_{backbone}_{protocol}")
        lines += ["", f"**{dataset}, `{backbone}`, {protocol} noise**: R@10 at the last epoch, mean ± std over seeds "
                      f"{seeds} ([{link}/{slug}/{FINAL_METRICS_FILE}]({link}/{slug}/{FINAL_METRICS_FILE})).", ""]
        lines += _recall_table(cells)
        room = _room_lines(cells)
        if room:
            lines += ["", "Room to win (what a method that only removes noise can reach here):", "", *room]
        verdicts = _verdicts(report_md, cells)
        if verdicts:
            lines += ["", f"The papers' claims ([{link}/report.md]({link}/report.md)): {verdicts}."]
    return "\n".join([*lines, "", END])


def update_readme(readme: Path, report_dir: Path) -> bool:
    """Rewrite the generated block of ``readme`` from ``report_dir``; whether it changed.
    :class:`ReadmeError` naming the file when it lacks the markers."""
    readme = Path(readme)
    text = readme.read_text(encoding="utf-8")
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ReadmeError(f"{readme}: needs one generated block, a line {BEGIN!r} and after it a line {END!r}")
    head, rest = text.split(BEGIN, 1)
    new = head + results_block(report_dir, readme.parent) + rest.split(END, 1)[1]
    if new != text:
        atomic_write_text(new, readme)
    return new != text
