"""The README quotes no result by hand: its results block is generated from the committed
report (and must equal what the report generates now), its prose outside that block holds
no recall, purity, share or verdict count, its commands are CI's, and ``cirbench report
--readme`` rewrites the block from the report it builds."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from cirbench.cli import app
from cirbench.report.readme import BEGIN, END, ReadmeError, results_block, update_readme
from test_report import write_results

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULT_NUMBERS = {
    "a recall, purity or share (0.xxx)": r"\b0\.\d+",
    "a percentage clean": r"\d+(\.\d+)?% clean",
    "a verdict count": r"\b(holds|does not hold|inconclusive|not run)[:,]? \d",
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
    assert "| `sprc` |" in block and "Verdicts of" in block and "wins back" in block


@pytest.mark.parametrize("what, pattern", RESULT_NUMBERS.items())
def test_the_readme_types_no_result_by_hand(what: str, pattern: str) -> None:
    found = re.findall(pattern, _prose(README))
    assert not found, f"README.md quotes {what} outside its generated block: {found}"


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
    csv = next(report.glob("*/final_metrics.csv"))
    cells = pd.read_csv(csv)
    cells.loc[cells.method == "sprc", "recall@10"] = 0.5
    cells.to_csv(csv, index=False)
    assert update_readme(readme, report)
    text = readme.read_text()
    assert "| `sprc` | 0.500 ± 0.000 |" in text and text.startswith("# x\n\n") and text.endswith(f"{END}\n\ntail\n")


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
    assert "| `sprc` | 0.400 |" in readme.read_text() and "results block rewritten" in " ".join(result.output.split())
    readme.write_text("no block\n")
    assert CliRunner().invoke(app, args).exit_code == 2


def test_no_page_calls_itself_stale() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    stale = [p.name for p in pages if re.search(r"stale below", p.read_text(encoding="utf-8"), re.I)]
    assert not stale, f"history belongs in docs/history.md, not below a 'stale' line: {stale}"
