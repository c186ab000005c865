"""One rounding rule for every printed number (issue 79): a number reads the same in the
report's tables, its leaderboard (Markdown, HTML, CSV) and the README block, rounded half away
from zero on its decimal value by :func:`cirbench.results.metrics.format_number`, and no module
that prints the report's numbers formats a float on its own."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import test_report
from cirbench.report import build_report
from cirbench.report.render.readme import results_block
from cirbench.results.metrics import format_number

ROOT = Path(__file__).resolve().parents[1]
PRINTING = [*sorted((ROOT / "cirbench" / "report").rglob("*.py")),
            *(ROOT / "cirbench" / name for name in ("results/chance.py", "results/collapse.py", "cli/show.py"))]
"""The modules that print the report's numbers (the collapse and below-chance reasons are the report's too)."""
OWN_FORMAT = re.compile(r"""\{[^{}'"]*:[^{}'"]*\.\d+[fFeEgG%]\}|%[-+ 0#]*\d*\.\d+[fFeEgG]|(?<![\w.])round\(""")
"""A float formatted at a precision of its own: ``{x:.2f}``, ``{x:+.1%}``, ``"%.6f"``, ``round(x, 2)``."""


@pytest.mark.parametrize("value, places, sign, text", [
    (92.025, 2, False, "92.03"), (92.02499999999999, 2, False, "92.03"), (0.125, 2, False, "0.13"),
    (-0.125, 2, True, "-0.13"), (1.005, 2, False, "1.01"), (12.125, 2, True, "+12.13"), (84.5, 0, False, "85"),
    (float("nan"), 2, False, "-"),
])
def test_the_rule_rounds_half_away_from_zero_on_the_decimal_value(value: float, places: int, sign: bool, text: str) -> None:
    assert format_number(value, places, sign=sign) == text


def test_significant_digits_follow_the_same_rule() -> None:
    assert format_number(2.5e-28, digits=1) == "3e-28"
    assert format_number(0.00065, digits=1) == "0.0007"
    assert format_number(1 / 0.07, digits=3) == "14.3"


def test_no_module_that_prints_the_reports_numbers_formats_a_float_on_its_own() -> None:
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in PRINTING
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if OWN_FORMAT.search(line)]
    assert not found, "print numbers with cirbench.results.metrics.format_number:\n" + "\n".join(found)


@pytest.fixture(scope="module")
def ties(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report whose R@10 means are ties at the third decimal: ``sprc`` 42.025 (computed just
    below the tie, 42.02499...), ``robust`` 43.025 (computed just above it)."""
    saved = dict(test_report.R10)
    test_report.R10.update({("sprc", 0.2): 0.41525, ("robust", 0.2): 0.42525})  # seed s adds s * 0.01: means .x2025
    try:
        root = tmp_path_factory.mktemp("ties") / "results"
        test_report.write_results(root, methods=("sprc", "robust"), rates=(0.2,), seeds=(0, 1))
    finally:
        test_report.R10.clear()
        test_report.R10.update(saved)
    return build_report(root, root.parent / "report").parent


def test_a_mean_prints_alike_in_the_tables_the_leaderboard_files_and_the_readme(ties: Path) -> None:
    markdown = (ties / "report.md").read_text(encoding="utf-8")
    page = (ties / "index.html").read_text(encoding="utf-8")
    (csv,) = ties.glob("*/leaderboard.csv")
    board = pd.read_csv(csv)
    readme = results_block(ties, ties.parent)
    retrieval = markdown[markdown.index("### Retrieval"):].split("\n\n")[2]
    for method, shown in (("sprc", "42.03 ± 0.71"), ("robust", "43.03 ± 0.71")):
        assert format_number(float(board.set_index("method").recall_mean[method])) == shown.split()[0]
        assert re.search(rf"^\| {method} \| <u>{shown}</u>", markdown, re.M), method  # the leaderboard
        assert re.search(rf"^\| (20%)? *\| {method} \| [^|]+ \| {shown} ", retrieval, re.M), method  # the Retrieval table
        assert re.search(rf"^\| {method} \| <u>{shown}</u>", readme, re.M), method  # the README block
        assert f"<u>{shown}</u>" in page
    for wrong in ("42.02 ±", "43.02 ±"):
        assert wrong not in markdown + page + readme


def test_a_rate_prints_one_way_in_the_report_the_plan_and_the_logs() -> None:
    """Issue 79: ``{rate:.0%}`` printed 12.5% noise as "12%" in the study's plan lines; every
    module prints a rate with :func:`cirbench.results.labels.rate_label`."""
    from cirbench.results.labels import rate_label
    assert [rate_label(r) for r in (0.0, 0.125, 0.2, 0.5, 0.8)] == ["0%", "12.5%", "20%", "50%", "80%"]
    own = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "cirbench").rglob("*.py"))
           for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
           if re.search(r"rate[\w.\[\]\d]*:\.\d+%\}|rates?\[\d\]:\.\d+%\}|rate \* 100:g\}%", line)
           and "def rate_label" not in line and "return f\"{rate * 100:g}%\"" not in line]
    assert own == [], own
