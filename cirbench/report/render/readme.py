"""The README's results, generated from a built report, never typed: a block between two
markers that ``cirbench report --readme README.md`` (or a study's ``readme``) rewrites from
the report it has just written, so a regenerated report updates what the README shows.

Per setting of the report: the leaderboard itself (its ``leaderboard.csv``: the claims'
metric with its marks and R@10 beside it, at the epoch the claims read, in percent), the
perfect filter's room to win at each noise rate at that epoch (from ``selected_metrics.csv``;
:mod:`cirbench.report.analysis.room`, the report's own wording, in percent and points), and the verdict
counts of the papers' claims (read from ``report.md``, where they are computed).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd

from cirbench.report.analysis.cells import SELECTED_METRICS_FILE, read_final_metrics
from cirbench.report.analysis.room import room_line, room_to_win
from cirbench.report.render.leaderboard_render import LEADERBOARD_FILES, board_from_frame, leaderboard_markdown, legend
from cirbench.results.atomic import atomic_write_text
from cirbench.results.metrics import RECALL
from cirbench.results.roles import BASELINE, PERFECT_FILTER, role_method

BEGIN = "<!-- results: generated from the committed report by `cirbench report --readme`; do not edit -->"
END = "<!-- results: end -->"
METRIC = RECALL
VERDICTS = re.compile(r"\*\*(Verdicts of \d+ claims: [^*]+)\.\*\*")


class ReadmeError(ValueError):
    """A README without the two markers of the generated block, or a report without its tables."""


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


def _read(report_dir: Path) -> tuple[str, list[tuple[Path, pd.DataFrame, pd.DataFrame]]]:
    """``report.md`` and per setting its folder, cells at the claims' epoch and leaderboard."""
    try:
        report_md = (report_dir / "report.md").read_text(encoding="utf-8")
        settings = []
        for file in sorted(report_dir.glob(f"*/{SELECTED_METRICS_FILE}")):
            board = file.parent / LEADERBOARD_FILES[0]
            settings.append((file.parent, read_final_metrics(file), pd.read_csv(board)))
    except (OSError, ValueError) as exc:
        raise ReadmeError(f"{report_dir}: no report to show in the README ({exc})") from None
    if not settings:
        raise ReadmeError(f"{report_dir}: no report to show in the README (no */{SELECTED_METRICS_FILE})")
    return report_md, settings


def results_block(report_dir: Path, readme_dir: Path) -> str:
    """The generated block (markers included) for a README in ``readme_dir`` from the report
    in ``report_dir``; :class:`ReadmeError` when the report lacks its tables."""
    report_dir = Path(report_dir)
    report_md, settings = _read(report_dir)
    link = Path(os.path.relpath(report_dir, readme_dir)).as_posix()
    lines = [BEGIN]
    for folder, cells, frame in settings:
        first = cells.iloc[0]
        seeds = sorted(int(s) for s in cells.seed.unique())
        board = board_from_frame(frame, seeds)
        where = f"{link}/{folder.name}/{LEADERBOARD_FILES[0]}"
        lines += ["", f"**{first.dataset}, `{first.backbone}`, {first.noise_protocol} noise**: the report's leaderboard "
                      f"([{where}]({where})).", "", legend(board), "", leaderboard_markdown(board)]
        room = _room_lines(cells)
        if room:
            lines += ["", "Room to win (what a method that only removes noise can reach here, at the same epochs):", "", *room]
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
