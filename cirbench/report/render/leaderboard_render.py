"""The leaderboard (:mod:`cirbench.report.analysis.rankings.leaderboard`) as HTML, Markdown, LaTeX (a
``booktabs`` tabular for a paper) and a tidy CSV table (one row per cell)."""

from __future__ import annotations

import html
import math
import textwrap
from typing import Callable

import pandas as pd

from cirbench.report.analysis.rankings.leaderboard import (
    ANSWERS, BEST, BOUND_ROW, LEGACY_WORDS, MARKS, PERFECT_FILTER, RANKED, REFERENCE_ROW, TIED, LeaderCell, Leaderboard,
    LeaderRow, Stat, answers_words, terms,
)
from cirbench.report.analysis.loading.load import COLLAPSE_MARK, TOLD_RATE
from cirbench.report.analysis.loading.numbers import CLAIMS_EPOCH, ON_VALIDATION, format_mean, format_number, rate_label
from cirbench.report.analysis.rankings.tuned import TunedBoard
from cirbench.results.labels import ZERO_SHOT_ROW
from cirbench.results.selection import DEFAULT_RULE

LEADERBOARD_FILES = ("leaderboard.csv", "leaderboard.tex")
TUNED_LEADERBOARD_FILE = "tuned_leaderboard.csv"
"""The tuned leaderboard as data (:func:`tuned_frame`), beside ``leaderboard.csv`` where a setting has one."""
TEX_MARKS: dict[str, str] = {key: answer.tex for key, answer in ANSWERS.items()}
BELOW_START_MARK = "§"
UNRANKED_TITLE = "Not ranked: the perfect filter, the bound and the reference rows (not fine-tuned)"


def _shows_recall(board: Leaderboard) -> bool:
    return bool(board.recall) and board.recall != board.metric


def start_text(board: Leaderboard) -> str:
    """``zero_shot``'s values of the board's columns, e.g. `` (47.10 · 63.20)``."""
    values = [board.metric_start] + ([board.start] if _shows_recall(board) else [])
    shown = [format_number(v) for v in values if math.isfinite(v)]
    return f" ({' · '.join(shown)})" if shown else ""


def legend(board: Leaderboard) -> str:
    """The lines above the table: what each cell holds, at which epoch, and every mark (Markdown)."""
    pair = f"**{board.metric}**, then {board.recall}" if _shows_recall(board) else f"**{board.metric}**"
    answers = answers_words()
    return (
        f"Each cell: {pair}: {ON_VALIDATION}, %, mean ± std over seeds {','.join(map(str, board.seeds))}, "
        f"{board.epochs}. Marks against `{board.baseline}` (both 95% intervals, over seeds and queries, on one side of 0): "
        f"{answers}. **Bold**: ahead of every other ranked method; <u>underlined</u>: leaders not separated. "
        f"{BELOW_START_MARK}: below `zero_shot`{start_text(board)}. {COLLAPSE_MARK}: collapsed on a seed."
        + (f" A method marked ({TOLD_RATE}) read the configured noise rate, which no other method is given: privileged "
           "information real data does not come with."
           if any(TOLD_RATE in row.label for row in board.rows) else "")
    )


def tuned_legend(board: Leaderboard) -> str:
    """The tuned leaderboard's legend (Markdown): what differs from the default one's, which it follows."""
    pair = f"**{board.metric}**, then {board.recall}" if _shows_recall(board) else f"**{board.metric}**"
    return (f"Each cell: {pair} of the picked trial's cells, mean ± std over seeds {','.join(map(str, board.seeds))}, "
            f"{board.epochs}; marks and emphasis as in the default leaderboard, against `{board.baseline}`'s own picked "
            "trial (both 95% intervals, over seeds and queries, on one side of 0).")


def metric_text(cell: LeaderCell) -> str:
    """The claims' metric of a cell, e.g. ``41.74 ± 1.00``, with :data:`BELOW_START_MARK` when below ``zero_shot``'s."""
    return format_mean(cell.metric.mean, cell.metric.std, cell.metric.n) + (BELOW_START_MARK if cell.metric_below_start else "")


