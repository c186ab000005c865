"""How much there is to win: the perfect filter's won-back share per seed beside the papers'
(computed from the shipped published tables), the report's lines above the claims, and the
forest plot of the claims' comparisons."""

from __future__ import annotations

from pathlib import Path

import pytest

from cirbench.report import build_report, load_results
from cirbench.report.analysis.verdicts.calibration import room_lines
from cirbench.report.analysis.verdicts.claims import paper_claims
from cirbench.report.analysis.verdicts.room import ROOM_TITLE, paper_range, paper_shares, won_back
from cirbench.report.figures.forest import plotted_checks
from test_calibrate import _results
from test_claims import write_claims_results


def test_the_papers_shares_are_read_from_the_published_tables() -> None:
    """ConeSep Table 1: SPRC's FashionIQ Avg R@10 54.92 / 33.51 at 0 / 80%, TME 46.67 at 80%."""
    shares = {(s.dataset, s.method, s.rate): s for s in paper_shares()}
    tme = shares[("fashioniq", "TME", 0.8)]
    assert tme.share == pytest.approx((46.67 - 33.51) / (54.92 - 33.51)) and tme.gain == pytest.approx(0.1316)
    assert shares[("cirr", "ConeSep", 0.5)].share == pytest.approx((88.46 - 75.20) / (89.74 - 75.20), abs=0.02)
    assert paper_range(0.8).startswith("FashionIQ 61%-74% (gain +13.2 to +15.7 points")
    assert paper_range(0.3) == ""


def test_won_back_is_undefined_when_noise_costs_nothing() -> None:
    assert won_back(0.6, 0.3, 0.45) == pytest.approx(0.5)
    assert won_back(0.6, 0.6, 0.7) != won_back(0.6, 0.6, 0.7)  # NaN


def test_room_lines_give_the_share_per_seed_and_the_gap(tmp_path: Path) -> None:
    """sprc R@10 0.60 / 0.40 / 0.30 at 0 / 50 / 80%, the filter 0.45 / 0.36: it wins back
    0.25 and 0.20 of the loss on every seed (each seed shifts every cell alike)."""
    (setting,) = load_results(_results(tmp_path, oracle_80=0.36)).settings
    fifty, eighty = room_lines(setting)
    assert fifty.startswith("50% noise: the perfect filter wins back 25% of `sprc`'s R@10 loss (per seed 25%, 25%, 25%)")
    assert "a gap of +5.0 points" in fifty and "FashionIQ 75%-89%" in fifty
    assert eighty.startswith("80% noise: the perfect filter wins back 20%") and "a gap of +6.0 points" in eighty
    assert "CIRR 84%-91%" in eighty


def test_the_report_shows_the_room_above_the_claims_and_their_forest_plot(tmp_path: Path) -> None:
    cells = [(m, r, s) for m in ("sprc", "conesep") for r in (0.0, 0.5) for s in (0, 1)]
    write_claims_results(tmp_path / "results", cells)
    page = build_report(tmp_path / "results", tmp_path / "report")
    markdown = (page.parent / "report.md").read_text(encoding="utf-8")
    assert ROOM_TITLE not in markdown  # no perfect filter ran: nothing to say how much there is to win
    (forest,) = page.parent.rglob("claims_forest.png")
    assert f"]({forest.relative_to(page.parent).as_posix()})" in markdown
    claims = paper_claims(load_results(tmp_path / "results").settings[0], n_resamples=50)
    rows = plotted_checks(claims)
    assert rows and all(check.comparison is not None or check.kept_sets for _, check in rows)
    assert {number for number, _ in rows} <= set(range(1, len(claims) + 1))
    drawn = [c for claim in claims for c in claim.checks if (c.comparison is not None and c.verdict != "not run") or c.kept_sets]
    assert len(rows) == len(drawn)
    assert 9 in {number for number, check in rows if check.kept_sets}  # the kept sets against chance are drawn too


def test_the_room_section_renders_when_the_filter_ran(tmp_path: Path) -> None:
    page = build_report(_results(tmp_path, oracle_80=0.36), tmp_path / "report")
    markdown = (page.parent / "report.md").read_text(encoding="utf-8")
    assert f"### {ROOM_TITLE}" in markdown and "- 80% noise: the perfect filter wins back 20%" in markdown
    assert ROOM_TITLE in page.read_text(encoding="utf-8")
