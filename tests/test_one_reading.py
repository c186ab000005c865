"""One reading of the report (issue 59): every table and figure that reads recall reads it at
the claims' epoch (each run's held-out-selected epoch) or says which epoch it reads; the claims,
the forest plot and the room to win speak in percent and percentage points; the first screen
says what the data are; the figures are scaled to what they compare; bold and underline are
the leaderboard's only. On test_leaderboard's small study, whose held-out split selects the
first of two epochs and whose last epoch is 8 points lower."""

from __future__ import annotations

import html
import re

import pandas as pd
import pytest

from cirbench.report import load_results
from cirbench.report.analysis.verdicts.claims import VERDICT_RULE, Check, check_line, claims_intro, paper_claims
from cirbench.report.analysis.loading.numbers import CLAIMS_EPOCH, LAST_EPOCH, format_mean
from cirbench.report.analysis.loading.selection import rule_view
from cirbench.report.analysis.statistics.significance import HOLDS, Comparison
from cirbench.report.figures.forest import VERDICT_STYLES, ForestRow, x_limits
from cirbench.report.figures.gain_figure import y_limits
from cirbench.report.figures.palette import ORACLE_STYLE, TOL
from cirbench.report.render.content import assemble
from cirbench.report.analysis.rankings.glance import answer_lines
from cirbench.report.render.leaderboard_render import leaderboard_html, legend
from cirbench.report.render.table_text import to_html, to_markdown
from cirbench.report.tables.model import TOP_MARK
from test_leaderboard import DECLINE, N_QUERIES, write_study

RULE_TABLES = {"Model selection"}
"""The tables that exist to compare the selection rules: they name every rule they read."""
EVERY_EPOCH = "after every epoch"


