"""The first screen answers (issue 69): the kept-set chart's labels, as the renderer draws them,
cover no other label and no point, even where methods and frontier cells crowd one place; the
leaderboard's legend is short; the one-line answers are the leaderboard's marks and the gain
figure carries them; the forest plot fits two screens; one number reads one way."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from cirbench.report.analysis.rankings.glance import answer_lines
from cirbench.report.analysis.rankings.kept_worth import METHOD_POINT, kept_worth
from cirbench.report.analysis.rankings.leaderboard import ANSWERS, MARKS, build_leaderboard
from cirbench.report.analysis.loading.numbers import format_percent, format_points
from cirbench.report.figures.kept_figure import draw_kept
from cirbench.report.figures.labels import LABEL_GID, MARKER_PX
from cirbench.report.figures.palette import CLEAN_COLOUR, NOISY_COLOUR, TOL, answer_colour
from cirbench.report.render.leaderboard_render import legend
from cirbench.results.labels import REPLAY

LEGEND_WORDS = 75
"""The leaderboard legend's most words (it was 132; the definitions are the Terms line's), with room for a fourth answer."""


@pytest.fixture(scope="module")
def setting(study_with_kept_cells):
    return study_with_kept_cells


def _crowded(worth):
    """``worth``'s points with every method and replay moved onto the frontier's 0.6 cell, the
    methods a hair apart: the chart's worst case."""
    points = worth.points.copy()
    moved = points.kind.isin([METHOD_POINT, REPLAY])
    for rate in points.noise_rate.unique():
        here = points.noise_rate == rate
        anchor = points[here & points.label.str.endswith("p0.6")]
        if anchor.empty:
            continue
        x, y = float(anchor.purity.mean()), float(anchor.metric.mean())
        codes = points.loc[here & moved, "method"].astype("category").cat.codes.to_numpy()
        points.loc[here & moved, "purity"] = x + 0.3 * codes
        for column in ("metric", "recall"):
            points.loc[here & moved, column] = y + 0.2 * codes
    return replace(worth, points=points)


@pytest.mark.parametrize("crowded", [False, True])
def test_the_kept_charts_labels_cover_no_label_and_no_point(setting, crowded: bool) -> None:
    worth = kept_worth(setting)
    worth = _crowded(worth) if crowded else worth
    fig = draw_kept(worth)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    checked = 0
    for ax in fig.axes:
        labels = [t for t in ax.texts if t.get_gid() == LABEL_GID]
        boxes = [t.get_window_extent(renderer) for t in labels]
        frame = ax.get_window_extent(renderer)
        assert labels, "every panel labels its points"
        for (a, ta), (b, tb) in itertools.combinations(zip(boxes, labels), 2):
            assert not a.overlaps(b), (ta.get_text(), tb.get_text(), ax.get_title())
        for box, text in zip(boxes, labels):
            inside = box.x0 >= frame.x0 - 1 and box.x1 <= frame.x1 + 1 and box.y0 >= frame.y0 - 1 and box.y1 <= frame.y1 + 1
            assert inside, (text.get_text(), ax.get_title())
        centres = [ax.transData.transform(t.xy) for t in labels]
        for box, text in zip(boxes, labels):
            for cx, cy in centres:
                inside = box.x0 < cx + MARKER_PX / 2 and box.x1 > cx - MARKER_PX / 2 and box.y0 < cy + MARKER_PX / 2 \
                    and box.y1 > cy - MARKER_PX / 2
                assert not inside, (text.get_text(), "covers a point", ax.get_title())
        checked += len(labels)
    assert checked >= 8


def test_the_legend_is_short_and_defines_every_answer(setting) -> None:
    board = build_leaderboard(setting)
    text = legend(board)
    assert len(text.split()) <= LEGEND_WORDS, len(text.split())
    assert all(f"{a.mark} {a.word}" in text for a in ANSWERS.values())


def test_the_answers_are_the_leaderboards_marks(setting) -> None:
    """Each line names every method the leaderboard marks better or worse with that mark and its
    difference of means, and says no method beats the baseline where none is marked better."""
    board = build_leaderboard(setting)
    lines = answer_lines(board)
    assert len(lines) == len(board.rates)
    base = {rate: cell.metric.mean for row in board.ranked if row.method == board.baseline for rate, cell in row.cells.items()}
    for rate, line in zip(board.rates, lines):
        assert line.startswith(f"**{rate * 100:g}%**: ")
        marked = [(row.method, row.cells[rate]) for row in board.ranked if row.method != board.baseline and rate in row.cells]
        for method, cell in marked:
            shown = f"`{method}` ({format_points(cell.metric.mean - base[rate])} {MARKS[cell.versus]})"
            assert (shown in line) == (cell.versus in ("better", "worse")), (line, method)
        assert (f"no method beats `{board.baseline}` surely" in line) == all(c.versus != "better" for _, c in marked)
    assert any("▲" in line for line in lines) and any("▼" in line for line in lines)  # the study has both


