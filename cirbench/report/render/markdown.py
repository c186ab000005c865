"""The report as Markdown (``report.md``): figures linked by relative path, so the file reads
on GitHub next to the committed PNGs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cirbench.report.analysis.rankings.traces import TRACES_INTRO, TRACES_TITLE, Trace
from cirbench.report.analysis.verdicts.claims import VERDICT_RULE, Claim, check_line, claims_intro, none_run_line, verdict_summary
from cirbench.report.analysis.loading.collapsed import FlagList
from cirbench.report.analysis.rankings.glance import answer_lines, answers_intro
from cirbench.report.analysis.rankings.leaderboard import terms_line
from cirbench.report.analysis.verdicts.room import ROOM_INTRO
from cirbench.report.render.content import ReportContent, Section
from cirbench.report.render.layout import (
    CLAIMS, CONTENTS_ANCHOR, CONTENTS_TITLE, FIGURE, FLAGS, GLANCE, PROBLEMS_ANCHOR, PROBLEMS_TITLE, PROVENANCE_ANCHOR,
    PROVENANCE_TITLE, ROOM, Entry, Part, contents, leaderboard_anchor, leaderboard_title, parts, setting_anchor, tuned_anchor,
    tuned_title,
)
from cirbench.report.render.layout import NOTE
from cirbench.report.render.leaderboard_render import leaderboard_markdown, legend, tuned_legend
from cirbench.report.render.table_text import to_markdown


def problems_markdown(problems: pd.DataFrame) -> str:
    """The failed, interrupted and never-run cells as a Markdown table (or a line saying none)."""
    if problems.empty:
        return "Every cell of the grid completed."
    lines = ["| Dataset | Backbone | Protocol | Method | Noise | Seed | Status | Error |", "|" + "---|" * 8]
    for p in problems.itertuples(index=False):
        error = str(p.error).replace("|", "\\|")
        cells = [p.dataset, p.backbone, p.noise_protocol, p.method, f"{p.noise_rate:g}", p.seed, p.status, error]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def flags_markdown(flags: FlagList) -> str:
    """One list of flagged cells as a Markdown table, after its rule (or a line saying none)."""
    if not flags.rows:
        return f"{flags.none} {flags.rule}"
    lines = [flags.rule, "", "| Method | Noise | Seed | Reason |", "|:--|:--|:--|:--|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in flags.rows]
    return "\n".join(lines)


def claims_markdown(claims: list[Claim]) -> str:
    """The claims as a Markdown table, one line per claim (number, claim, source, verdict),
    its comparisons' numbers folded under the claim in a ``<details>`` block."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| # | Claim | Source | Verdict |", "|--:|:--|:--|:--|"]
    for number, claim in enumerate(claims, 1):
        numbers = "<br>".join(cell(check_line(c)) for c in claim.checks)
        noun = "comparison" if len(claim.checks) == 1 else "comparisons"
        details = f" <details><summary>{len(claim.checks)} {noun}</summary>{numbers}</details>" if numbers else ""
        lines.append(f"| {number} | {cell(claim.text)}{details} | {cell(claim.source)} | **{cell(claim.verdict_text)}** |")
    return "\n".join(lines)


def traces_markdown(traces: list[Trace]) -> list[str]:
    """The claims that do not hold, each with its measured cause, as Markdown lines (none: nothing)."""
    if not traces:
        return []
    return [f"**{TRACES_TITLE}.** {TRACES_INTRO}", "", *(f"- {trace.text()}" for trace in traces), ""]


def _heading(level: int, anchor: str, title: str) -> list[str]:
    return [f'<a id="{anchor}"></a>', "", f"{'#' * level} {title}", ""]


def _part_markdown(part: Part, section: Section, output: Path) -> list[str]:
    """One titled part of a section: its anchored heading and its body."""
    out = _heading(3, part.anchor, part.title)
    if part.kind == FIGURE:
        figure = part.item
        return out + [figure.caption, "", f"![{figure.alt or figure.title}]({figure.path.relative_to(output).as_posix()})", ""]
    if part.kind == CLAIMS:
        if none_run_line(section.claims, section.setting):
            return out + [none_run_line(section.claims, section.setting), ""]
        return out + [claims_intro(section.claims_metric, section.claims_selection), "",
                      f"**{verdict_summary(section.claims)}**", "", claims_markdown(section.claims), "", VERDICT_RULE, "",
                      *traces_markdown(section.traces)]
    if part.kind == GLANCE:
        return out + [f"- {line}" for line in part.item] + [""]
    if part.kind == ROOM:
        return out + [ROOM_INTRO, ""] + [f"- {line}" for line in part.item] + [""]
    if part.kind == FLAGS:
        return out + [flags_markdown(part.item), ""]
    if part.kind == NOTE:
        return out + [part.item, ""]
    return out + [part.item.note, "", to_markdown(part.item), ""]


def _contents_markdown(entries: list[Entry], depth: int = 0) -> list[str]:
    lines = []
    for entry in entries:
        lines.append(f"{'  ' * depth}- [{entry.title}](#{entry.anchor})")
        lines += _contents_markdown(list(entry.children), depth + 1)
    return lines


def render_markdown(content: ReportContent, output: Path) -> str:
    """The whole report as Markdown, in the HTML page's order; image links are relative to ``output``."""
    parts_out = [f"# {content.title}", "", content.subtitle, ""]
    for section in content.sections:
        if section.leaderboard is not None:
            board = section.leaderboard
            parts_out += _heading(2, leaderboard_anchor(section), leaderboard_title(section))
            parts_out += [answers_intro(board), "", *(f"- {line}" for line in answer_lines(board)), "", terms_line(board), ""]
            parts_out += [*(f"{line}\n" for line in section.context)]
            parts_out += [legend(section.leaderboard), "", leaderboard_markdown(section.leaderboard), ""]
        if section.tuned is not None:
            tuned = section.tuned
            parts_out += _heading(2, tuned_anchor(section), tuned_title(section))
            parts_out += [answers_intro(tuned.board), "", *(f"- {line}" for line in answer_lines(tuned.board)), ""]
            parts_out += [tuned.picks_line(), "", tuned.changes_line(), ""]
            parts_out += [tuned_legend(tuned.board), "", leaderboard_markdown(tuned.board, references=False), ""]
    parts_out += _heading(2, CONTENTS_ANCHOR, CONTENTS_TITLE) + _contents_markdown(contents(content)) + [""]
    for section in content.sections:
        parts_out += _heading(2, setting_anchor(section), section.setting.describe())
        for part in parts(section):
            parts_out += _part_markdown(part, section, output)
    parts_out += _heading(2, PROBLEMS_ANCHOR, PROBLEMS_TITLE) + [problems_markdown(content.problems), ""]
    parts_out += _heading(2, PROVENANCE_ANCHOR, PROVENANCE_TITLE) + [f"- {line}" for line in content.provenance] + [""]
    return "\n".join(parts_out)