@pytest.fixture(scope="module")
def content(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("one") / "results"
    write_study(root)
    data = load_results(root)
    return data.settings[0], assemble(data, tmp_path_factory.mktemp("out"))


def _selected(setting) -> pd.DataFrame:
    """R@10 in percent per (noise rate, method) at the claims' epoch, and at the last."""
    rows = []
    for name, view in (("claims", rule_view(setting, "holdout").setting), ("last", setting)):
        metrics = view.metrics[(view.metrics.split == "val") & (view.metrics.metric == "recall@10")]
        last = metrics.loc[metrics.groupby("run_id").epoch.idxmax()].set_index("run_id").value * 100
        runs = setting.runs.set_index("run_id")[["noise_rate", "method"]].join(last.rename(name), how="inner")
        rows.append(runs.groupby(["noise_rate", "method"])[name].agg(["mean", "std", "count"]).add_prefix(f"{name}_"))
    return pd.concat(rows, axis=1)


def _board_metric(setting) -> dict[tuple[float, str], float]:
    """The claims' metric (Avg(R@5, R_sub@1), percent) per (noise rate, method) at the claims' epoch, mean over seeds."""
    view = rule_view(setting, "holdout").setting
    metrics = view.metrics[(view.metrics.split == "val") & view.metrics.metric.isin(["recall@5", "recall_subset@1"])]
    last = metrics[metrics.epoch == metrics.groupby("run_id").epoch.transform("max")]
    per_run = last.groupby("run_id").value.mean() * 100
    runs = setting.runs.set_index("run_id")[["noise_rate", "method"]].join(per_run.rename("v"), how="inner")
    return {(float(r), str(m)): float(v) for (r, m), v in runs.groupby(["noise_rate", "method"]).v.mean().items()}


def _cells(table, column: str) -> dict[tuple[str, str], str]:
    index, found, rate = table.columns.index(column), {}, ""
    for noise, method, cells in table.rows:
        rate = noise or rate
        found[(rate, method)] = cells[index].text
    return found


def test_every_table_and_figure_names_the_epoch_it_reads(content) -> None:
    _, report = content
    (section,) = report.sections
    for table in section.tables:
        says = CLAIMS_EPOCH in table.note or LAST_EPOCH in table.note
        assert says or (table.title in RULE_TABLES and "each rule" in table.note), f"{table.title}: {table.note}"
    figures = [*section.lead_figures, *section.figures, section.claims_figure]
    for figure in figures:
        caption = figure.caption
        assert CLAIMS_EPOCH in caption or LAST_EPOCH in caption or EVERY_EPOCH in caption, f"{figure.path.name}: {caption}"
    assert section.glance[:len(section.leaderboard.rates)] == answer_lines(section.leaderboard)  # the leaderboard's reading
    assert "recall on the validation queries" in legend(section.leaderboard) and CLAIMS_EPOCH in legend(section.leaderboard)


def test_what_says_the_claims_epoch_reads_it(content) -> None:
    """The retrieval, gain and reference tables and the at-a-glance line show the values at the
    held-out-selected epoch, 8 points above the last epoch's: a part reading the last epoch under
    the claims' words fails here."""
    setting, report = content
    (section,) = report.sections
    expected = _selected(setting)
    tables = {t.title: t for t in section.tables}
    retrieval = _cells(tables["Retrieval"], "R@10")
    for (rate, method), row in expected.iterrows():
        shown = retrieval[(f"{rate * 100:g}%", setting.label(method, rate))].replace(f" {TOP_MARK}", "")
        assert shown == format_mean(row.claims_mean, row.claims_std, int(row.claims_count))
        assert row.claims_mean - row.last_mean == pytest.approx(100 * DECLINE, abs=1.5)
    gains = _cells(tables["Gain over sprc"], "R@10")
    tme = expected.loc[(0.8, "tme"), "claims_mean"] - expected.loc[(0.8, "sprc"), "claims_mean"]
    assert gains[("80%", "tme")] == f"{tme:+.2f}"
    bound = _cells(tables["Reference rows"], "R@10")
    assert any(text == format_mean(*expected.loc[(0.0, "sprc"), ["claims_mean", "claims_std"]], 3) for text in bound.values())
    at_50 = expected.claims_mean.xs(0.5, level="noise_rate")
    board = _board_metric(setting)  # the answers' differences are of the claims' metric at the claims' epoch
    line = next(line for line in section.glance if line.startswith("**50%**"))
    for method, cell in ((r.method, r.cells.get(0.5)) for r in section.leaderboard.ranked):
        if cell is not None and cell.versus in ("better", "worse"):
            assert f"`{method}` ({board[(0.5, method)] - board[(0.5, 'sprc')]:+.1f}" in line
    assert len(at_50) > 2


FRACTION = re.compile(r"(?<![\d.])(?:[+-]?0\.\d{3,}|(?<![+-])0\.\d+)(?!\d|%)")
"""A number as a fraction prints: three decimals (``+0.113``), or an unsigned share (``0.86``);
points are signed with one decimal (two below a tenth), percents end in ``%``."""
P_VALUES = re.compile(r"p\s*(=|<)\s*[\d.e-]+")


def _fractions(text: str) -> list[str]:
    return FRACTION.findall(P_VALUES.sub("", text))


def test_the_claims_and_the_room_speak_in_percent_and_points(content) -> None:
    setting, report = content
    (section,) = report.sections
    claims = paper_claims(setting, n_resamples=100)
    lines = [check_line(check) for claim in claims for check in claim.checks]
    texts = [*lines, *(claim.text for claim in claims), VERDICT_RULE, claims_intro("R@10", ""), *section.room]
    assert section.room and any("points" in line for line in lines)
    for text in texts:
        assert not _fractions(text), f"a fraction where percent or points belong: {text}"
    compared = [check for claim in claims for check in claim.checks
                if check.comparison is not None and check.verdict != "not run"]
    assert compared
    for check in compared:  # the printed difference is the comparison's, in points
        assert check.numbers.startswith(f"{100 * check.comparison.mean:+.1f} points; seeds ") or abs(check.comparison.mean) < 1e-3
    assert any("> -1 point" in check.label for claim in claims for check in claim.checks)
    assert any(re.search(r"a gap of [+-]\d+\.\d points", line) for line in section.room)
    assert _fractions("a gap of +0.113") and _fractions("wins back 0.86 of") and not _fractions("p=0.003, 12.5%, +0.7 points")


def test_the_first_screen_says_what_the_numbers_are(content) -> None:
    setting, report = content
    (section,) = report.sections
    text = " ".join(section.context)
    assert "**Synthetic data**" in text and "not comparable to the papers'" in text and "docs/real-datasets.md" in text
    assert "`thirds`" in text and "reference image swapped, caption swapped, target image swapped" in text
    assert f"{N_QUERIES} validation queries" in text and "training triplets" in text and "held out" in text
    assert "the perfect filter at 0% is not run" in text
    board = section.leaderboard
    hug = next(row for row in board.ranked if row.method == "hug")
    assert hug.cells[0.8].metric_below_start and not board.ranked[0].cells[0.0].metric_below_start
    page = leaderboard_html(board)
    title = html.escape("the headline, the claims' metric: the mean of R@5 and R_sub@1")
    assert page.count(f'<th class="m" title="{title}">Avg(R@5, R_sub@1)</th>') == len(board.rates) and '<tr class="sub">' in page


def test_bold_and_underline_are_the_leaderboards_only(content) -> None:
    _, report = content
    (section,) = report.sections
    for table in section.tables:
        assert "<b>" not in to_html(table) and "<u>" not in to_html(table) and "**" not in to_markdown(table), table.title
        assert not re.search(r"in bold|bold:|underlined", table.note), table.title
    assert any(TOP_MARK in to_markdown(t) for t in section.tables)


def test_the_gain_axis_is_set_by_the_gains_not_by_an_outlier() -> None:
    columns = pd.MultiIndex.from_product([["a", "b", "c"], ["mean", "std", "count"]])
    gains = pd.DataFrame([[1.5, 0.3, 3, 4.0, 0.5, 3, -37.0, 1.0, 3], [2.5, 0.2, 3, 5.0, 0.4, 3, -30.0, 2.0, 3]],
                         index=[0.5, 0.8], columns=columns)
    low, high = y_limits(gains, ["a", "b", "c"], caps=[11.3, 17.6])
    assert high > 17.6 and -30.0 < low < 0  # the caps fit; c's loss is drawn clipped
    low, _ = y_limits(gains, ["a", "b"], caps=[11.3])
    assert -3 < low < 0


def _row(mean: float, threshold: float = 0.0) -> ForestRow:
    comparison = Comparison("x", threshold, [0, 1, 2], [mean] * 3, mean, (mean - 0.01, mean + 0.01), (mean - 0.02, mean + 0.02),
                            HOLDS)
    return ForestRow(1, "t", "x", Check("x", HOLDS, "", comparison=comparison, unit="recall"))


def test_the_forest_axis_is_set_by_the_comparisons_and_verdicts_use_no_method_colour() -> None:
    rows = [_row(v) for v in (0.01, 0.02, 0.03, 0.04, 0.05, -0.37)] + [_row(0.02, threshold=-0.01)]
    low, high = x_limits(rows)
    assert -37 < low < -1 and 7 < high < 15  # in points; -37 is drawn clipped at the edge
    assert x_limits([*rows[:5], _row(0.04, threshold=-0.03)])[0] <= -3  # a threshold is always in view
    colours = {style["color"].lower() for style in VERDICT_STYLES.values()}
    assert not colours & {c.lower() for c in TOL.values()} and ORACLE_STYLE["color"] not in colours
