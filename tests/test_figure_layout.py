"""The figures' text as the renderer draws it (issue 79): no label cut at the figure's edge and
no two labels running into each other (the claims forest, the validation curves, the ROC
curves), no legend over the curves, the kept-clean bars' labels clear of every bar and
outline, the forest's off-scale mark labelled with its own value, and the recall figure's alt
text naming every panel."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from cirbench.report.analysis.loading.numbers import run_columns
from cirbench.report.analysis.statistics.significance import DOES_NOT_HOLD, HOLDS, UNDECIDED, Comparison
from cirbench.report.analysis.verdicts.claims import Check
from cirbench.report.figures import score_figures, setting_figures
from cirbench.report.figures.forest import ForestRow, draw_forest, edge_labels
from cirbench.results.chance import KeptSetTest

SLACK = 1.0
"""Pixels two boxes may share, or a box may pass the figure's edge by (antialiasing)."""


@pytest.fixture(scope="module")
def setting(study_with_kept_cells):
    return study_with_kept_cells


def _drawn(monkeypatch: pytest.MonkeyPatch, figure, setting, tmp_path: Path) -> tuple[Figure, dict]:
    """The figure ``figure`` draws for ``setting`` (not written) and what it would save it with."""
    found = {}

    def keep(fig, out, name, title, caption, alt=""):
        found.update(fig=fig, title=title, caption=caption, alt=alt)

    monkeypatch.setattr(setting_figures, "save_figure", keep)
    monkeypatch.setattr(score_figures, "save_figure", keep)
    figure(setting, tmp_path)
    return found.pop("fig"), found


def _render(fig: Figure):
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    return renderer


def _hidden_ticks(fig: Figure) -> set[int]:
    """The tick labels not drawn: their ticks lie outside the view."""
    hidden = set()
    for ax in fig.findobj(match=Axes):
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick, where in zip(axis.get_major_ticks(), axis.get_majorticklocs()):
                if not low - 1e-9 <= where <= high + 1e-9:
                    hidden.add(id(tick.label1))
    return hidden


def _texts(fig: Figure, renderer) -> list[tuple[str, Bbox]]:
    """Every drawn text of ``fig`` (titles, labels, ticks, legends, notes) with its box in pixels."""
    hidden = _hidden_ticks(fig)
    texts = [t for t in fig.findobj(match=Text) if t.get_visible() and t.get_text().strip() and id(t) not in hidden]
    return [(t.get_text(), t.get_window_extent(renderer)) for t in texts]


def _meet(a: Bbox, b: Bbox) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > SLACK and min(a.y1, b.y1) - max(a.y0, b.y0) > SLACK


def _assert_text_fits(fig: Figure) -> int:
    """No text beyond the figure's edge and no two texts on each other; how many were checked."""
    texts = _texts(fig, _render(fig))
    frame = fig.bbox
    cut = [text for text, box in texts if box.x0 < frame.x0 - SLACK or box.x1 > frame.x1 + SLACK
           or box.y0 < frame.y0 - SLACK or box.y1 > frame.y1 + SLACK]
    assert not cut, f"cut at the figure's edge: {cut}"
    met = [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(texts, 2) if _meet(box_a, box_b)]
    assert not met, f"texts on each other: {met}"
    return len(texts)


def _check(mean: float, low: float, high: float, verdict: str = HOLDS, unit: str = "recall") -> Check:
    """A comparison of ``mean`` with both intervals ``(low, high)`` (fractions), against 0."""
    comparison = Comparison("x", 0.0, [0, 1, 2], [mean] * 3, mean, (low, high), (low - 0.01, high + 0.01), verdict)
    return Check("x", verdict, "", comparison=comparison, unit=unit)


def _near(mean: float, verdict: str = HOLDS, unit: str = "recall") -> Check:
    """A comparison of ``mean`` with intervals three points either side."""
    return _check(mean, mean - 0.03, mean + 0.03, verdict, unit)


