"""What a kept set is worth, in the report (issue 57): on the leaderboard's small study plus
frontier, noise-type and replay cells written directly, the decomposition's arithmetic (method
- sprc = filter + other terms, to rounding) against values recomputed here from the parquet
tables at the held-out-selected epoch, its marks against the leaderboard's, the noise types'
costs, the chart; and, without kept-set cells, the one line that says so and nothing drawn."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cirbench.engine.cell.recorder import purity_rows
from cirbench.report import build_report, load_results
from cirbench.report.analysis.rankings.kept_worth import NONE_LINE, kept_worth, on_kept_seeds
from cirbench.report.tables.kept_worth import DECOMPOSITION_TITLE, NOISE_TYPES_TITLE
from cirbench.results.store import MAIN_SCORE, CellKey, ResultsStore
from test_claims import N_TRAIN, _cell, _run_row, write_claims_results
from test_leaderboard import DECLINE, SEEDS, SETTING, _metrics, _ranks, write_study

# R@10 hit rate at the held-out-selected epoch (the first) of each kept-set cell; tme's
# replay is below tme at both rates (tme gains in its other terms), conesep's above it at 50%.
KEPT_HITS = {
    "frontier:p0.8": {0.5: 0.66, 0.8: 0.60},
    "frontier:p0.6": {0.5: 0.60, 0.8: 0.55},
    "frontier:p0.4": {0.8: 0.48},
    "noise_type:reference": {0.5: 0.66, 0.8: 0.60},
    "noise_type:caption": {0.5: 0.56, 0.8: 0.47},
    "noise_type:target": {0.5: 0.65, 0.8: 0.59},
    "replay:tme": {0.5: 0.46, 0.8: 0.45},
    "replay:conesep": {0.5: 0.72, 0.8: 0.50},
}
TYPES = np.array(["reference", "caption", "target"])


def _kept(label: str, rate: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kept set of a kept-set cell over the study's training triplets, their flags and types."""
    n_noisy = int(rate * N_TRAIN)
    is_noisy = np.arange(N_TRAIN) < n_noisy
    noise_type = np.where(is_noisy, TYPES[np.arange(N_TRAIN) % 3], "clean")
    kind, what = label.split(":")
    if kind == "frontier":
        p = float(what[1:])
        k = round((N_TRAIN - n_noisy) * (1 - p) / p)
        return ~is_noisy | (np.arange(N_TRAIN) < k), is_noisy, noise_type
    if kind == "noise_type":
        return ~is_noisy | (noise_type == what), is_noisy, noise_type
    scores = _cell(what, rate, seed)[0]["scores"]
    return scores[scores.score_name == MAIN_SCORE].selected_clean.to_numpy(dtype=bool), is_noisy, noise_type


def write_kept_cells(root: Path) -> None:
    """The kept-set cells of the study at 50% and 80%, seeds 0-2, replays keyed to the study's runs."""
    store = ResultsStore(root)
    for label, rates in KEPT_HITS.items():
        kind, what = label.split(":")
        for rate, p10 in rates.items():
            for seed in SEEDS:
                ranks = [_ranks(label, rate, seed, epoch, p10 - DECLINE * epoch) for epoch in (0, 1)]
                held_out = [_ranks(label, rate, seed + 10, epoch, 0.6 - 0.2 * epoch) for epoch in (0, 1)]
                kept, is_noisy, noise_type = _kept(label, rate, seed)
                purity = []
                for epoch in (0, 1):
                    rows = purity_rows(kept, None, is_noisy, noise_type)
                    rows.insert(0, "epoch", epoch)
                    rows.insert(1, "score_name", MAIN_SCORE)
                    purity.append(rows)
                tables = {"ranks": pd.concat(ranks, ignore_index=True), "purity": pd.concat(purity, ignore_index=True),
                          "metrics": pd.concat([*map(_metrics, ranks), *(_metrics(h, "holdout") for h in held_out)],
                                               ignore_index=True)}
                row = _run_row(int(is_noisy.sum())) | {
                    "epochs": 2, "holdout": 0.1, "n_holdout": 30, "is_oracle": kind != "replay", "partitions": True,
                    "kept_set": kind, "kept_set_purity": float(what[1:]) if kind == "frontier" else float("nan"),
                    "kept_set_noise_type": what if kind == "noise_type" else "",
                    "kept_set_source": f"{what}-{rate:g}-s{seed}" if kind == "replay" else ""}
                store.write_run(CellKey(f"{label.replace(':', '-')}-{rate:g}-s{seed}", label, *SETTING, rate, seed), row, tables)


