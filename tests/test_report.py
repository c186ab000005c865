"""The report: figures, ConeSep-style tables with best/second marks, the HTML page, failed
cells listed, and the ``cirbench report`` / ``cirbench run --report`` commands."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from cirbench.cli import app
from cirbench.engine.cell.recorder import purity_rows
from cirbench.report import ReportError, build_report, load_results
from cirbench.report.analysis.rankings.glance import answer_lines
from cirbench.report.analysis.rankings.leaderboard import build_leaderboard
from cirbench.report.analysis.loading.plans import PLANS_FOLDER, write_plan
from cirbench.report.analysis.loading.numbers import CIRR_AVG, FIQ_AVG, flagged_shares, wide_columns
from cirbench.report.render.table_text import to_html, to_markdown
from cirbench.report.analysis.verdicts.claims import recall_judge
from cirbench.report.tables.comparison import ablation_table, recall_table
from cirbench.report.tables.model import Cell
from cirbench.results.chance import below_chance_reason
from cirbench.results.store import KEY_COLUMNS, SCHEMAS, CellKey, ResultsStore
from cirbench.results.summary import run_summary
from test_chance import kept_complement

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
N_TRAIN = 60
# Final-epoch R@10 per method and rate; seed s adds s * 0.01.
R10 = {("sprc", 0.2): 0.40, ("sprc", 0.5): 0.30, ("robust", 0.2): 0.50, ("robust", 0.5): 0.45,
       ("oracle", 0.2): 0.70, ("oracle", 0.5): 0.65}
FAILED = ("robust", 0.5, 1)
PLACEHOLDER = re.compile(r"\{[A-Za-z_][\w.]*\}")
"""A template's name left unfilled in the report's text (``{CLEAN_NAME}``)."""


def _run_row(method: str, status: str, error: str = "") -> dict:
    """A ``runs`` row with every column of the schema, neutral defaults where unset."""
    defaults = {pa.types.is_string: "", pa.types.is_integer: 0, pa.types.is_floating: 0.0, pa.types.is_boolean: False}
    row = {
        f.name: next(v for test, v in defaults.items() if test(f.type))
        for f in SCHEMAS["runs"] if f.name not in KEY_COLUMNS
    }
    return row | {
        "status": status, "error": error, "is_oracle": method == "oracle", "partitions": method != "sprc",
        "method_version": "1", "package_version": "0.1.0", "git_commit": "abc", "n_train": N_TRAIN, "epochs": 2,
        "started": "2024-01-01T00:00:00", "finished": "2024-01-01T00:01:00",
    }


def _tables(method: str, rate: float, seed: int) -> tuple[dict[str, pd.DataFrame], int]:
    rng = np.random.default_rng([int(rate * 10), seed])
    n_noisy = int(rate * N_TRAIN)
    is_noisy = np.arange(N_TRAIN) < n_noisy
    noise_type = np.where(is_noisy, np.array(["reference", "caption", "target"])[np.arange(N_TRAIN) % 3], "clean")
    metrics, purity, scores, losses = [], [], [], []
    for epoch in range(2):
        r10 = R10[(method, rate)] + seed * 0.01 - (0.1 if epoch == 0 else 0.0)
        for metric, value in (("recall@1", r10 / 4), ("recall@10", r10), ("recall@50", min(1.0, r10 * 1.5))):
            metrics.append({"epoch": epoch, "split": "val", "group": "all", "metric": metric, "value": value, "eval_protocol": "p"})
        for step in range(2):
            for name, value in (("total", 2.0 - epoch - step * 0.1), ("itc", 1.0 - epoch * 0.3)):
                losses.append({"epoch": epoch, "step": epoch * 2 + step, "name": name, "value": value})
        if method != "sprc":
            score = np.where(is_noisy, 0.7, 0.3) + rng.normal(0, 0.15, N_TRAIN)
            if method == "oracle":
                score = is_noisy.astype(float)
            selected = score < 0.5
            rows = purity_rows(selected, score, is_noisy, noise_type)
            rows.insert(0, "epoch", epoch)
            purity.append(rows)
            scores.append(pd.DataFrame({
                "sample_id": [f"s{i}" for i in range(N_TRAIN)], "epoch": epoch, "score": score,
                "selected_clean": selected, "is_noisy": is_noisy, "noise_type": noise_type,
            }))
    frames = {"metrics": pd.DataFrame(metrics), "losses": pd.DataFrame(losses)}
    if purity:
        frames["purity"] = pd.concat(purity, ignore_index=True)
        frames["scores"] = pd.concat(scores, ignore_index=True)
    return frames, n_noisy


def write_results(root: Path, methods=("sprc", "robust", "oracle"), rates=(0.2, 0.5), seeds=(0, 1)) -> None:
    """By default three methods (one an oracle) x two rates x two seeds; robust at 0.5 seed 1 failed."""
    store = ResultsStore(root)
    for method in methods:
        for rate in rates:
            for seed in seeds:
                key = CellKey(f"{method}-{rate}-{seed}", method, "toy", "tiny", "thirds", rate, seed)
                if (method, rate, seed) == FAILED:
                    store.write_run(key, _run_row(method, "failed", "Traceback ...\nRuntimeError: boom"), {})
                    continue
                tables, n_noisy = _tables(method, rate, seed)
                row = _run_row(method, "completed") | {"n_noisy": n_noisy}
                store.write_run(key, row, tables)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("results")
    write_results(root)
    out = tmp_path_factory.mktemp("report")
    return root, build_report(root, out)


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """One cell only: enough for the command-line tests, quick to draw."""
    root = tmp_path_factory.mktemp("small")
    write_results(root, methods=("sprc",), rates=(0.2,), seeds=(0,))
    return root


def test_figures_exist_and_html_embeds_every_one(built) -> None:
    _, page = built
    pngs = sorted((page.parent / "toy_tiny_thirds").glob("*.png"))
    names = {p.stem for p in pngs}
    assert {"recall_vs_noise", "purity_bars", "detection_by_noise_type", "score_distributions", "roc_curves",
            "validation_curves", "training_sprc", "training_robust", "training_oracle"} <= names
    text = page.read_text(encoding="utf-8")
    markdown = (page.parent / "report.md").read_text(encoding="utf-8")
    for png in pngs:
        data = png.read_bytes()
        assert len(data) > 1000 and data.startswith(PNG_MAGIC), png
        assert base64.b64encode(data).decode("ascii") in text, f"{png.name} is not embedded in the HTML"
        assert f"](toy_tiny_thirds/{png.name})" in markdown, f"{png.name} is not linked from report.md"


def test_no_figure_title_caption_or_alt_text_keeps_a_placeholder(built) -> None:
    """Every figure's title, caption and alt text is filled in, in both pages: issue 79 found
    the kept-clean bars' caption printing ``{CLEAN_NAME}``."""
    _, page = built
    markdown = (page.parent / "report.md").read_text(encoding="utf-8")
    figures = re.findall(r"\n([^\n]+)\n\n!\[([^\]]+)\]\([^)]+\.png\)", markdown)
    assert len(figures) >= 8 and any("truly clean" in caption for caption, _ in figures)
    for caption, alt in figures:
        assert not PLACEHOLDER.findall(caption + alt), (caption, alt)
    assert not PLACEHOLDER.findall(markdown) and not PLACEHOLDER.findall(page.read_text(encoding="utf-8"))


