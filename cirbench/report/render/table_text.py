"""A :class:`~cirbench.report.tables.model.TableModel` as text: a GitHub-flavoured Markdown
table and an HTML table, the highest mean of a column followed by its mark."""

from __future__ import annotations

import html

from cirbench.report.tables.model import TOP_MARK, Cell, TableModel

SCROLL_CLASS = "wide"
"""The box every HTML table of the report sits in: it scrolls sideways inside the page
(:data:`~cirbench.report.render.html.STYLE`), so a wide table never widens the page."""


def scrolling(table: str) -> str:
    """An HTML ``table`` in its own sideways-scrolling box (:data:`SCROLL_CLASS`)."""
    return f'<div class="{SCROLL_CLASS}">{table}</div>'


def to_markdown(table: TableModel) -> str:
    """A GitHub-flavoured Markdown table, the highest mean followed by :data:`TOP_MARK`."""
    def mark(cell: Cell) -> str:
        return f"{cell.text} {TOP_MARK}" if cell.rank == 1 else cell.text

    header = ["Noise", "Method", *table.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([":--", ":--"] + ["--:"] * len(table.columns)) + "|"]
    for noise, method, cells in table.rows:
        lines.append("| " + " | ".join([noise, method, *(mark(c) for c in cells)]) + " |")
    return "\n".join(lines)


def to_html(table: TableModel) -> str:
    """An HTML table, the highest mean followed by :data:`TOP_MARK`, the noise rate spanning its rows."""
    def mark(cell: Cell) -> str:
        text = html.escape(cell.text)
        return f'{text}<span class="top">{TOP_MARK}</span>' if cell.rank == 1 else text

    spans, current = [], None
    for noise, _, _ in table.rows:
        if noise:
            spans.append(1)
            current = len(spans) - 1
        elif current is not None:
            spans[current] += 1
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ["Noise", "Method", *table.columns])
    body, block = [], 0
    for noise, method, cells in table.rows:
        first = ""
        if noise:
            first = f'<td rowspan="{spans[block]}" class="noise">{html.escape(noise)}</td>'
            block += 1
        row_class = ' class="block-start"' if noise else ""
        tds = "".join(f"<td>{mark(c)}</td>" for c in cells)
        body.append(f"<tr{row_class}>{first}<td class=\"method\">{html.escape(method)}</td>{tds}</tr>")
    return scrolling(f'<table class="results"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>')