def recall_text(cell: LeaderCell) -> str:
    """The R@10 of a cell, with :data:`BELOW_START_MARK` when below ``zero_shot``'s."""
    return format_mean(cell.recall.mean, cell.recall.std, cell.recall.n) + (BELOW_START_MARK if cell.below_start else "")


def cell_mark(cell: LeaderCell, marks: dict[str, str] = MARKS, collapse: str = COLLAPSE_MARK) -> str:
    """The marks beside a cell's metric: its comparison with the baseline, and the collapse mark."""
    return marks.get(cell.versus, "") + (collapse if cell.collapsed else "")


def _pair(cell: LeaderCell | None, board: Leaderboard, emphasis: Callable[[str, str], str], mark: Callable[[LeaderCell], str],
          recall: Callable[[LeaderCell], str]) -> list[str]:
    """A cell's two printed parts (one without R@10 beside the metric): empty when absent."""
    width = 2 if _shows_recall(board) else 1
    if cell is None:
        return [""] * width
    metric = emphasis(metric_text(cell), cell.lead) + (f" {mark(cell)}" if mark(cell) else "")
    return [metric, recall(cell)][:width]


def _html_emphasis(text: str, lead: str) -> str:
    text = html.escape(text)
    return f"<b>{text}</b>" if lead == BEST else f"<u>{text}</u>" if lead == TIED else text


def _title(words: str | None) -> str:
    """A hover text attribute (empty without words)."""
    return f' title="{html.escape(words.replace("`", ""))}"' if words else ""


def _row_html(row: LeaderRow, board: Leaderboard) -> str:
    defined = terms(board)
    label = f'<td class="method"{_title(defined.get(row.label) or defined.get(row.method))}>{html.escape(row.label)}</td>'
    if row.span is not None:
        width = len(board.rates) * (2 if _shows_recall(board) else 1)
        text = metric_text(row.span) + (f" · {recall_text(row.span)}" if _shows_recall(board) else "")
        return f'<tr class="{row.kind}">{label}<td class="span" colspan="{width}">{html.escape(text)} (at every noise rate)</td></tr>'
    parts = []
    for rate in board.rates:
        pair = _pair(row.cells.get(rate), board, _html_emphasis,
                     lambda c: f'<span class="mk {c.versus}">{html.escape(cell_mark(c))}</span>',
                     lambda c: html.escape(recall_text(c)))
        parts += [f'<td class="m">{pair[0]}</td>'] + [f'<td class="r">{p}</td>' for p in pair[1:]]
    return f'<tr class="{row.kind.replace(" ", "-")}">{label}{"".join(parts)}</tr>'


def leaderboard_html(board: Leaderboard) -> str:
    """The leaderboard as an HTML table (the legend is rendered by the page)."""
    width = 2 if _shows_recall(board) else 1
    head = '<tr><th rowspan="2">Method</th>' + "".join(
        f'<th colspan="{width}">{html.escape(rate_label(r))} noise</th>' for r in board.rates) + "</tr>"
    names = [board.metric, board.recall][:width]
    defined = terms(board)
    head += '<tr class="sub">' + "".join(f'<th class="{"m" if i == 0 else "r"}"{_title(defined.get(n))}>{html.escape(n)}</th>'
                                         for _ in board.rates for i, n in enumerate(names)) + "</tr>"
    body = [_row_html(r, board) for r in board.ranked]
    if board.unranked:
        body.append(f'<tr class="unranked-title"><td colspan="{1 + width * len(board.rates)}">{html.escape(UNRANKED_TITLE)}</td></tr>')
        body += [_row_html(r, board) for r in board.unranked]
    return f'<table class="leaderboard"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'


def _md_emphasis(text: str, lead: str) -> str:
    return f"**{text}**" if lead == BEST else f"<u>{text}</u>" if lead == TIED else text


