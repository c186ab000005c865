"""The README quotes no result by hand: its results block is generated from the committed
report (and must equal what the report generates now), its prose outside that block holds
no recall, purity, share or verdict count, its commands are CI's, and ``cirbench report
--readme`` rewrites the block from the report it builds."""

from __future__ import annotations

import re
import shutil
import tomllib
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from cirbench.cli import app
from cirbench.report.render.readme import BEGIN, END, ReadmeError, results_block, update_readme
from test_report import write_results

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULT_NUMBERS = {
    "a recall, purity or share (0.xxx)": r"\b0\.\d+",
    "a percentage clean": r"\d+(\.\d+)?% clean",
    "a verdict count": r"\b(holds|does not hold|undecided|not run)[:,]? \d",
    "a count of claims": r"\b\d+ claims",
    "a gap or gain": r"[+-]0\.\d",
}


def _prose(text: str) -> str:
    """``text`` without its generated block and its fenced code."""
    outside = text.split(BEGIN, 1)[0] + text.split(END, 1)[1]
    return re.sub(r"```.*?```", "", outside, flags=re.S)


def test_the_readmes_results_are_the_committed_reports() -> None:
    block = README[README.index(BEGIN):README.index(END) + len(END)]
    assert block == results_block(ROOT / "reports", ROOT), "regenerate it: cirbench report --readme README.md"
    assert "| sprc |" in block and "Verdicts of" in block and "wins back" in block


MARKS = {"better": "▲", "worse": "▼", "equivalent": "=", "undecided": "○",
         "inconclusive": "○"}  # a leaderboard.csv written before the four answers says "inconclusive" for undecided
WORD_LIMIT, LEGEND_LIMIT = 1200, 60
"""The README's words (``str.split``, the whole file) and the words above a results block's first table."""


def _two(value: float) -> str:
    """``value`` at two decimals by the report's one rule, restated: half away from zero on the decimal value."""
    return str(Decimal(repr(float(value))).quantize(Decimal("0.01"), ROUND_HALF_UP))


def _number(mean: float, std: float, below: bool) -> str:
    return f"{_two(mean)} ± {_two(std)}" + ("§" if below else "")


def _expected_cells(row) -> tuple[str, str]:
    """A leaderboard.csv cell as the README's two tables print it, read here without the report's
    code: the claims' metric (bold: best, underlined: tied for the lead, § below zero_shot) with
    its comparison mark, and R@10."""
    metric = _number(row.metric_mean, row.metric_std, row.metric_below)
    metric = f"**{metric}**" if row.lead == "best" else f"<u>{metric}</u>" if row.lead == "tied" else metric
    mark = MARKS.get(row.versus, "") + ("†" if row.collapsed else "")
    return metric + (f" {mark}" if mark else ""), _number(row.recall_mean, row.recall_std, row.below_zero_shot)


def _tables(block: str) -> dict[str, dict[str, list[str]]]:
    """The block's Markdown tables by their first header cell: row label -> cells."""
    tables: dict[str, dict[str, list[str]]] = {}
    current = None
    for line in block.splitlines():
        if not line.startswith("|"):
            current = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if current is None:
            current = tables.setdefault(cells[0], {})
        elif not cells[0].startswith(":--"):
            current[cells[0]] = cells[1:]
    return tables


def test_the_readme_says_what_the_leaderboard_says() -> None:
    """Every trained cell of the committed leaderboard, its headline with its marks in one table
    and its R@10 in another, is in the README's block as the leaderboard shows it: the front page
    cannot rank methods on R@10 alone where the leaderboard's headline and marks say otherwise."""
    block = README[README.index(BEGIN):README.index(END)]
    tables = _tables(block)
    for csv in sorted((ROOT / "reports").glob("*/leaderboard.csv")):
        board = pd.read_csv(csv, keep_default_na=False, na_values=[""])
        assert f"]({csv.relative_to(ROOT).as_posix()})" in block
        start = board[(board.kind == "reference") & (board.method == "zero_shot")].metric_mean
        trained = board[board.kind.isin(["ranked", "perfect filter"])].copy()
        trained["versus"] = trained[next(c for c in board.columns if c.startswith("vs_"))].fillna("")
        trained["lead"] = trained["lead"].fillna("")
        trained["metric_below"] = (trained.metric_below_zero_shot if "metric_below_zero_shot" in trained.columns
                                   else trained.metric_mean < float(start.iloc[0]))
        rates = sorted(trained.noise_rate.astype(float).unique())
        metric, recall = trained.metric.iloc[0], trained.recall.iloc[0]
        assert f"| {metric} | " + " | ".join(f"{r * 100:g}%" for r in rates) + " |" in block
        for row in trained.itertuples():
            expected = _expected_cells(row)
            column = rates.index(float(row.noise_rate))
            assert tables[metric][row.label][column] == expected[0], (row.label, row.noise_rate)
            assert tables[recall][row.label][column] == expected[1], (row.label, row.noise_rate)