@pytest.fixture(scope="module")
def kept_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("kept-study") / "results"
    write_study(root)
    write_kept_cells(root)
    return root, build_report(root, tmp_path_factory.mktemp("kept-report"))


def _headline(root: Path) -> pd.DataFrame:
    """Per run, recomputed here: Avg(R@5, R_sub@1) in percent at the epoch with the best held-out
    headline (the claims' rule), with the run's method, rate and seed."""
    store = ResultsStore(root)
    runs = store.read("runs")
    metrics = store.read("metrics")
    wide = metrics.pivot_table(index=["run_id", "split", "epoch"], columns="metric", values="value")
    avg = (wide["recall@5"] + wide["recall_subset@1"]) / 2 * 100
    held = avg.xs("holdout", level="split")
    chosen = held.groupby(level="run_id").idxmax()
    value = {run_id: avg.loc[(run_id, "val", epoch)] for run_id, (_, epoch) in chosen.items()}
    runs = runs[runs.status == "completed"].set_index("run_id")
    return runs.assign(value=pd.Series(value))[["method", "noise_rate", "seed", "value"]]


def _paired(values: pd.DataFrame, a: str, b: str, rate: float) -> float:
    """Mean over seeds of ``a - b`` at ``rate``, paired by seed."""
    here = values[np.isclose(values.noise_rate, rate)].pivot_table(index="seed", columns="method", values="value")
    return float((here[a] - here[b]).mean())


def _table(markdown: str, title: str) -> list[list[str]]:
    """The rows of the Markdown table under the heading ``title``, the noise column filled down."""
    block = markdown[markdown.index(f"### {title}"):]
    lines = [line for line in block.split("\n\n")[2].splitlines() if line.startswith("|")][2:]
    rows, rate = [], ""
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rate = cells[0] or rate
        rows.append([rate, *cells[1:]])
    return rows


def _number(text: str) -> float:
    return float(re.match(r"[+-]?\d+\.\d+", text).group())


def test_the_decomposition_adds_up_and_matches_the_runs_recomputed(kept_report) -> None:
    root, page = kept_report
    markdown = (page.parent / "report.md").read_text(encoding="utf-8")
    values = _headline(root)
    rows = _table(markdown, DECOMPOSITION_TITLE)
    assert [(r[0], r[1]) for r in rows] == [("50%", "conesep"), ("50%", "tme"), ("80%", "conesep"), ("80%", "tme")]
    for rate_text, method, _, total, filt, other, left in rows:
        rate = float(rate_text.rstrip("%")) / 100
        total, filt, other, left = map(_number, (total, filt, other, left))
        assert total == pytest.approx(filt + other, abs=0.011)  # to rounding
        assert total == pytest.approx(_paired(values, method, "sprc", rate), abs=0.006)
        assert filt == pytest.approx(_paired(values, f"replay:{method}", "sprc", rate), abs=0.006)
        assert other == pytest.approx(_paired(values, method, f"replay:{method}", rate), abs=0.006)
        assert left == pytest.approx(_paired(values, "oracle", f"replay:{method}", rate), abs=0.006)
    tme80 = next(r for r in rows if r[:2] == ["80%", "tme"])
    assert _number(tme80[5]) > 5 > _number(tme80[4])  # tme wins in its other terms, hardly in its filter


def test_its_marks_are_the_claims_and_the_leaderboards(kept_report) -> None:
    root, page = kept_report
    markdown = (page.parent / "report.md").read_text(encoding="utf-8")
    board = pd.read_csv(page.parent / "shapes-mini_tiny-cir-_thirds" / "leaderboard.csv")
    marks = {"better": "▲", "worse": "▼", "equivalent": "=", "undecided": "○"}
    for rate_text, method, _, total, *_ in _table(markdown, DECOMPOSITION_TITLE):
        rate = float(rate_text.rstrip("%")) / 100
        verdict = board[(board.method == method) & np.isclose(board.noise_rate, rate)].vs_sprc.iloc[0]
        assert total.endswith(marks[verdict])
    (setting,) = load_results(root).settings
    worth = kept_worth(setting, n_resamples=400)
    assert {s.other.verdict for s in worth.splits if s.method == "tme"} == {"holds"}


