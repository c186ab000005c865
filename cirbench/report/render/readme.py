"""The README's results, generated from a built report, never typed: a block between two
markers that ``cirbench report --readme README.md`` (or a study's ``readme``) rewrites from
the report it has just written, so a regenerated report updates what the README shows.

Per setting of the report, read from the built report's files alone: a legend of at most
:data:`LEGEND_WORDS` words, the leaderboard (its ``leaderboard.csv``: a table of the claims'
metric with its marks, one of R@10, the ranked methods and the perfect filter), the report's
one-line answers (:func:`~cirbench.report.analysis.rankings.glance.answer_lines`, from the same marks),
the perfect filter's room to win at each noise rate against the calibration's target (from
``selected_metrics.csv``), and the verdict counts of the papers' claims (from ``report.md``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd

from cirbench.report.analysis.verdicts.calibration import ROOM_SHARE
from cirbench.report.analysis.loading.cells import SELECTED_METRICS_FILE, read_final_metrics
from cirbench.report.analysis.rankings.glance import answer_lines
from cirbench.report.analysis.rankings.leaderboard import Leaderboard, answers_words
from cirbench.report.analysis.loading.numbers import rate_label
from cirbench.report.analysis.verdicts.room import percent, points, room_to_win
from cirbench.report.render.layout import slug
from cirbench.report.render.leaderboard_render import (
    BELOW_START_MARK, LEADERBOARD_FILES, board_from_frame, leaderboard_markdown, start_text,
)
from cirbench.results.atomic import atomic_write_text
from cirbench.results.metrics import RECALL
from cirbench.results.labels import ZERO_SHOT_ROW
from cirbench.results.roles import BASELINE, PERFECT_FILTER, role_method

BEGIN = "<!-- results: generated from the committed report by `cirbench report --readme`; do not edit -->"
END = "<!-- results: end -->"
METRIC = RECALL
VERDICTS = re.compile(r"\*\*(Verdicts of \d+ claims: [^*]+)\.\*\*")
LEGEND_WORDS = 60
"""The most words of a setting's text above its first table, its title line included: the rest
is the report's (linked)."""
TARGETS_DOC = "docs/benchmark.md"
"""Where the calibration's targets are set, the room to win's among them (cirbench's docs)."""
TARGETS_ANCHOR = "the-targets"


class ReadmeError(ValueError):
    """A README without the two markers of the generated block, or a report without its tables."""


def _room_lines(cells: pd.DataFrame) -> list[str]:
    """The perfect filter's room to win at each noise rate it ran at, against the calibration's target."""
    roles = {role: role_method(cells, role) for role in (BASELINE, PERFECT_FILTER)}
    per_seed = {m: {float(r): part.set_index("seed")[METRIC] for r, part in cells[cells.method == m].groupby("noise_rate")}
                for m in roles.values()}
    rooms = [room_to_win(per_seed, rate) for rate in sorted(per_seed[roles[PERFECT_FILTER]]) if rate > 0]
    lines = []
    for room in (r for r in rooms if r is not None):
        target = ROOM_SHARE.get(room.rate)
        verdict = (f"; calibration target ≥ {percent(target)}, {'met' if room.share >= target else 'missed'}"
                   if target is not None else "")
        lines.append(f"- {rate_label(room.rate)}: the perfect filter wins back {percent(room.share)} of "
                     f"`{roles[BASELINE]}`'s R@10 loss ({points(room.gap)} points){verdict}.")
    return lines


def _targets(readme_dir: Path) -> str:
    """The calibration's targets as a link from ``readme_dir`` where cirbench's docs sit beside
    it, else their place in cirbench's docs named."""
    if (Path(readme_dir) / TARGETS_DOC).is_file():
        return f"[{TARGETS_DOC}]({TARGETS_DOC}#{TARGETS_ANCHOR})"
    return f"cirbench's {TARGETS_DOC}, the targets"


def legend(board: Leaderboard, links: str) -> str:
    """The words between a setting's title and its first table: what the cells are, the marks, and
    the untrained start's values (``zero_shot``'s, in each table's column) that § is below."""
    answers = answers_words()
    return (f"% of validation queries, mean ± std over seeds {','.join(map(str, board.seeds))}. Marks against "
            f"`{board.baseline}`, the baseline (both 95% intervals on one side of 0): {answers}. {BELOW_START_MARK}: "
            f"below the untrained start, `{ZERO_SHOT_ROW}`{start_text(board)}; underlined: leaders not separated. "
            f"Terms and rule: {links}.")


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
        links = f"[report]({link}/report.md#{slug(folder.name)}-leaderboard)"
        lines += ["", f"**{first.dataset}, `{first.backbone}`, {first.noise_protocol} noise** ([leaderboard]({where})). "
                      + legend(board, links), "", leaderboard_markdown(board, references=False)]
        lines += ["", f"Who wins on {board.metric}, in points against `{board.baseline}`:", "",
                  *(f"- {line}" for line in answer_lines(board))]
        room = _room_lines(cells)
        if room:
            lines += ["", f"Room to win (R@10), against its calibration target ({_targets(readme_dir)}):", "", *room]
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
