"""The report as one self-contained HTML page (``index.html``): styles inline, every figure
embedded as a base64 PNG, so the single file opens in any browser and can be mailed."""

from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd

from cirbench.report.claims import CLAIMS_TITLE, VERDICT_RULE, Claim, check_line, claims_intro, verdict_summary
from cirbench.report.collapsed import FlagList, flag_lists
from cirbench.report.content import ReportContent
from cirbench.report.room import ROOM_INTRO, ROOM_TITLE
from cirbench.report.tables import to_html

STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1500px; padding: 0 1.5em; color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2em; margin-top: 2em; }
.subtitle { color: #555; }
table.results, table.problems { border-collapse: collapse; margin: 0.6em 0 0.3em; font-size: 0.9em; }
table.results th, table.results td, table.problems th, table.problems td { padding: 0.25em 0.7em; }
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
td.holds { color: #1a7f37; } td.does-not-hold { color: #b42318; } td.inconclusive { color: #9a6700; }
td.not-run { color: #777; }
"""


def _image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(path.name)}" data-file="{html.escape(path.name)}" src="data:image/png;base64,{data}">'


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
    return f'<table class="problems"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def flags_html(flags: FlagList) -> str:
    """One list of flagged cells as an HTML table, after its rule (or a line saying none)."""
    if not flags.rows:
        return f'<p class="note">{html.escape(flags.none)} {html.escape(flags.rule)}</p>'
    head = "".join(f"<th>{h}</th>" for h in ("Method", "Noise", "Seed", "Reason"))
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in flags.rows)
    return (f'<p class="note">{html.escape(flags.rule)}</p>'
            f'<table class="problems collapsed"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


def claims_html(claims: list[Claim]) -> str:
    """The claims as an HTML table, each verdict coloured by its kind."""
    head = "".join(f"<th>{h}</th>" for h in ("Claim", "Source", "Numbers", "Verdict"))
    rows = []
    for claim in claims:
        numbers = "<br>".join(html.escape(check_line(c)) for c in claim.checks)
        kind = claim.verdict.replace(" ", "-")
        rows.append(f"<tr><td>{html.escape(claim.text)}</td><td>{html.escape(claim.source)}</td>"
                    f'<td class="numbers">{numbers}</td><td class="verdict {kind}">{html.escape(claim.verdict_text)}</td></tr>')
    return f'<table class="claims"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def render_html(content: ReportContent) -> str:
    """The whole report as one HTML document with every figure embedded."""
    out = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(content.title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(content.title)}</h1>", f'<p class="subtitle">{html.escape(content.subtitle)}</p>',
    ]
    for section in content.sections:
        out.append(f"<h2>{html.escape(section.setting.describe())}</h2>")
        if section.glance:
            items = "".join(f"<li>{html.escape(g)}</li>" for g in section.glance)
            out.append(f'<h3>At a glance</h3><ul class="glance">{items}</ul>')
        if section.room:
            items = "".join(f"<li>{html.escape(line)}</li>" for line in section.room)
            out += [f"<h3>{html.escape(ROOM_TITLE)}</h3>", f'<p class="note">{html.escape(ROOM_INTRO)}</p>',
                    f'<ul class="glance">{items}</ul>']
        if section.claims:
            intro = claims_intro(section.claims_metric, section.claims_selection)
            out += [f"<h3>{html.escape(CLAIMS_TITLE)}</h3>", f'<p class="note">{html.escape(intro)}</p>',
                    f"<p><strong>{html.escape(verdict_summary(section.claims))}</strong></p>",
                    claims_html(section.claims), f'<p class="note">{html.escape(VERDICT_RULE)}</p>']
        if section.claims_figure is not None:
            figure = section.claims_figure
            out.append(f"<figure>{_image(figure.path)}<figcaption>{html.escape(figure.caption)}</figcaption></figure>")
        for flags in flag_lists(section.setting):
            out += [f"<h3>{html.escape(flags.title)}</h3>", flags_html(flags)]
        for table in section.tables:
            out += [f"<h3>{html.escape(table.title)}</h3>", f'<p class="note">{html.escape(table.note)}</p>', to_html(table)]
        for figure in section.figures:
            out.append(
                f"<figure><h3>{html.escape(figure.title)}</h3>{_image(figure.path)}"
                f"<figcaption>{html.escape(figure.caption)}</figcaption></figure>"
            )
    out += ["<h2>Failed and missing cells</h2>", problems_html(content.problems)]
    out += ["<h2>Provenance</h2><ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in content.provenance) + "</ul>"]
    out.append("</body></html>")
    return "\n".join(out)