def test_the_readme_is_a_quickstart() -> None:
    """At most WORD_LIMIT words, and at most LEGEND_LIMIT words from a results block's title line
    to its first table: the rest is the report's, linked."""
    assert len(README.split()) <= WORD_LIMIT, f"README.md has {len(README.split())} words (at most {WORD_LIMIT})"
    block = README[README.index(BEGIN) + len(BEGIN):README.index(END)]
    for setting in re.split(r"\n(?=\*\*)", block)[1:]:
        above = setting.split("\n| ", 1)[0]
        assert len(above.split()) <= LEGEND_LIMIT, f"{len(above.split())} words above the first table: {above!r}"


def _answers(block: str) -> dict[str, str]:
    """The block's one-line answers by noise rate."""
    return {m[1]: m[2] for m in re.finditer(r"^- \*\*(\d+%)\*\*: (.*)$", block, re.M)}


def test_the_readmes_answers_are_the_leaderboards_marks() -> None:
    """Each noise rate's answer names exactly the methods the leaderboard marks better and worse
    than the baseline, each with its mark and its difference of means (read from the CSV here)."""
    block = README[README.index(BEGIN):README.index(END)]
    answers = _answers(block)
    board = pd.read_csv(next((ROOT / "reports").glob("*/leaderboard.csv")), keep_default_na=False, na_values=[""])
    versus = next(c for c in board.columns if c.startswith("vs_"))
    baseline = versus[3:]
    ranked = board[board.kind == "ranked"]
    assert set(answers) == {f"{r * 100:g}%" for r in ranked.noise_rate.astype(float).unique()}
    for rate, here in ranked.groupby(ranked.noise_rate.astype(float)):
        line = answers[f"{rate * 100:g}%"]
        base = float(here[here.method == baseline].metric_mean.iloc[0])
        for row in here[here.method != baseline].itertuples():
            verdict = getattr(row, versus)
            named = f"`{row.method}` ({row.metric_mean - base:+.1f} {MARKS[verdict]})"
            assert (named in line) == (verdict in ("better", "worse")), (rate, row.method, line)
            assert f"`{row.method}`" in line
        says_none = f"no method beats `{baseline}` surely" in line
        assert says_none == (not (here[versus] == "better").any()), line


@pytest.mark.parametrize("what, pattern", RESULT_NUMBERS.items())
def test_the_readme_types_no_result_by_hand(what: str, pattern: str) -> None:
    found = re.findall(pattern, _prose(README))
    assert not found, f"README.md quotes {what} outside its generated block: {found}"


def test_the_readme_says_which_grids_ran_which_seeds() -> None:
    """The committed study's headline grid and its other grids on the seeds its file gives them (issue 79:
    the README said "three seeds" of a five-seed headline)."""
    study = tomllib.loads((ROOT / "experiments" / "committed-report.toml").read_text(encoding="utf-8"))
    headline = next(g for g in study["grid"] if g["kind"] == "run" and "sprc" in g.get("methods", ()))

    def span(seeds: list[int]) -> str:
        return f"seeds {min(seeds)}-{max(seeds)}"

    prose = " ".join(_prose(README).split())
    said = re.search(r"The committed report .*?\. ", prose).group(0)
    assert f"every hosted method at four noise rates and the perfect filter on {span(headline['seeds'])}" in said, said
    assert f"their ablations and the kept-set cells on {span(study['defaults']['seeds'])}" in said, said
    assert "three seeds" not in said


