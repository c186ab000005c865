"""The report as one self-contained HTML page (``index.html``): styles inline, every figure
embedded as a base64 PNG, so the single file opens in any browser and can be mailed."""

from __future__ import annotations

import base64
import html
import re

import pandas as pd

from cirbench.report.analysis.rankings.traces import TRACES_INTRO, TRACES_TITLE
from cirbench.report.analysis.verdicts.claims import VERDICT_RULE, Claim, check_line, claims_intro, none_run_line, verdict_summary
from cirbench.report.analysis.loading.collapsed import FlagList
from cirbench.report.analysis.rankings.glance import answer_lines, answers_intro
from cirbench.report.analysis.rankings.leaderboard import ANSWERS, VERSUS, terms_line
from cirbench.report.analysis.statistics.significance import NOT_RUN
from cirbench.report.figures.palette import answer_colour
from cirbench.report.analysis.verdicts.room import ROOM_INTRO
from cirbench.report.figures.figure_file import FigureFile
from cirbench.report.render.content import ReportContent, Section
from cirbench.report.render.layout import (
    CLAIMS, CONTENTS_ANCHOR, CONTENTS_TITLE, FIGURE, FLAGS, GLANCE, PROBLEMS_ANCHOR, PROBLEMS_TITLE, PROVENANCE_ANCHOR,
    PROVENANCE_TITLE, ROOM, Entry, Part, contents, leaderboard_anchor, leaderboard_title, parts, setting_anchor, tuned_anchor,
    tuned_title,
)
from cirbench.report.render.layout import NOTE
from cirbench.report.render.leaderboard_render import leaderboard_html, legend, tuned_legend
from cirbench.report.render.table_text import scrolling, to_html

STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1500px; padding: 0 1.5em; color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2em; margin-top: 2em; }
.subtitle { color: #555; }
table.results, table.problems { border-collapse: collapse; margin: 0.6em 0 0.3em; font-size: 0.9em; }
table.results th, table.results td, table.problems th, table.problems td { padding: 0.25em 0.55em; }
table.results th { border-bottom: 2px solid #333; text-align: right; }
table.results td { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.results td.method, table.results td.noise { text-align: left; }
table.results th:nth-child(-n+2) { text-align: left; }
table.results tr.block-start td { border-top: 1px solid #999; }
table.results td.noise { font-weight: 600; vertical-align: top; }
table.problems th { border-bottom: 2px solid #333; text-align: left; }
table.problems td { border-top: 1px solid #ddd; vertical-align: top; }
.note { color: #555; font-size: 0.85em; margin: 0; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #444; font-size: 0.9em; max-width: 60em; }
ul.glance li { margin: 0.2em 0; }
table.claims { border-collapse: collapse; margin: 0.6em 0 0.3em; font-size: 0.9em; }
table.claims th { border-bottom: 2px solid #333; text-align: left; padding: 0.25em 0.7em; }
table.claims td { border-top: 1px solid #ddd; vertical-align: top; padding: 0.25em 0.7em; }
table.claims td.numbers { font-variant-numeric: tabular-nums; font-size: 0.9em; }
td.verdict { font-weight: 600; white-space: nowrap; }
table.claims details summary { cursor: pointer; color: #555; font-size: 0.9em; }
table.claims details ul { margin: 0.3em 0; padding-left: 1.2em; font-variant-numeric: tabular-nums; font-size: 0.85em; }
table.leaderboard { border-collapse: collapse; margin: 0.4em 0 0.3em; font-size: 0.88em; }
table.leaderboard th { border-bottom: 2px solid #333; padding: 0.2em 0.6em; text-align: center; }
table.leaderboard td { padding: 0.15em 0.5em; text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
table.leaderboard td.method { text-align: left; font-weight: 600; }
table.leaderboard td.r { color: #666; font-size: 0.92em; border-right: 1px solid #ddd; }
table.leaderboard td.span { text-align: center; color: #444; }
table.leaderboard tr.unranked-title td { border-top: 1px solid #999; color: #555; font-style: italic; text-align: left;
                                         padding-top: 0.4em; }
table.leaderboard tr.perfect-filter td, table.leaderboard tr.bound td, table.leaderboard tr.reference td { color: #555; }
table.leaderboard td b { color: #000; }
table.leaderboard span.mk { display: inline-block; width: 1.2em; text-align: left; }
.legend { color: #444; font-size: 0.82em; margin: 0.2em 0; max-width: 75em; }
.context { font-size: 0.9em; margin: 0.15em 0; max-width: 75em; }
table.leaderboard tr.sub th { border-bottom: 1px solid #333; font-weight: normal; font-size: 0.85em; color: #555;
                              padding: 0.1em 0.5em; }
table.leaderboard thead tr:first-child th { border-bottom: 1px solid #999; }
span.top { color: #555; margin-left: 0.2em; }
div.wide { overflow-x: auto; max-width: 100%; }
p, li, figcaption, h2, h3 { overflow-wrap: break-word; }
nav.contents ul { margin: 0.2em 0; } nav.contents li { margin: 0.1em 0; }
h2.leaderboard { margin-top: 0.8em; font-size: 1.2em; }
code { background: #f3f3f3; padding: 0 0.2em; border-radius: 3px; font-size: 0.92em; }
ul.answers { margin: 0.2em 0 0.3em; padding-left: 1.2em; } ul.answers li { margin: 0.1em 0; }
p.answers-intro { margin: 0.3em 0 0; }
.terms { color: #333; font-size: 0.85em; margin: 0.2em 0; max-width: 90em; }
th[title], td[title] { cursor: help; }
h1 { font-size: 1.5em; margin-top: 0.4em; }
"""


def _verdict_css() -> str:
    """Each answer's and claims verdict's colour, from the one place they are set."""
    verdicts = [*ANSWERS, *VERSUS, NOT_RUN]
    return "\n".join(f"td.{v.replace(' ', '-')}, span.mk.{v.replace(' ', '-')} {{ color: {answer_colour(v)}; }}"
                     for v in verdicts)


def _image(figure: FigureFile) -> str:
    path = figure.path
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    alt = html.escape(figure.alt or figure.title)
    return f'<img alt="{alt}" data-file="{html.escape(path.name)}" src="data:image/png;base64,{data}">'


def prose(text: str) -> str:
    """``text`` as HTML with the report's inline Markdown rendered: `code`, **bold** and <u>underline</u>."""
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)
    return re.sub(r"&lt;u&gt;(.+?)&lt;/u&gt;", r"<u>\1</u>", out)


def problems_html(problems: pd.DataFrame) -> str:
    """The failed, interrupted and never-run cells as an HTML table (or a line saying none)."""
    if problems.empty:
        return "<p>Every cell of the grid completed.</p>"
    head = "".join(f"<th>{h}</th>" for h in ("Dataset", "Backbone", "Protocol", "Method", "Noise", "Seed", "Status", "Error"))
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            p.dataset, p.backbone, p.noise_protocol, p.method, f"{p.noise_rate:g}", p.seed, p.status, p.error)) + "</tr>"
        for p in problems.itertuples(index=False)
    )
    return scrolling(f'<table class="problems"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>')


def flags_html(flags: FlagList) -> str:
    """One list of flagged cells as an HTML table, after its rule (or a line saying none)."""
    if not flags.rows:
        return f'<p class="note">{html.escape(flags.none)} {html.escape(flags.rule)}</p>'
    head = "".join(f"<th>{h}</th>" for h in ("Method", "Noise", "Seed", "Reason"))
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in flags.rows)
    return (f'<p class="note">{html.escape(flags.rule)}</p>'
            + scrolling(f'<table class="problems collapsed"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'))


def claims_html(claims: list[Claim]) -> str:
    """The claims as an HTML table, one line per claim (number, claim, source, verdict), its
    comparisons' numbers folded under the claim, each verdict coloured by its kind."""
    head = "".join(f"<th>{h}</th>" for h in ("#", "Claim", "Source", "Verdict"))
    rows = []
    for number, claim in enumerate(claims, 1):
        items = "".join(f"<li>{prose(check_line(c))}</li>" for c in claim.checks)
        noun = "comparison" if len(claim.checks) == 1 else "comparisons"
        details = f"<details><summary>{len(claim.checks)} {noun}</summary><ul>{items}</ul></details>" if items else ""
        kind = claim.verdict.replace(" ", "-")
        rows.append(f"<tr><td>{number}</td><td>{prose(claim.text)}{details}</td><td>{prose(claim.source)}</td>"
                    f'<td class="verdict {kind}">{prose(claim.verdict_text)}</td></tr>')
    return scrolling(f'<table class="claims"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _items(lines: list[str]) -> str:
    return '<ul class="glance">' + "".join(f"<li>{prose(line)}</li>" for line in lines) + "</ul>"


def _traces(section: Section) -> list[str]:
    """The claims that do not hold with their measured causes (none: nothing)."""
    if not section.traces:
        return []
    return [f"<p><strong>{html.escape(TRACES_TITLE)}.</strong> {prose(TRACES_INTRO)}</p>",
            _items([trace.text() for trace in section.traces])]


def _part_html(part: Part, section: Section) -> list[str]:
    """One titled part of a section: its heading (anchored) and its body."""
    out = [f'<h3 id="{part.anchor}">{html.escape(part.title)}</h3>']
    if part.kind == FIGURE:
        figure = part.item
        return out + [f"<figure>{_image(figure)}<figcaption>{prose(figure.caption)}</figcaption></figure>"]
    if part.kind == CLAIMS:
        if none_run_line(section.claims, section.setting):
            return out + [f'<p class="note">{prose(none_run_line(section.claims, section.setting))}</p>']
        intro = claims_intro(section.claims_metric, section.claims_selection)
        return out + [f'<p class="note">{prose(intro)}</p>', f"<p><strong>{prose(verdict_summary(section.claims))}</strong></p>",
                      claims_html(section.claims), f'<p class="note">{prose(VERDICT_RULE)}</p>', *_traces(section)]
    if part.kind == GLANCE:
        return out + [_items(part.item)]
    if part.kind == ROOM:
        return out + [f'<p class="note">{prose(ROOM_INTRO)}</p>', _items(part.item)]
    if part.kind == FLAGS:
        return out + [flags_html(part.item)]
    if part.kind == NOTE:
        return out + [f'<p class="note">{prose(part.item)}</p>']
    return out + [f'<p class="note">{prose(part.item.note)}</p>', to_html(part.item)]


def _contents_html(entries: list[Entry]) -> str:
    def items(level: list[Entry]) -> str:
        return "<ul>" + "".join(
            f'<li><a href="#{e.anchor}">{html.escape(e.title)}</a>{items(list(e.children)) if e.children else ""}</li>'
            for e in level) + "</ul>"

    return f'<nav class="contents"><h2 id="{CONTENTS_ANCHOR}">{CONTENTS_TITLE}</h2>{items(entries)}</nav>'


def render_html(content: ReportContent) -> str:
    """The whole report as one HTML document with every figure embedded: the leaderboards
    first, then the contents, then each setting's parts (:mod:`cirbench.report.render.layout`)."""
    out = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(content.title)}</title><style>{STYLE}{_verdict_css()}</style></head><body>",
        f"<h1>{html.escape(content.title)}</h1>", f'<p class="subtitle">{html.escape(content.subtitle)}</p>',
    ]
    for section in content.sections:
        if section.leaderboard is not None:
            board = section.leaderboard
            out += [f'<h2 class="leaderboard" id="{leaderboard_anchor(section)}">{html.escape(leaderboard_title(section))}</h2>',
                    f'<p class="answers-intro">{prose(answers_intro(board))}</p>',
                    '<ul class="answers">' + "".join(f"<li>{prose(line)}</li>" for line in answer_lines(board)) + "</ul>",
                    f'<p class="terms">{prose(terms_line(board))}</p>',
                    *(f'<p class="context">{prose(line)}</p>' for line in section.context),
                    f'<p class="legend">{prose(legend(section.leaderboard))}</p>', scrolling(leaderboard_html(section.leaderboard))]
        if section.tuned is not None:
            tuned = section.tuned
            out += [f'<h2 class="leaderboard" id="{tuned_anchor(section)}">{html.escape(tuned_title(section))}</h2>',
                    f'<p class="answers-intro">{prose(answers_intro(tuned.board))}</p>',
                    '<ul class="answers">' + "".join(f"<li>{prose(line)}</li>" for line in answer_lines(tuned.board)) + "</ul>",
                    f'<p class="context">{prose(tuned.picks_line())}</p>', f'<p class="context">{prose(tuned.changes_line())}</p>',
                    f'<p class="legend">{prose(tuned_legend(tuned.board))}</p>', scrolling(leaderboard_html(tuned.board))]
    out.append(_contents_html(contents(content)))
    for section in content.sections:
        out.append(f'<h2 id="{setting_anchor(section)}">{html.escape(section.setting.describe())}</h2>')
        for part in parts(section):
            out += _part_html(part, section)
    out += [f'<h2 id="{PROBLEMS_ANCHOR}">{PROBLEMS_TITLE}</h2>', problems_html(content.problems)]
    out += [f'<h2 id="{PROVENANCE_ANCHOR}">{PROVENANCE_TITLE}</h2><ul>'
            + "".join(f"<li>{html.escape(line)}</li>" for line in content.provenance) + "</ul>"]
    out.append("</body></html>")
    return "\n".join(out)