def test_table_marks_the_highest_mean_and_skips_oracles(built) -> None:
    root, _ = built
    (setting,) = load_results(root).settings
    table = recall_table(setting)
    column = table.columns.index("R@10")
    rows = {}
    current = ""
    for noise, method, cells in table.rows:
        current = noise or current
        rows[(current, method)] = cells[column]
    assert rows[("20%", "robust")] == Cell("50.50 ± 0.71", 1)
    assert rows[("20%", "sprc")].rank == 0  # no second mark: bold and underline are the leaderboard's
    assert rows[("20%", "oracle (perfect filter)")].rank == 0  # the perfect filter is shown, never ranked
    assert rows[("50%", "robust")].text == "45.00"  # one seed left after the failed cell: no std
    assert (rows[("50%", "robust")].rank, rows[("50%", "sprc")].rank) == (1, 0)
    assert "50.50 ± 0.71 •" in to_markdown(table) and "**" not in to_markdown(table)
    assert '50.50 ± 0.71<span class="top">•</span>' in to_html(table) and "<b>" not in to_html(table)


def test_failed_cell_is_listed_not_fatal(built) -> None:
    root, page = built
    data = load_results(root)
    problems = data.problems
    assert len(problems) == 1
    row = problems.iloc[0]
    assert (row.method, row.noise_rate, row.seed, row.status, row.error) == (*FAILED, "failed", "RuntimeError: boom")
    assert "RuntimeError: boom" in page.read_text(encoding="utf-8")
    assert "| robust | 0.5 | 1 | failed | RuntimeError: boom |" in (page.parent / "report.md").read_text(encoding="utf-8")