def _kept(clean: list[int]) -> Check:
    """A kept set of 400 of 1,000 samples (half clean) against chance, ``clean`` clean per seed."""
    tests = tuple(KeptSetTest(1000, 500, 400, k, 0.001, 0.999) for k in clean)
    return Check("x", HOLDS, "", unit="purity", kept_sets=tests)


GROUPS: list[tuple[int, str, str, list[str]]] = [
    (1, "tme, conesep beat sprc under noise", "recall",
     ["tme vs sprc, 50%", "tme vs sprc, 80%", "tme: gap at 80% vs gap at 50%", "conesep vs sprc, 50%", "conesep vs sprc, 80%",
      "conesep: gap at 80% vs gap at 50%"]),
    (2, "conesep beats tme", "recall", [f"conesep vs tme, {r}%" for r in (0, 20, 50, 80)]),
    (4, "no loss at 0% (tme, conesep, hug)", "recall", [f"{m} vs sprc, 0%" for m in ("tme", "conesep", "hug")]),
    (5, "each ConeSep module helps", "recall", [f"{m.upper()}: conesep vs conesep:no_{m}, 20%" for m in ("gfq", "nbl", "btu", "rcl")]),
    (6, "hug beats sprc", "recall", [f"hug vs sprc, {r}%" for r in (0, 20, 50, 80)]),
    (8, "HUG's ladder does not lower recall", "recall",
     [f"hug:{a} vs hug:{b}, 0%" for a, b in (("probabilistic", "point_matching"), ("component", "probabilistic"),
                                             ("instance", "component"), ("modality", "instance"), ("cross_modal", "modality"),
                                             ("coordination", "cross_modal"))] + ["hug vs hug:coordination, 0%"]),
    (10, "habit, intent beat sprc under noise", "recall", [f"{m} vs sprc, {r}%" for m in ("habit", "intent") for r in (20, 50, 80)]),
    (11, "conesep beats habit, intent", "recall", [f"conesep vs {m}, {r}%" for m in ("habit", "intent") for r in (0, 20, 50, 80)][:7]),
    (12, "no loss at 0% (habit, intent)", "recall", ["habit vs sprc, 0%", "intent vs sprc, 0%"]),
    (13, "robust methods beat traditional ones under noise", "recall",
     [f"{m} vs {b}, {r}%" for m in ("tme", "conesep", "habit", "intent") for b in ("ssn", "cala", "sprc") for r in (50, 80)]),
    (3, "conesep keeps a cleaner set than tme", "purity",
     ["purity: conesep vs tme, 80%", "purity against caption swaps: conesep vs tme, 80%"]),
    (7, "HUG's uncertainty marks noise", "AUROC",
     [f"{w} uncertainty AUROC vs 50, {r}%" for r in (20, 50, 80) for w in ("coordination", "overall")]),
]
"""The committed study's claims (number, short title, unit, rows), whose forest was crowded."""


def _forest_panels() -> dict[str, list[ForestRow]]:
    """The committed study's forest: long claim titles and row labels that wrap, many panels in
    each column, a mean far beyond the scale (+60.0, its interval's end +64.2), one below it."""
    panels: dict[str, list[ForestRow]] = {"recall": [], "purity": [], "AUROC": []}
    for number, title, unit, words in GROUPS:
        for k, word in enumerate(words):
            check = _near(0.002 * k - 0.005 * (number % 3), (HOLDS, DOES_NOT_HOLD, UNDECIDED)[k % 3], unit)
            if word.startswith("RCL"):
                check = _check(0.60, 0.556, 0.642)
            elif word == "tme vs ssn, 80%":
                check = _check(-0.222, -0.25, -0.19, DOES_NOT_HOLD)
            panels[unit].append(ForestRow(number, title, word, check))
    panels["purity"] += [ForestRow(9, "kept sets cleaner than chance", f"{m} vs chance, {r}%", _kept([330, 340, 335]))
                         for m in ("tme", "conesep") for r in (50, 80)]
    return panels