def leaderboard_markdown(board: Leaderboard, references: bool = True) -> str:
    """The leaderboard as Markdown: a table of the claims' metric with its marks, then one of
    R@10 (where it differs), a column per noise rate, so no cell wraps at a GitHub page's width.
    A span row (the bound, a reference row) repeats its value at every rate; ``references``
    False: the ranked methods and the perfect filter only (the README's block)."""
    rows = board.ranked + [r for r in board.unranked if references or r.kind == PERFECT_FILTER]

    def table(name: str, text: Callable[[LeaderCell], str]) -> list[str]:
        lines = [f"| {name} | " + " | ".join(rate_label(r) for r in board.rates) + " |",
                 "|:--|" + "--:|" * len(board.rates)]
        for row in rows:
            if row.kind != RANKED and rows.index(row) == len(board.ranked):
                lines.append("| *not ranked* |" + " |" * len(board.rates))
            cells = [text(row.span) if row.span is not None else text(row.cells[r]) if r in row.cells else ""
                     for r in board.rates]
            lines.append("| " + " | ".join([row.label, *cells]) + " |")
        return lines

    def headline(cell: LeaderCell) -> str:
        return _pair(cell, board, _md_emphasis, cell_mark, recall_text)[0] if cell is not None else ""

    out = table(board.metric, headline)
    if _shows_recall(board):
        out += ["", *table(board.recall, recall_text)]
    return "\n".join(out)


def _tex(text: str) -> str:
    for raw, escaped in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"),
                         ("±", r"$\pm$"), (BELOW_START_MARK, r"\S"), (COLLAPSE_MARK, r"$^\dagger$")):
        text = text.replace(raw, escaped)
    return text