def test_at_a_glance_names_best_and_cleanest(built) -> None:
    _, page = built
    markdown = (page.parent / "report.md").read_text(encoding="utf-8")
    glance = markdown.split("### At a glance", 1)[1].split("###", 1)[0]  # the first screen's answers, one per rate
    assert "- **20%**: " in glance and "- **50%**: " in glance and "`robust`" in glance and "surely" in glance
    assert "Cleanest kept set at each run's last epoch: 20%: robust" in markdown
    assert "a random subset: 80.0%" in markdown  # 12 of the 60 training samples are noisy at 20%


def test_the_answers_never_name_a_sweep_trial_or_an_ablation_row(tmp_path: Path, monkeypatch) -> None:
    for label, r10 in (("robust:trial1", 0.90), ("robust:no_x", 0.80)):  # both above every compared method
        for rate in (0.2, 0.5):
            monkeypatch.setitem(R10, (label, rate), r10)
    write_results(tmp_path, methods=("sprc", "robust", "oracle", "robust:trial1", "robust:no_x"), seeds=(0,))
    setting = load_results(tmp_path).settings[0]
    assert setting.trials == ["robust:trial1"] and setting.variants == ["robust:no_x"]
    lines = answer_lines(build_leaderboard(setting, n_resamples=200))
    assert len(lines) == 2 and all("`robust`" in line and ":trial1" not in line and ":no_x" not in line for line in lines)


def test_flag_rate_is_the_share_not_kept(built) -> None:
    root, _ = built
    setting = load_results(root).settings[0]
    expected = np.mean([1.0 - _tables("robust", 0.2, seed)[0]["scores"].query("epoch == 1").selected_clean.mean()
                        for seed in (0, 1)])
    shares = flagged_shares(setting)
    assert shares[0.2]["robust"] == pytest.approx(expected)
    assert shares[0.2]["oracle"] == pytest.approx(0.2)  # the oracle flags exactly the noisy samples
    assert "sprc" not in shares[0.2]


