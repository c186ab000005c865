"""The report's first screen and layout (issue 47): the leaderboard first, per setting, with
its marks read by the claims' rule at the epoch the claims read; its files beside the cells'
tables; the linked contents; the forest plot by unit; the claims table folded; one colour per
method. On a small study's results shaped as a shapes-mini grid (R@5, R@10, R_sub@1, a
held-out split, two epochs, reference rows and the perfect filter), written directly."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cirbench.report import build_report, load_results
from cirbench.report.analysis.verdicts.claim_files import SHIPPED, read_claims
from cirbench.report.analysis.verdicts.claims import Check, p_value, paper_claims
from cirbench.report.analysis.rankings.leaderboard import BEST, TIED, WORSE, build_leaderboard
from cirbench.report.analysis.statistics.significance import HOLDS
from cirbench.report.figures.forest import draw_forest, forest_panels, row_words
from cirbench.report.figures.palette import REFERENCE_STYLES, method_styles
from cirbench.results.store import CellKey, ResultsStore
from test_claims import _cell, _run_row

SETTING = ("shapes-mini", "tiny[cir]", "thirds")
N_QUERIES, SEEDS = 300, (0, 1, 2)
# R@10 hit rate at the epoch the held-out split selects (the first); the last epoch is 0.08 lower.
# At 50% conesep leads alone; at 80% tme and conesep are level; hug ends below zero_shot's R@10.
HITS = {
    "sprc": {0.0: 0.62, 0.5: 0.50, 0.8: 0.42},
    "tme": {0.0: 0.62, 0.5: 0.55, 0.8: 0.55},
    "conesep": {0.0: 0.63, 0.5: 0.68, 0.8: 0.56},
    "hug": {0.0: 0.40, 0.5: 0.35, 0.8: 0.30},
    "oracle": {0.5: 0.70, 0.8: 0.66},
}
REFERENCES = {"zero_shot": 0.38, "text_blind": 0.20, "text_only": 0.10}
DECLINE = 0.08


def _ranks(method: str, rate: float, seed: int, epoch: int, p10: float) -> pd.DataFrame:
    """Ranks whose R@10 is ``p10`` (R@5 0.1 and R_sub@1 0.05 lower), seeds a little apart."""
    rng = np.random.default_rng([seed, int(rate * 10), sum(map(ord, method)), epoch])
    p10 += 0.01 * ((seed + len(method)) % 3 - 1)
    rank, subset = np.full(N_QUERIES, 30), np.full(N_QUERIES, 3)
    order = rng.permutation(N_QUERIES)
    rank[order[: round(p10 * N_QUERIES)]] = 7
    rank[order[: round((p10 - 0.1) * N_QUERIES)]] = 0
    subset[rng.permutation(N_QUERIES)[: round((p10 - 0.05) * N_QUERIES)]] = 0
    return pd.DataFrame({"epoch": epoch, "query": np.arange(N_QUERIES), "group": "all", "rank": rank, "subset_rank": subset,
                         "ties": 0, "subset_ties": 0})


def _metrics(ranks: pd.DataFrame, split: str = "val") -> pd.DataFrame:
    values = {"recall@5": (ranks["rank"] < 5).mean(), "recall@10": (ranks["rank"] < 10).mean(),
              "recall_subset@1": (ranks.subset_rank < 1).mean()}
    epoch = int(ranks.epoch.iloc[0])
    return pd.DataFrame([{"epoch": epoch, "split": split, "group": "all", "metric": m, "value": float(v), "eval_protocol": "p"}
                         for m, v in values.items()])


def write_study(root: Path) -> None:
    """The small study: four methods at 0, 50 and 80% and the perfect filter at 50 and 80%
    (three seeds, two epochs, the first selected by the held-out split), and the reference rows."""
    store = ResultsStore(root)
    for method, rates in HITS.items():
        for rate, p10 in rates.items():
            for seed in SEEDS:
                ranks = [_ranks(method, rate, seed, epoch, p10 - DECLINE * epoch) for epoch in (0, 1)]
                held_out = [_ranks(method, rate, seed + 10, epoch, 0.6 - 0.2 * epoch) for epoch in (0, 1)]
                tables, n_noisy = _cell(method, rate, seed) if method in ("tme", "conesep", "hug") else ({}, int(rate * 300))
                tables = {k: v for k, v in tables.items() if k in ("purity", "scores")}
                tables["ranks"] = pd.concat(ranks, ignore_index=True)
                tables["metrics"] = pd.concat([*map(_metrics, ranks), *(_metrics(h, "holdout") for h in held_out)],
                                              ignore_index=True)
                row = _run_row(n_noisy) | {"epochs": 2, "holdout": 0.1, "n_holdout": 30, "is_oracle": method == "oracle",
                                           "partitions": method in ("tme", "conesep", "oracle")}
                store.write_run(CellKey(f"{method}-{rate:g}-s{seed}", method, *SETTING, rate, seed), row, tables)
    for name, p10 in REFERENCES.items():
        for seed in SEEDS:
            ranks = _ranks(name, 0.0, 0, 0, p10)  # not trained: the same on every seed
            row = _run_row(0) | {"is_reference": True}
            store.write_run(CellKey(f"{name}-s{seed}", name, *SETTING, float("nan"), seed), row,
                            {"metrics": _metrics(ranks), "ranks": ranks})


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("study") / "results"
    write_study(root)
    return root, build_report(root, tmp_path_factory.mktemp("report"))


def test_the_leaderboard_is_the_first_table_and_the_contents_link_every_section(study) -> None:
    _, page = study
    text = page.read_text(encoding="utf-8")
    first_table, first_figure = text.index("<table"), text.index("<img")
    assert text[first_table:].startswith('<table class="leaderboard">') and first_table < first_figure
    assert first_table < text.index('<nav class="contents">') < first_figure
    nav = text[text.index('<nav class="contents">'):text.index("</nav>")]
    links = set(re.findall(r'href="#([^"]+)"', nav))
    anchors = set(re.findall(r'<h[23][^>]* id="([^"]+)"', text)) - {"contents"}
    assert links == anchors and len(anchors) > 15
    order = [text.index(f'id="{a}"') for a in ("shapes-mini-tiny-cir-thirds-gain-over-sprc", "shapes-mini-tiny-cir-thirds-recall-vs-noise",
                                               "shapes-mini-tiny-cir-thirds-purity-bars", "shapes-mini-tiny-cir-thirds-claims-forest",
                                               "shapes-mini-tiny-cir-thirds-claims", "shapes-mini-tiny-cir-thirds-table-retrieval")]
    assert order == sorted(order)  # the figures, the forest, the claims table, then the tables
    images = re.findall(r'<img alt="([^"]*)"', text)
    assert images and all(len(alt) > 30 and not alt.endswith(".png") for alt in images)  # every figure says what it shows
    markdown = (page.parent / "report.md").read_text(encoding="utf-8")
    assert markdown.index("## Leaderboard: shapes-mini") < markdown.index("## Contents") < markdown.index("![")


def test_the_leaderboard_files_agree_with_the_selected_metrics(study) -> None:
    _, page = study
    folder = page.parent / "shapes-mini_tiny-cir-_thirds"
    board = pd.read_csv(folder / "leaderboard.csv")
    selected, final = pd.read_csv(folder / "selected_metrics.csv"), pd.read_csv(folder / "final_metrics.csv")
    assert (selected.selected_epoch == 1).all() and (selected.epochs == 2).all() and (selected["rule"] == "holdout").all()
    selected["avg"] = (selected["recall@5"] + selected["recall_subset@1"]) / 2 * 100
    selected["r10"] = selected["recall@10"] * 100
    expected = selected.groupby(["method", "noise_rate"])[["avg", "r10"]].agg(["mean", "std"])
    trained = board[board.kind.isin(["ranked", "perfect filter"])]
    assert len(trained) == len(expected) == 4 * 3 + 2
    for row in trained.itertuples():
        want = expected.loc[(row.method, row.noise_rate)]
        got = [row.metric_mean, row.metric_std, row.recall_mean, row.recall_std]
        assert got == pytest.approx([want[("avg", "mean")], want[("avg", "std")], want[("r10", "mean")], want[("r10", "std")]], abs=1e-4)
    (bound,) = board[board.kind == "bound"].itertuples()
    assert bound.metric_mean == pytest.approx(expected.loc[("sprc", 0.0), ("avg", "mean")], abs=1e-4)
    assert set(board.metric) == {"Avg(R@5, R_sub@1)"} and set(board.recall) == {"R@10"}
    last = final[(final.method == "tme") & (final.noise_rate == 0.8)]["recall@10"].mean() * 100
    leader = board[(board.method == "tme") & (board.noise_rate == 0.8)].recall_mean.iloc[0]
    assert leader - last == pytest.approx(100 * DECLINE, abs=1.0)  # read at the selected epoch, not the last
    tex = (folder / "leaderboard.tex").read_text(encoding="utf-8")
    assert r"\textbf{" in tex and r"\underline{" in tex and r"\midrule" in tex and "zero\\_shot" in tex


def test_the_marks_are_the_claims_verdicts(study) -> None:
    root, _ = study
    (setting,) = load_results(root).settings
    board = build_leaderboard(setting, n_resamples=400)
    cells = {(row.method, rate): cell for row in board.rows for rate, cell in row.cells.items()}
    claims = paper_claims(setting, n_resamples=400)
    checks = {c.label: c for c in claims[0].checks}
    for method in ("tme", "conesep"):
        for rate in (0.5, 0.8):
            check = checks[f"{method} - sprc at {rate:.0%}"]  # the claim's own answer, its margin the leaderboard's
            assert check.answer and cells[(method, rate)].versus == check.answer
    assert cells[("conesep", 0.5)].lead == BEST and not any(cells[(m, 0.5)].lead for m in ("sprc", "tme", "hug"))
    assert cells[("tme", 0.8)].lead == cells[("conesep", 0.8)].lead == TIED and not cells[("sprc", 0.8)].lead
    assert cells[("hug", 0.8)].versus == WORSE and cells[("hug", 0.8)].below_start and not cells[("sprc", 0.0)].below_start
    assert not cells[("oracle", 0.5)].lead  # the perfect filter is never ranked
    assert [r.label for r in board.unranked] == ["oracle (perfect filter)", "sprc at 0% noise (bound)", "zero_shot", "text_blind",
                                                     "text_only"]
    assert board.baseline == "sprc"
    assert all(r.span is not None and not r.span.lead for r in board.unranked[1:])


def test_the_forest_has_one_panel_per_unit_and_every_claim_with_a_comparison(study) -> None:
    root, _ = study
    claims = paper_claims(load_results(root).settings[0], n_resamples=200)
    panels = forest_panels(claims)
    assert list(panels) == ["recall", "purity", "AUROC"]
    titles = [ax.get_title(loc="left") for ax in draw_forest(panels, "Avg(R@5, R_sub@1)").axes]
    assert list(dict.fromkeys(t.removesuffix(" (continued)") for t in titles)) == ["recall", "purity", "AUROC"]
    words = {row.words for row in panels["recall"]}
    assert {"tme vs sprc, 80%", "conesep vs tme, 50%", "hug vs sprc, 0%"} <= words
    assert {row.claim for row in panels["purity"]} == {3, 9}  # the kept sets against chance are drawn
    assert all(row.title and row.words for rows in panels.values() for row in rows)


def test_row_words_and_p_values_read_as_words() -> None:
    assert row_words(Check("tme - sprc at 0% > -1 point", HOLDS, "")) == "tme vs sprc, 0%"
    assert row_words(Check("GFQ: conesep - conesep:no_gfq at 20%", HOLDS, "")) == "GFQ: conesep vs conesep:no_gfq, 20%"
    assert row_words(Check("tme: gap at 80% - gap at 50%", HOLDS, "")) == "tme: gap at 80% vs gap at 50%"
    assert p_value(3e-316) == "p < 1e-4" and p_value(0.003) == "p=0.003"


def test_the_claims_table_folds_its_numbers_and_renders_markdown(study) -> None:
    _, page = study
    text = page.read_text(encoding="utf-8")
    claims = text[text.index('<table class="claims">'):]
    claims = claims[:claims.index("</table>")]
    shipped = len(read_claims(SHIPPED))  # each claim folds its comparisons, one "not run" line where it has no cell
    assert claims.count("<details><summary>") == shipped and "comparisons</summary>" in claims
    assert "p &lt; 1e-4" in claims and not re.search(r"p=\d(\.\d+)?e-", claims)
    assert "`" not in text and "<code>holdout</code>" in text


def test_one_colour_per_method_and_grey_reference_lines(study) -> None:
    root, _ = study
    styles = method_styles(load_results(root).settings[0])
    colours = [s["color"] for s in styles.values()]
    assert len(set(colours)) == len(colours) == 5
    greys = [s["color"] for s in REFERENCE_STYLES.values()]
    assert all(re.fullmatch(r"0\.\d+", g) for g in greys) and not set(greys) & set(colours)
    assert len({str(s["linestyle"]) for s in REFERENCE_STYLES.values()}) == len(REFERENCE_STYLES)