def test_the_readmes_install_and_test_commands_are_cis() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    install = next(line for line in ci.splitlines() if line.startswith("pip install"))
    test = next(line for line in ci.splitlines() if line.startswith("python -m pytest"))
    assert install.replace(" -q", "") in README and f"```bash\n{test}\n```" in README


def test_the_block_follows_the_report(tmp_path: Path) -> None:
    report = tmp_path / "reports"
    shutil.copytree(ROOT / "reports", report, ignore=shutil.ignore_patterns("*.png", "index.html"))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{BEGIN}\n{END}\n\ntail\n")
    assert update_readme(readme, report) and not update_readme(readme, report)
    csv = next(report.glob("*/leaderboard.csv"))
    board = pd.read_csv(csv)
    board.loc[(board.method == "sprc") & (board.kind == "ranked"), ["metric_mean", "metric_std", "lead"]] = [50.0, 0.0, "best"]
    board.to_csv(csv, index=False)
    assert update_readme(readme, report)
    text = readme.read_text()
    assert "| sprc | **50.00 ± 0.00** |" in text and text.startswith("# x\n\n") and text.endswith(f"{END}\n\ntail\n")
    gap_at_80 = re.compile(r"- 80%: the perfect filter wins back .*?\(\+(\d+\.\d) points\)")
    before = float(gap_at_80.search(text).group(1))
    cells = next(report.glob("*/selected_metrics.csv"))
    table = pd.read_csv(cells)
    table.loc[(table.method == "oracle") & (table.noise_rate == 0.8), "recall@10"] += 0.01
    table.to_csv(cells, index=False)
    assert update_readme(readme, report)  # room at the claims' epoch: the perfect filter's point more
    assert float(gap_at_80.search(readme.read_text()).group(1)) == pytest.approx(before + 1.0, abs=0.11)


def test_the_block_says_what_the_start_and_the_target_are() -> None:
    """§ names the untrained start and its values (``zero_shot``'s row of ``leaderboard.csv``, in
    each table's column); each room line's target is named the calibration's, from docs/benchmark.md."""
    block = results_block(ROOT / "reports", ROOT)
    board = pd.read_csv(next((ROOT / "reports").glob("*/leaderboard.csv")))
    start = board[(board.kind == "reference") & (board.method == "zero_shot")].iloc[0]
    assert f"§: below the untrained start, `zero_shot` ({_two(start.metric_mean)} · {_two(start.recall_mean)});" in block
    heading = "Room to win (R@10), against its calibration target ([docs/benchmark.md](docs/benchmark.md#the-targets)):"
    assert heading in block and "## The targets" in (ROOT / "docs" / "benchmark.md").read_text(encoding="utf-8")
    room = re.findall(r"^- \d+%: the perfect filter wins back .*$", block, re.M)
    assert room and all(re.search(r"; calibration target ≥ \d+%, (met|missed)\.$", line) for line in room), room


def test_a_readme_without_the_markers_is_refused_by_name(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# no block\n")
    with pytest.raises(ReadmeError, match=f"^{re.escape(str(readme))}: needs one generated block"):
        update_readme(readme, ROOT / "reports")


def test_cirbench_report_rewrites_the_block(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_results(results, methods=("sprc",), rates=(0.2,), seeds=(0,))
    readme = tmp_path / "README.md"
    readme.write_text(f"{BEGIN}\n{END}\n")
    args = ["report", "--results", str(results), "--output", str(tmp_path / "reports"), "--readme", str(readme)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "| sprc | 40.00 |" in readme.read_text() and "results block rewritten" in " ".join(result.output.split())
    readme.write_text("no block\n")
    assert CliRunner().invoke(app, args).exit_code == 2


def test_no_page_calls_itself_stale() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    stale = [p.name for p in pages if re.search(r"stale below", p.read_text(encoding="utf-8"), re.I)]
    assert not stale, f"history belongs in docs/history.md, not below a 'stale' line: {stale}"


def test_the_figures_alt_text_names_every_panel() -> None:
    """The README's recall figure is described panel by panel (its alt text once named two of eight)."""
    alt = re.search(r"!\[([^\]]*)\]\(reports/[^)]*recall_vs_noise\.png\)", README).group(1)
    assert alt.startswith("Eight panels") and all(m in alt for m in ("headline", "R@10", "R@1,", "R@5", "R@50", "R_sub@1-3"))