def test_never_run_cell_is_listed(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    for method, rate in (("sprc", 0.2), ("sprc", 0.5), ("robust", 0.2)):
        tables, n_noisy = _tables(method, rate, 0)
        store.write_run(CellKey(f"{method}-{rate}", method, "toy", "tiny", "thirds", rate, 0),
                        _run_row(method, "completed") | {"n_noisy": n_noisy}, tables)
    problems = load_results(tmp_path).problems
    assert problems[["method", "noise_rate", "status"]].values.tolist() == [["robust", 0.5, "missing"]]


def test_a_variant_or_oracle_is_expected_only_at_its_own_rates(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    cells = [("sprc", 0.2, 0), ("sprc", 0.5, 0), ("sprc", 0.2, 1), ("sprc", 0.5, 1), ("sprc", 0.2, 2), ("sprc", 0.5, 2),
             ("robust:other", 0.2, 0), ("robust:other", 0.2, 1), ("robust:ablated", 0.2, 0), ("oracle", 0.5, 0),
             ("oracle", 0.5, 1), ("oracle", 0.5, 2)]
    for method, rate, seed in cells:
        tables, n_noisy = _tables(method.split(":")[0], rate, seed)
        row = _run_row(method, "completed") | {"n_noisy": n_noisy, "is_oracle": method == "oracle"}
        store.write_run(CellKey(f"{method}-{rate}-{seed}", method, "toy", "tiny", "thirds", rate, seed), row, tables)
    problems = load_results(tmp_path).problems
    # the ablation grid ran seeds 0-1 (its variants'), the headline 0-2: seed 2 of a variant was never planned
    assert problems[["method", "noise_rate", "seed"]].values.tolist() == [["robust:ablated", 0.2, 1]]


def _write_cells(store: ResultsStore, cells: list[tuple[str, float, int]]) -> None:
    for method, rate, seed in cells:
        tables, n_noisy = _tables(method.split(":")[0], rate, seed)
        row = _run_row(method, "completed") | {"n_noisy": n_noisy}
        store.write_run(CellKey(f"{method}-{rate}-{seed}", method, "toy", "tiny", "thirds", rate, seed), row, tables)


def test_a_study_plan_tells_two_grids_variants_apart(tmp_path: Path) -> None:
    """``sprc:release`` on seeds 0-1 and ``sprc:fixed`` on seeds 0-2 (two grids of one base):
    without a plan the runs alone expect the first at seed 2; with the study's plan, no cell is
    missing but the one planned and never run, named with its study."""
    store = ResultsStore(tmp_path)
    _write_cells(store, [("sprc", 0.5, s) for s in range(3)] + [("sprc:release", 0.5, s) for s in range(2)]
                 + [("sprc:fixed", 0.5, s) for s in range(3)])
    guessed = load_results(tmp_path).problems
    assert guessed[["method", "seed"]].values.tolist() == [["sprc:release", 2]]
    planned = [CellKey("", m, "toy", "tiny", "thirds", 0.5, s) for m, seeds in (("sprc", 3), ("sprc:release", 2),
                                                                                 ("sprc:fixed", 3), ("sprc:never", 1))
               for s in range(seeds)]
    write_plan(tmp_path, "committed", planned + [CellKey("", "zero_shot", "toy", "tiny", "thirds", float("nan"), 0)])
    problems = load_results(tmp_path).problems
    assert problems[["method", "noise_rate", "seed", "status", "error"]].values.tolist() == [
        ["sprc:never", 0.5, 0, "missing", "never run (planned by committed)"]]


def test_a_damaged_plan_file_is_named(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    _write_cells(store, [("sprc", 0.5, 0)])
    (tmp_path / PLANS_FOLDER).mkdir()
    (tmp_path / PLANS_FOLDER / "study.parquet").write_text("not parquet")
    with pytest.raises(ReportError, match=r"study\.parquet: not a readable plan file"):
        load_results(tmp_path)


def test_a_perfect_filter_is_never_expected_at_no_noise(tmp_path: Path) -> None:
    """An older folder's ``oracle`` at 0% on one seed (now ``sprc``'s cell, never trained) leaves no seed missing."""
    store = ResultsStore(tmp_path)
    R10[("oracle", 0.0)] = R10[("sprc", 0.0)] = 0.5
    cells = [("sprc", 0.0, 0), ("sprc", 0.0, 1), ("sprc", 0.5, 0), ("sprc", 0.5, 1), ("oracle", 0.0, 0),
             ("oracle", 0.5, 0), ("oracle", 0.5, 1)]
    try:
        for method, rate, seed in cells:
            tables, n_noisy = _tables(method, rate, seed)
            row = _run_row(method, "completed") | {"n_noisy": n_noisy}
            store.write_run(CellKey(f"{method}-{rate}-{seed}", method, "toy", "tiny", "thirds", rate, seed), row, tables)
    finally:
        del R10[("oracle", 0.0)], R10[("sprc", 0.0)]
    assert load_results(tmp_path).problems.empty
    store.write_run(CellKey("sprc-0.5-2", "sprc", "toy", "tiny", "thirds", 0.5, 2),
                    _run_row("sprc", "completed") | {"n_noisy": 30}, _tables("sprc", 0.5, 2)[0])
    missing = load_results(tmp_path).problems[["method", "noise_rate", "seed"]].values.tolist()
    assert missing == [["oracle", 0.5, 2], ["sprc", 0.0, 2]]  # seed 2 of everything but the perfect filter at 0%


def test_ablation_rows_get_their_own_table_and_stay_out_of_the_ranking(tmp_path: Path) -> None:
    write_results(tmp_path, methods=("sprc", "robust"), rates=(0.2,), seeds=(0, 1))
    store = ResultsStore(tmp_path)
    for seed in (0, 1):
        tables, n_noisy = _tables("sprc", 0.2, seed)  # sprc's R@10 (0.40) under an ablation label of robust (0.50)
        store.write_run(CellKey(f"robust:weak-{seed}", "robust:weak", "toy", "tiny", "thirds", 0.2, seed),
                        _run_row("robust:weak", "completed") | {"n_noisy": n_noisy}, tables)
    setting = load_results(tmp_path).settings[0]
    assert setting.methods == ["sprc", "robust"] and setting.variants == ["robust:weak"]
    retrieval = recall_table(setting)
    assert [method for _, method, _ in retrieval.rows] == ["sprc", "robust"]
    table = ablation_table(setting)
    assert [(rate, method) for rate, method, _ in table.rows] == [("20%", "robust"), ("", "robust:weak")]
    assert table.columns == ["R@10", "vs full"]
    assert table.rows[0][2][1].text == "-" and table.rows[1][2][1].text == "-10.00"
    judged = ablation_table(setting, recall_judge(setting, margin=0.01))  # the leaderboard's answer, marked
    assert judged.rows[0][2][1].text == "-" and judged.rows[1][2][1].text == "-10.00 ○", judged.rows  # no per-query results: no bootstrap, undecided


def test_an_ablation_difference_reads_the_seeds_both_rows_share(tmp_path: Path) -> None:
    """Issue 79: the full method on seeds 0-2 beside a variant on seeds 0-1: "vs full" is the
    mean paired difference on seeds 0-1 (-10.00), not the two rows' means (-10.50)."""
    write_results(tmp_path, methods=("sprc", "robust"), rates=(0.2,), seeds=(0, 1, 2))
    store = ResultsStore(tmp_path)
    for seed in (0, 1):
        tables, n_noisy = _tables("sprc", 0.2, seed)  # R@10 0.40 + 0.01 * seed against robust's 0.50 + 0.01 * seed
        store.write_run(CellKey(f"robust:weak-{seed}", "robust:weak", "toy", "tiny", "thirds", 0.2, seed),
                        _run_row("robust:weak", "completed") | {"n_noisy": n_noisy}, tables)
    table = ablation_table(load_results(tmp_path).settings[0])
    assert [row[2][1].text for row in table.rows] == ["-", "-10.00"], table.rows
    assert "on the seeds both rows share" in table.note


def test_a_collapsed_cell_is_marked_in_every_table_and_listed_with_its_reason(built, tmp_path: Path) -> None:
    root = tmp_path / "results"
    write_results(root, methods=("sprc", "robust"), rates=(0.2,), seeds=(0, 1))
    reason = "R@10 0.005 below text_only 0.013 at the final epoch (2)"
    tables, n_noisy = _tables("robust", 0.2, 0)
    ResultsStore(root).write_run(CellKey("robust-0.2-0", "robust", "toy", "tiny", "thirds", 0.2, 0),
                                 _run_row("robust", "completed") | {"n_noisy": n_noisy, "collapsed": True,
                                                                    "collapse_reason": reason}, tables)
    page = build_report(root, tmp_path / "report")
    markdown = (page.parent / "report.md").read_text(encoding="utf-8")
    for title in ("Retrieval", "Gain over sprc", "Kept-set purity and noise detection"):
        table = markdown.split(f"### {title}", 1)[1].split("###", 1)[0]
        assert "robust†" in table and "robust at 20% on 1 of 2 seeds" in table, title  # the row and its footnote
    assert "| sprc |" in markdown.split("### Retrieval", 1)[1].split("###", 1)[0]  # a healthy row is not marked
    assert "`robust`†" in markdown.split("### At a glance", 1)[1].split("###", 1)[0]  # at a glance
    section = markdown.split("### Collapsed cells", 1)[1].split("###", 1)[0]
    assert f"| robust | 20% | 0 | {reason} |" in section and "never a robustness result" in section
    text = page.read_text(encoding="utf-8")
    assert "robust†" in text and reason in text
    assert "No cell is flagged collapsed." in (built[1].parent / "report.md").read_text(encoding="utf-8")


def test_results_written_before_the_collapse_guard_are_judged_when_read(tmp_path: Path) -> None:
    """A run written before the guard reads as not judged (null), and the report judges it
    from its own tables against the text_only row of its seed."""
    write_results(tmp_path, methods=("sprc",), rates=(0.2,), seeds=(0, 1))
    store = ResultsStore(tmp_path)
    for seed, r10 in ((0, 0.30), (1, 0.90)):  # sprc at 20% has R@10 0.80 (seed 0) and 0.81 (seed 1)
        metrics = pd.DataFrame([{"epoch": 0, "split": "val", "group": "all", "metric": "recall@10", "value": r10,
                                 "eval_protocol": "p"}])
        row = _run_row("text_only", "completed") | {"is_reference": True, "epochs": 0}
        store.write_run(CellKey(f"text_only-{seed}", "text_only", "toy", "tiny", "thirds", float("nan"), seed), row,
                        {"metrics": metrics})
    for part in (tmp_path / "runs").glob("*.parquet"):  # as a results folder of an earlier version wrote them
        pq.write_table(pq.read_table(part).drop_columns(["collapsed", "collapse_reason"]), part)
    runs = store.read("runs")
    assert runs.collapse_reason.isna().all()
    (setting,) = load_results(tmp_path).settings
    judged = setting.runs.set_index("seed")
    assert judged.loc[0, "collapse_reason"] == "" and not judged.loc[0, "collapsed"]
    assert judged.loc[1, "collapsed"] and "below text_only 0.900 at the final epoch (2)" in judged.loc[1, "collapse_reason"]
    assert setting.label("sprc", 0.2) == "sprc†"


def _dirty_kept_set(root: Path, rate: float, seed: int) -> str:
    """Rewrite robust's cell at ``rate`` and ``seed`` with a kept set of mostly noisy samples,
    flagged as the engine flags it; returns the reason."""
    tables, n_noisy = _tables("robust", rate, seed)
    tables = kept_complement(tables)
    reason = below_chance_reason(tables["purity"], n_noisy)
    row = _run_row("robust", "completed") | {"n_noisy": n_noisy, "below_chance": bool(reason), "below_chance_reason": reason}
    ResultsStore(root).write_run(CellKey(f"robust-{rate}-{seed}", "robust", "toy", "tiny", "thirds", rate, seed), row, tables)
    return reason


def test_a_kept_set_below_chance_is_marked_in_the_purity_table_and_listed_per_seed(built, tmp_path: Path) -> None:
    root = tmp_path / "results"
    write_results(root, methods=("sprc", "robust"), rates=(0.2,), seeds=(0, 1))
    reason = _dirty_kept_set(root, 0.2, 0)
    assert reason.startswith("kept set ") and "below chance 80.0% (p=" in reason and reason.endswith("final epoch (2)")
    page = build_report(root, tmp_path / "report")
    markdown = (page.parent / "report.md").read_text(encoding="utf-8")
    table = markdown.split("### Kept-set purity and noise detection", 1)[1].split("###", 1)[0]
    assert "| robust‡ |" in table and "‡ kept set less clean than a random subset" in table
    assert "robust at 20% on 1 of 2 seeds" in table  # the footnote, per seed
    assert "‡" not in markdown.split("### Retrieval", 1)[1].split("###", 1)[0]  # a flag of the kept set only
    assert "‡ 1 run(s) kept a set less clean than a random subset" in markdown  # at a glance
    section = markdown.split("### Kept sets below chance", 1)[1].split("###", 1)[0]
    assert f"| robust | 20% | 0 | {reason} |" in section and "A flag, not a failure" in section
    assert "| robust | 20% | 1 |" not in section
    assert markdown.index("### Collapsed cells") < markdown.index("### Kept sets below chance")
    assert "No cell is flagged collapsed." in markdown  # not a collapse
    assert "robust‡" in page.read_text(encoding="utf-8") and reason in page.read_text(encoding="utf-8")
    assert "No kept set is flagged below chance." in (built[1].parent / "report.md").read_text(encoding="utf-8")


def test_results_written_before_the_chance_flag_are_judged_when_read(tmp_path: Path) -> None:
    write_results(tmp_path, methods=("sprc", "robust"), rates=(0.2,), seeds=(0, 1))
    reason = _dirty_kept_set(tmp_path, 0.2, 1)
    for part in (tmp_path / "runs").glob("*.parquet"):  # as a results folder of an earlier version wrote them
        pq.write_table(pq.read_table(part).drop_columns(["below_chance", "below_chance_reason"]), part)
    assert ResultsStore(tmp_path).read("runs").below_chance_reason.isna().all()
    (setting,) = load_results(tmp_path).settings
    assert setting.below_chance[["method", "seed", "below_chance_reason"]].values.tolist() == [["robust", 1, reason]]
    assert setting.runs.below_chance.tolist().count(False) == len(setting.runs) - 1
    assert setting.below_chance_mark("robust", 0.2) == "‡" and setting.below_chance_mark("sprc", 0.2) == ""
    keys = [CellKey(r.run_id, r.method, "toy", "tiny", "thirds", 0.2, r.seed) for r in setting.runs.itertuples()]
    summary = run_summary(ResultsStore(tmp_path), [(key, "completed") for key in keys], ["sprc", "robust"])
    assert [row.below_chance_reason for row in summary.rows] == ["", "", "", reason]  # `cirbench run`'s summary too


def test_report_of_only_failed_cells_lists_them(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "results")
    for rate in (0.2, 0.5):
        store.write_run(CellKey(f"sprc-{rate}", "sprc", "toy", "tiny", "thirds", rate, 0),
                        _run_row("sprc", "failed", f"ValueError: bad {rate}"), {})
    page = build_report(tmp_path / "results", tmp_path / "out")
    text = page.read_text(encoding="utf-8")
    assert "ValueError: bad 0.2" in text and "ValueError: bad 0.5" in text
    assert "0 completed cell(s)" in text


def test_average_columns_of_fashioniq_and_cirr() -> None:
    rows = [{"run_id": "a", "group": "average", "metric": "mean(recall@10,recall@50)", "value": 0.4}]  # dataset summary rows
    for group, r10, r50 in (("dress", 0.2, 0.4), ("shirt", 0.3, 0.5), ("toptee", 0.4, 0.6), ("average", 0.3, 0.5)):
        rows += [{"run_id": "a", "group": group, "metric": "recall@10", "value": r10},
                 {"run_id": "a", "group": group, "metric": "recall@50", "value": r50}]
    fiq = wide_columns(pd.DataFrame(rows), ["run_id"])
    assert list(fiq.columns) == ["dress R@10", "dress R@50", "shirt R@10", "shirt R@50", "toptee R@10", "toptee R@50",
                                 "Avg R@10", "Avg R@50", FIQ_AVG]
    assert fiq.loc["a", "Avg R@10"] == pytest.approx(30.0) and fiq.loc["a", FIQ_AVG] == pytest.approx(40.0)
    cirr = wide_columns(pd.DataFrame([
        {"run_id": "a", "group": "all", "metric": m, "value": v}
        for m, v in (("recall@1", 0.3), ("recall@5", 0.6), ("recall_subset@1", 0.8), ("recall_subset@2", 0.9),
                     ("mean(recall@5,recall_subset@1)", 0.7))
    ]), ["run_id"])
    assert list(cirr.columns) == ["R@1", "R@5", "R_sub@1", "R_sub@2", CIRR_AVG]
    assert cirr.loc["a", CIRR_AVG] == pytest.approx(70.0)


def test_missing_results_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="does not exist"):
        build_report(tmp_path / "nope", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="has no runs"):
        build_report(tmp_path / "empty", tmp_path / "out")


def test_cli_report(small: Path, tmp_path: Path) -> None:
    root = small
    runner = CliRunner()
    result = runner.invoke(app, ["report", "--results", str(root), "--output", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "rep" / "index.html").stat().st_size > 10_000
    assert (tmp_path / "rep" / "report.md").exists()
    missing = runner.invoke(app, ["report", "--results", str(tmp_path / "absent"), "--output", str(tmp_path / "rep2")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_cli_run_with_report_builds_it_after_the_grid(small: Path, tmp_path: Path, monkeypatch) -> None:
    """``run --report`` builds the report of --output into --report-dir (the grid itself is
    replaced by one with no cells left to run, so the test stays fast)."""
    import cirbench.api.grids as grid_module  # where `cirbench run` builds its grid

    root = small

    class DoneGrid:
        def __init__(self, spec, discovery=None) -> None:
            self.spec, self.store, self.cells, self.skipped = spec, ResultsStore(spec.output), [], []
            self.discovery = type("D", (), {"problems": []})()

        def reference_cells(self) -> list:
            return []

        def pending(self) -> list:
            return []

    monkeypatch.setattr(grid_module, "Grid", DoneGrid)
    monkeypatch.setattr("cirbench.engine.running.runner.check_grid", lambda grid, announce: None)  # a fake grid: no plugins to check
    monkeypatch.setattr("cirbench.engine.running.runner.refuse_another_evaluation", lambda grid: None)  # nor a dataset to load
    result = CliRunner().invoke(app, ["run", "--methods", "sprc", "--noise", "0.2", "--output", str(root),
                                      "--report", "--report-dir", str(tmp_path / "after")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "after" / "index.html").exists()
    assert (tmp_path / "after" / "toy_tiny_thirds" / "recall_vs_noise.png").exists()
    assert "report written" in result.output


def test_provenance_names_the_held_out_shares_and_warns_when_two_are_compared() -> None:
    from cirbench.report.render.content import _holdout_shares

    runs = pd.DataFrame({"method": ["sprc", "conesep", "conesep:no_x", "sprc:trial1"], "holdout": [0.1, 0.1, 0.1, 0.1]})
    assert _holdout_shares(runs) == ["held-out shares of the compared runs: 0.1 (3 run(s))"]
    mixed = runs.assign(holdout=[0.1, 0.1, 0.0, 0.1])  # an ablation row run with --holdout 0 beside the default
    (line,) = _holdout_shares(mixed)
    assert line.startswith("WARNING: runs trained with different held-out shares") and "0 (1 run(s)), 0.1 (2 run(s))" in line
    assert _holdout_shares(runs.drop(columns="holdout")) == []


MACHINE_PATHS = ("/home/", "/work/", "/tmp/", "/Users/")


def test_the_report_prints_no_path_of_the_machine_that_built_it(built) -> None:
    """The results folder under Provenance relative to the report's folder (both under one
    folder here, as a repository's ``results/`` and ``reports/``), never as an absolute path."""
    root, page = built
    for text in (page.read_text(encoding="utf-8"), (page.parent / "report.md").read_text(encoding="utf-8")):
        assert str(root) not in text and str(root.parent) not in text
        assert not [p for p in MACHINE_PATHS if p in text], [text[text.index(p) - 80:text.index(p) + 80]
                                                             for p in MACHINE_PATHS if p in text]
        assert f"Results: ../{root.name} (relative to this report" in text


def test_results_outside_the_reports_repository_are_named_not_located(tmp_path: Path) -> None:
    from cirbench.report.render.content import results_line

    (tmp_path / "repo" / ".git").mkdir(parents=True)
    inside, outside, out = tmp_path / "repo" / "results", tmp_path / "study" / "results", tmp_path / "repo" / "reports"
    assert results_line(inside, out) == "Results: ../results (relative to this report's folder)"
    assert results_line(outside, out) == "Results: a folder named results (outside this report's repository: its name only)"


class _TableParents(HTMLParser):
    """Each ``<table>``'s class and the element it sits in (tag and class)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str]] = []
        self.tables: list[tuple[str, tuple[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in {"br", "img", "meta"}:
            return
        kind = dict(attrs).get("class") or ""
        if tag == "table":
            self.tables.append((kind, self.stack[-1]))
        self.stack.append((tag, kind))

    def handle_endtag(self, tag: str) -> None:
        while self.stack and self.stack.pop()[0] != tag:
            pass


def test_every_html_table_scrolls_in_its_own_box(built) -> None:
    """A table wider than the page (at 1,280 px, the eight-column leaderboard and the purity
    table) scrolls sideways inside its box: the page itself never widens."""
    from cirbench.report.render.html import STYLE

    _, page = built
    parser = _TableParents()
    parser.feed(page.read_text(encoding="utf-8"))
    kinds = {kind for kind, _ in parser.tables}
    assert {"leaderboard", "results", "problems"} <= kinds, kinds
    assert [kind for kind, parent in parser.tables if parent != ("div", "wide")] == []
    assert "div.wide { overflow-x: auto; max-width: 100%; }" in STYLE