def test_colours_are_never_shared_between_methods_samples_and_answers() -> None:
    methods = {c.lower() for c in TOL.values()}
    answers = {answer_colour(key).lower() for key in ANSWERS}
    samples = {CLEAN_COLOUR.lower(), NOISY_COLOUR.lower()}
    assert len(answers) == len(ANSWERS) and not answers & methods and not samples & methods and not samples & answers
    assert answer_colour("holds") == answer_colour("better") and answer_colour("does not hold") == answer_colour("worse")


@pytest.mark.parametrize("value, shown", [(42.85, "42.9"), (42.849, "42.8"), (-0.05, "-0.1"), (33.85, "33.9")])
def test_one_rounding(value: float, shown: str) -> None:
    """Half away from zero, whatever the float's binary tail: 42.85 is 42.9 in every table and figure."""
    assert format_percent(value) == shown


def test_the_gain_figure_and_the_forest_fit(setting, tmp_path: Path) -> None:
    """The gain figure carries the leaderboard's marks in its alt text; the forest plot is at most
    two 1280x800 screens tall at the width a page shows it."""
    from PIL import Image

    from cirbench.report.analysis.verdicts.claims import paper_claims
    from cirbench.report.figures.forest import claims_forest
    from cirbench.report.figures.gain_figure import gain_figure

    board = build_leaderboard(setting)
    gain = gain_figure(setting, tmp_path)
    for row in board.ranked:
        for rate, cell in row.cells.items():
            if cell.versus in MARKS and row.method != board.baseline:
                assert f"{row.method} {rate * 100:g}% {MARKS[cell.versus]}" in gain.alt
    forest = claims_forest(paper_claims(setting), tmp_path)
    width, height = Image.open(forest.path).size
    shown = min(1.0, 1232 / width)  # the page's content width at 1280 px
    assert height * shown <= 2 * 800, (width, height)


def test_a_purity_quoted_twice_reads_one_way(setting) -> None:
    """The at-a-glance line's cleanest kept set quotes the purity the purity table prints: both
    the mean of each seed's purity, two decimals there, one here, rounded by the one formatter."""
    import re

    from cirbench.report.analysis.rankings.glance import at_a_glance
    from cirbench.report.analysis.loading.numbers import purity_per_run, summarize
    from cirbench.report.tables.comparison import purity_table

    means = summarize(setting, purity_per_run(setting))[("mean", "Purity")]
    table = purity_table(setting)
    purity = table.columns.index("Purity")
    shown, rate = {}, ""
    for noise, method, cells in table.rows:
        rate = noise or rate
        text = cells[purity].text.split(" ")[0]
        if text != "-":  # a method that keeps no set
            shown[(rate, method.rstrip("†"))] = float(text)
    line = next(line for line in at_a_glance(setting, None) if line.startswith("Cleanest kept set"))
    quoted = re.findall(r"(\d+)%: (\w+)[^(]* \((\d+\.\d)% clean", line)
    assert quoted
    for rate, method, value in quoted:
        mean = float(means.loc[(float(rate) / 100, method)])
        assert value == format_percent(mean) and shown[(f"{rate}%", method)] == pytest.approx(mean, abs=0.005)


def test_the_purity_bars_print_the_tables_purity(setting, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each bar's printed purity is the mean of each seed's purity (the table's number), not the
    purity of the mean counts, rounded by the one formatter."""
    from cirbench.report.analysis.loading.numbers import purity_per_run, summarize
    from cirbench.report.figures import setting_figures

    drawn = {}
    monkeypatch.setattr(setting_figures, "save_figure", lambda fig, *args, **kwargs: drawn.setdefault("fig", fig))
    setting_figures.purity_bars(setting, tmp_path)
    means = summarize(setting, purity_per_run(setting))[("mean", "Purity")]
    checked = 0
    for ax in drawn["fig"].axes:
        method = ax.get_title().split(" ")[0].rstrip("†")
        labels = [t.get_text() for t in ax.texts]
        rates = [r for r in setting.rates if (r, method) in means.index and r > 0]
        expected = [f"{format_percent(float(means.loc[(r, method)]))}%" for r in rates]
        assert set(expected) <= set(labels), (method, labels, expected)
        checked += len(expected)
    assert checked