def test_the_noise_types_cost_the_baseline_against_the_perfect_filter(kept_report) -> None:
    root, page = kept_report
    markdown = (page.parent / "report.md").read_text(encoding="utf-8")
    values = _headline(root)
    rows = _table(markdown, NOISE_TYPES_TITLE)
    words = {"clean + reference image swapped": "reference", "clean + caption swapped": "caption",
             "clean + target image swapped": "target"}
    assert [words[r[1]] for r in rows] == ["reference", "caption", "target"] * 2
    header = markdown[markdown.index(f"### {NOISE_TYPES_TITLE}"):].split("\n\n")[2].splitlines()[0]
    assert "conesep: caught (%)" in header and "tme: caught (%)" in header
    for rate_text, cell, _, cost, conesep, tme in rows:
        rate = float(rate_text.rstrip("%")) / 100
        assert _number(cost) == pytest.approx(_paired(values, f"noise_type:{words[cell]}", "oracle", rate), abs=0.006)
        if words[cell] == "caption":  # conesep keeps 20% of caption swaps, tme 60%
            assert float(conesep) > float(tme)
    caption80 = next(r for r in rows if r[:2] == ["80%", "clean + caption swapped"])
    assert _number(caption80[3]) < -10 and caption80[3].endswith("▼")


def test_the_chart_is_drawn_after_the_room_and_the_contents_link_it(kept_report) -> None:
    _, page = kept_report
    text = page.read_text(encoding="utf-8")
    assert (page.parent / "shapes-mini_tiny-cir-_thirds" / "kept_set_worth.png").is_file()
    anchor = 'id="shapes-mini-tiny-cir-thirds-kept-set-worth"'
    assert anchor in text and 'href="#shapes-mini-tiny-cir-thirds-kept-set-worth"' in text
    assert text.index('id="shapes-mini-tiny-cir-thirds-claims"') < text.index(anchor)
    assert NONE_LINE not in text
    alt = re.search(r'<img alt="([^"]*)" data-file="kept_set_worth.png"', text).group(1)
    assert "at 80%" in alt and "replay" in alt and "frontier" in alt


def test_the_chart_reads_a_rate_on_its_kept_set_cells_seeds() -> None:
    """The headline grid on seeds 0-4, the frontier and the replays on 0-2: at 50% every point
    is read on seeds 0-2 (a method against its replay on the same seeds); 20% has no kept-set cell
    and keeps every seed."""
    rows = [(0.5, seed, kind) for seed in range(5) for kind in ("method", "baseline", "perfect filter")]
    rows += [(0.5, seed, kind) for seed in range(3) for kind in ("frontier", "replay")]
    rows += [(0.2, seed, "method") for seed in range(5)]
    points = pd.DataFrame(rows, columns=["noise_rate", "seed", "kind"])
    kept = on_kept_seeds(points)
    assert sorted(set(kept.seed[kept.noise_rate == 0.5])) == [0, 1, 2]
    assert len(kept[kept.noise_rate == 0.5]) == 3 * 5
    assert sorted(kept.seed[kept.noise_rate == 0.2]) == [0, 1, 2, 3, 4]


def test_without_kept_set_cells_one_line_says_so_and_nothing_is_drawn(tmp_path: Path) -> None:
    root = tmp_path / "results"
    write_claims_results(root, [(m, rate, s) for m in ("sprc", "tme") for rate in (0.0, 0.5) for s in (0, 1)])
    page = build_report(root, tmp_path / "report")
    markdown = (page.parent / "report.md").read_text(encoding="utf-8")
    assert markdown.count(NONE_LINE) == 1 and page.read_text(encoding="utf-8").count("No frontier or replay cells") == 1
    assert DECOMPOSITION_TITLE not in markdown and NOISE_TYPES_TITLE not in markdown
    assert not list(page.parent.glob("*/kept_set_worth.png"))