def leaderboard_tex(board: Leaderboard) -> str:
    """The leaderboard as a LaTeX ``tabular`` (needs ``booktabs``), its legend in comments above."""
    width = 2 if _shows_recall(board) else 1
    legend_lines = legend(board).replace("**", "").replace("<u>", "").replace("</u>", "").replace("`", "")
    for mark, tex in TEX_MARKS.items():
        legend_lines = legend_lines.replace(MARKS[mark], tex)
    out = ["% " + line for line in textwrap.wrap(legend_lines, 100)]
    out += [r"\begin{tabular}{l" + "r" * (width * len(board.rates)) + "}", r"\toprule"]
    out.append("Method & " + " & ".join(rf"\multicolumn{{{width}}}{{c}}{{{_tex(rate_label(r))}}}" for r in board.rates) + r" \\")
    if width == 2:
        out.append(" & " + " & ".join(f"{_tex(board.metric)} & {_tex(board.recall)}" for _ in board.rates) + r" \\")
    out.append(r"\midrule")

    def emphasis(text: str, lead: str) -> str:
        return rf"\textbf{{{_tex(text)}}}" if lead == BEST else rf"\underline{{{_tex(text)}}}" if lead == TIED else _tex(text)

    for i, row in enumerate(board.rows):
        if i == len(board.ranked) and i:
            out.append(r"\midrule")
        if row.span is not None:
            text = metric_text(row.span) + (f" / {recall_text(row.span)}" if _shows_recall(board) else "")
            out.append(rf"{_tex(row.label)} & \multicolumn{{{width * len(board.rates)}}}{{c}}{{{_tex(text)}}} \\")
            continue
        cells = [p for r in board.rates for p in _pair(row.cells.get(r), board, emphasis,
                                                        lambda c: cell_mark(c, TEX_MARKS, r"$^\dagger$"),
                                                        lambda c: _tex(recall_text(c)))]
        out.append(" & ".join([_tex(row.label), *cells]) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(out)


def leaderboard_frame(board: Leaderboard) -> pd.DataFrame:
    """The leaderboard as data, one row per cell: its row's kind, method and label, the noise
    rate (the bound: 0; a reference row: empty), both columns' mean, std and seeds, the
    comparison with the baseline (column ``vs_<baseline>``), the lead and the marks."""
    records = []
    for row in board.rows:
        cells = {0.0 if row.kind == "bound" else math.nan: row.span} if row.span is not None else row.cells
        for rate, cell in cells.items():
            records.append({
                "kind": row.kind, "method": row.method, "label": row.label, "noise_rate": rate,
                "metric": board.metric, "metric_mean": cell.metric.mean, "metric_std": cell.metric.std,
                "recall": board.recall, "recall_mean": cell.recall.mean, "recall_std": cell.recall.std,
                "n_seeds": cell.metric.n, f"vs_{board.baseline}": cell.versus, "lead": cell.lead,
                "below_zero_shot": cell.below_start, "collapsed": cell.collapsed, "rule": board.rule,
                "metric_below_zero_shot": cell.metric_below_start,
            })
    return pd.DataFrame.from_records(records)


def tuned_frame(tuned: TunedBoard) -> pd.DataFrame:
    """The tuned leaderboard as data: :func:`leaderboard_frame`'s columns, with each ranked
    cell's picked ``trial`` (0: the defaults) and the ``label`` of its cells (``<method>:trial2``)."""
    frame = leaderboard_frame(tuned.board)
    picks = tuned.picks.set_index(["method", "noise_rate"])
    keys = list(zip(frame.method, frame.noise_rate.astype(float)))
    frame["trial"] = [int(picks.loc[k, "trial"]) if k in picks.index else pd.NA for k in keys]
    frame["cells"] = [str(picks.loc[k, "label"]) if k in picks.index else "" for k in keys]
    return frame


def _answer(word: str) -> str:
    """A ``leaderboard.csv``'s answer as today's key (an older file's word read through :data:`LEGACY_WORDS`)."""
    return LEGACY_WORDS.get(word, word)


def board_from_frame(frame: pd.DataFrame, seeds: list[int]) -> Leaderboard:
    """The leaderboard a ``leaderboard.csv`` holds (:func:`leaderboard_frame`'s inverse, enough
    to render it), over ``seeds`` (which the file counts but does not name): what the README's block shows of a committed report. A file written before
    the claims' metric was marked below ``zero_shot`` gets that mark from its ``zero_shot`` row."""
    first = frame.iloc[0]
    versus = next((c for c in frame.columns if c.startswith("vs_")), "vs_")
    start = frame[(frame.kind == REFERENCE_ROW) & (frame.method == ZERO_SHOT_ROW)]
    starts = (float(start.metric_mean.iloc[0]), float(start.recall_mean.iloc[0])) if len(start) else (math.nan, math.nan)

    def text(value: object) -> str:
        return "" if pd.isna(value) else str(value)

    def cell(row) -> LeaderCell:
        below = getattr(row, "metric_below_zero_shot", math.nan)
        cell = LeaderCell(Stat(float(row.metric_mean), float(row.metric_std), int(row.n_seeds)),
                          Stat(float(row.recall_mean), float(row.recall_std), int(row.n_seeds)),
                          _answer(text(getattr(row, versus, ""))), text(row.lead), bool(row.below_zero_shot), bool(row.collapsed))
        cell.metric_below_start = (bool(below) if not pd.isna(below)
                                   else row.kind != REFERENCE_ROW and cell.metric.mean < starts[0])
        return cell

    rows: dict[tuple[str, str], LeaderRow] = {}
    for row in frame.itertuples(index=False):
        key = (str(row.kind), str(row.label))
        if key not in rows:
            rows[key] = LeaderRow(str(row.kind), str(row.method), str(row.label))
        if row.kind in (BOUND_ROW, REFERENCE_ROW):
            rows[key].span = cell(row)
        else:
            rows[key].cells[float(row.noise_rate)] = cell(row)
    rates = sorted({float(r) for r in frame.loc[frame.kind.isin([RANKED, PERFECT_FILTER]), "noise_rate"]})
    rule = str(first["rule"])
    epochs = CLAIMS_EPOCH if rule == DEFAULT_RULE else f"at the epoch the `{rule}` rule selects"
    return Leaderboard(str(first.metric), text(first.recall), rates, list(rows.values()), rule, epochs, seeds, starts[1],
                       versus[3:], starts[0])
