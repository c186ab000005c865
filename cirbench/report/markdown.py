"""The report as Markdown (``report.md``): figures linked by relative path, so the file reads
on GitHub next to the committed PNGs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cirbench.report.claims import CLAIMS_TITLE, VERDICT_RULE, Claim, check_line, claims_intro, verdict_summary
from cirbench.report.collapsed import FlagList, flag_lists
from cirbench.report.content import ReportContent
from cirbench.report.room import ROOM_INTRO, ROOM_TITLE
from cirbench.report.tables import to_markdown


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
    """The claims as a Markdown table: claim, source, the checks' numbers, the verdict."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| Claim | Source | Numbers | Verdict |", "|:--|:--|:--|:--|"]
    for claim in claims:
        numbers = "<br>".join(cell(check_line(c)) for c in claim.checks)
        lines.append(f"| {cell(claim.text)} | {cell(claim.source)} | {numbers} | **{cell(claim.verdict_text)}** |")
    return "\n".join(lines)


def render_markdown(content: ReportContent, output: Path) -> str:
    """The whole report as Markdown; image links are relative to ``output``."""
    parts = [f"# {content.title}", "", content.subtitle, ""]
    for section in content.sections:
        parts += [f"## {section.setting.describe()}", ""]
        if section.glance:
            parts += ["**At a glance**", ""] + [f"- {line}" for line in section.glance] + [""]
        if section.room:
            parts += [f"### {ROOM_TITLE}", "", ROOM_INTRO, ""] + [f"- {line}" for line in section.room] + [""]
        if section.claims:
            parts += [f"### {CLAIMS_TITLE}", "", claims_intro(section.claims_metric, section.claims_selection), "",
                      f"**{verdict_summary(section.claims)}**", "", claims_markdown(section.claims), "", VERDICT_RULE, ""]
        if section.claims_figure is not None:
            figure = section.claims_figure
            parts += [figure.caption, "", f"![{figure.title}]({figure.path.relative_to(output).as_posix()})", ""]
        for flags in flag_lists(section.setting):
            parts += [f"### {flags.title}", "", flags_markdown(flags), ""]
        for table in section.tables:
            parts += [f"### {table.title}", "", table.note, "", to_markdown(table), ""]
        for figure in section.figures:
            rel = figure.path.relative_to(output).as_posix()
            parts += [f"### {figure.title}", "", figure.caption, "", f"![{figure.title}]({rel})", ""]
    parts += ["## Failed and missing cells", "", problems_markdown(content.problems), ""]
    parts += ["## Provenance", ""] + [f"- {line}" for line in content.provenance] + [""]
    return "\n".join(parts)