def test_the_forests_labels_are_whole_and_meet_no_other() -> None:
    """The right column's axis label was cut ("(percentag"), wrapped row labels ran into their
    neighbours (claims 1-2, 5, 7, 8, 12 of the committed study)."""
    fig = draw_forest(_forest_panels(), "Avg(R@5, R_sub@1)")
    assert _assert_text_fits(fig) > 40
    notes = [t.get_text() for ax in fig.findobj(match=Axes) for t in ax.texts]
    assert "+60.0, off scale ▶" in notes and not any("64" in note for note in notes), notes


def test_an_off_scale_mark_writes_its_own_value_not_its_intervals_end() -> None:
    limits = (-21.0, 21.0)
    assert edge_labels(_check(0.60, 0.556, 0.642), limits) == [(21.0, "+60.0, off scale ▶", "right")]
    assert edge_labels(_check(-0.222, -0.25, -0.19), limits) == [(-21.0, "◀ -22.2, off scale", "left")]
    assert edge_labels(_check(0.18, 0.15, 0.242), limits) == [(21.0, "interval to +25.2 ▶", "right")]
    assert edge_labels(_check(0.05, 0.02, 0.08), limits) == []


def test_the_kept_clean_bars_labels_clear_every_bar_and_outline(setting, monkeypatch, tmp_path: Path) -> None:
    """The purity printed on a bar sat on the dotted outline of the truly clean samples."""
    fig, _ = _drawn(monkeypatch, setting_figures.purity_bars, setting, tmp_path)
    renderer = _render(fig)
    checked = 0
    for ax in fig.axes:
        bars = [p.get_window_extent(renderer) for p in ax.patches]
        frame = ax.get_window_extent(renderer)
        for text in ax.texts:
            box = text.get_window_extent(renderer)
            assert not [b for b in bars if _meet(box, b)], (ax.get_title(), text.get_text())
            assert frame.y1 >= box.y1 and frame.x0 <= box.x0 and box.x1 <= frame.x1, (ax.get_title(), text.get_text())
            checked += 1
    assert checked >= 4
    _assert_text_fits(fig)


@pytest.mark.parametrize("rates", [None, [0.0, 0.2, 0.5, 0.8]])
def test_the_validation_curves_labels_meet_no_other(setting, monkeypatch, tmp_path: Path, rates) -> None:
    """Each panel's y label ran into the one of the panel below it (the committed study's four
    rates in two rows of two; here one rate has no run, its panel labelled all the same)."""
    if rates is not None:
        monkeypatch.setattr(type(setting), "rates", property(lambda self: rates))
    fig, _ = _drawn(monkeypatch, setting_figures.validation_curves, setting, tmp_path)
    assert _assert_text_fits(fig) > 20


def test_the_roc_legends_cover_no_curve(setting, monkeypatch, tmp_path: Path) -> None:
    """A panel's legend sat over its curves at 50% and 80%: each is outside every panel now."""
    fig, _ = _drawn(monkeypatch, score_figures.roc_curves, setting, tmp_path)
    renderer = _render(fig)
    panels = [ax for ax in fig.axes if ax.lines]
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + fig.legends
    assert len(legends) == len(panels) >= 2
    for legend, ax in itertools.product(legends, panels):
        assert not _meet(legend.get_window_extent(renderer), ax.get_window_extent(renderer)), ax.get_title()
    _assert_text_fits(fig)


def test_the_recall_figures_alt_text_names_every_panel(setting, monkeypatch, tmp_path: Path) -> None:
    """The README's alt text named two of the figure's eight panels."""
    fig, saved = _drawn(monkeypatch, setting_figures.recall_vs_noise, setting, tmp_path)
    panels = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert set(panels) == set(run_columns(setting).columns) and len(panels) >= 3
    alt = saved["alt"]
    assert all(f"{panel}" in alt for panel in panels), (panels, alt)
    assert f"{len(panels)} panels" in alt and all(m in alt for m in setting.methods)
