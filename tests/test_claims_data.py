"""Claims as data (issue 46): the shipped claims file gives the verdicts the report's code
gave before the claims became data; a plugin's, a results folder's and ``CIRBENCH_CLAIMS``'s
files add claims of their own; the baseline is found by role; a bad file names the file, the
entry and what is wrong; no report module names a method."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cirbench.plugins import builtin_methods_dir
from cirbench.report import load_results
from cirbench.report.analysis.verdicts.claim_files import CLAIMS_ENV, ClaimFileError, read_claims, read_published
from cirbench.report.analysis.verdicts.claims import check_line, claims_on, paper_claims
from cirbench.report.analysis.rankings.leaderboard import build_leaderboard
from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.rankings.references import bound_label, reference_stats
from cirbench.report.analysis.statistics.significance import DEFAULT_MARGIN, DOES_NOT_HOLD, EQUIVALENT, HOLDS, NOT_RUN, UNDECIDED
from cirbench.report.figures.gain_figure import gain_figure
from cirbench.report.render.leaderboard_render import leaderboard_frame, legend
from cirbench.report.tables.comparison import gain_table
from cirbench.results.store import CellKey, ResultsStore
from claims_golden import N_RESAMPLES, VERDICTS, verdicts, write_golden_results
from test_claims import HITS, _cell, _run_row, write_claims_results

REPORT = Path(__file__).resolve().parents[1] / "cirbench" / "report"


@pytest.mark.parametrize("folder", ["full", "partial"])
def test_the_claims_file_gives_the_verdicts_the_code_gave(folder: str, tmp_path: Path) -> None:
    write_golden_results(tmp_path, folder)
    (setting,) = load_results(tmp_path).settings
    assert verdicts(paper_claims(setting, n_resamples=N_RESAMPLES)) == json.loads(VERDICTS.read_text())[folder]


PLUGIN_CLAIMS = """
[[claim]]
text = "mine beats {baseline} at 50% noise"
source = "My paper, Table 2"
[[claim.check]]
kind = "recall"
methods = ["mine"]
against = ["{baseline}"]
rates = [0.5]
"""


def test_a_plugin_adds_a_claim_from_a_file_beside_it(tmp_path: Path) -> None:
    plugin = tmp_path / "plugins" / "mine.py"
    plugin.parent.mkdir()
    plugin.write_text("# the plugin's code is not read by the report\n")
    plugin.with_suffix(".claims.toml").write_text(PLUGIN_CLAIMS)
    hits = {"sprc": HITS["sprc"], "mine": {0.5: 0.60}}
    write_claims_results(tmp_path / "results", [(m, 0.5, s) for m in hits for s in (0, 1, 2)], hits)
    for seed in (0, 1, 2):
        tables, n_noisy = _cell("mine", 0.5, seed, hits)
        ResultsStore(tmp_path / "results").write_run(CellKey(f"mine-0.5-{seed}", "mine", "toy", "tiny", "thirds", 0.5, seed),
                                                     _run_row(n_noisy) | {"method_source": f"file {plugin}"}, tables)
    (setting,) = load_results(tmp_path / "results").settings
    claims = {c.source: c for c in paper_claims(setting, n_resamples=200)}
    mine = claims["My paper, Table 2"]
    assert mine.text == "mine beats sprc at 50% noise" and [c.label for c in mine.checks] == ["mine - sprc at 50%"]
    assert mine.verdict == HOLDS
    assert list(claims)[-1] == "My paper, Table 2"  # after the shipped papers' claims


def test_a_results_folder_and_the_environment_add_claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_claims_results(tmp_path / "results", [(m, 0.5, s) for m in ("sprc", "tme") for s in (0, 1)])
    (tmp_path / "results" / "claims.toml").write_text(PLUGIN_CLAIMS.replace("mine", "tme").replace("My paper", "Study"))
    extra = tmp_path / "extra.toml"
    extra.write_text(PLUGIN_CLAIMS.replace("My paper", "Env").replace("rates = [0.5]", "rates = [0.8]"))
    monkeypatch.setenv(CLAIMS_ENV, str(extra))
    (setting,) = load_results(tmp_path / "results").settings
    claims = {c.source: c for c in paper_claims(setting, n_resamples=50)}
    assert claims["Study, Table 2"].checks[0].label == "tme - sprc at 50%"
    assert claims["Env, Table 2"].verdict == NOT_RUN  # names a method the folder does not hold


def _renamed_baseline(root: Path) -> Setting:
    """A folder whose baseline (by role) is called ``base``, beside ``hug``."""
    hits = {"base": HITS["sprc"], "hug": HITS["hug"]}
    cells = [(m, r, s) for m in hits for r in (0.0, 0.5, 0.8) for s in (0, 1, 2)]
    write_claims_results(root, cells, hits)
    for _, rate, seed in [c for c in cells if c[0] == "base"]:
        tables, n_noisy = _cell("base", rate, seed, hits)
        ResultsStore(root).write_run(CellKey(f"base-{rate}-{seed}", "base", "toy", "tiny", "thirds", rate, seed),
                                     _run_row(n_noisy) | {"role": "baseline"}, tables)
    (setting,) = load_results(root).settings
    return setting


def test_the_baseline_is_found_by_role_not_by_name(tmp_path: Path) -> None:
    """A folder whose baseline is called ``base``: the shipped claims compare with it."""
    setting = _renamed_baseline(tmp_path)
    assert setting.role("baseline") == "base" and setting.methods[0] == "base"
    claims = {c.source: c for c in paper_claims(setting, n_resamples=100)}
    hug = claims["HUG Tables 1-2"]
    assert hug.text == "hug beats point matching (base) at every noise rate run"
    assert [c.label for c in hug.checks] == ["hug - base at 0%", "hug - base at 50%", "hug - base at 80%"]
    assert hug.verdict == DOES_NOT_HOLD


def test_the_leaderboard_tables_and_figures_compare_with_the_baseline_by_role(tmp_path: Path) -> None:
    setting = _renamed_baseline(tmp_path / "results")
    board = build_leaderboard(setting, n_resamples=100)
    cells = {(row.method, rate): cell for row in board.rows for rate, cell in row.cells.items()}
    assert board.baseline == "base" and cells[("hug", 0.5)].versus and not cells[("base", 0.5)].versus
    assert "`base`" in legend(board) and "vs_base" in leaderboard_frame(board).columns
    assert gain_table(setting).title == "Gain over base"
    assert bound_label(setting) == "base at 0% noise (bound)" and bound_label(setting) in reference_stats(setting).index
    figure = gain_figure(setting, tmp_path / "figures")
    assert figure is not None and figure.path.stem == "gain_over_base"


@pytest.mark.parametrize("body, message", [
    ("[[claim]]\ntext = 't'\nsource = 's'\n", "claim 1 ('t'): no check"),
    ("[[claim]]\ntext = 't'\nsource = 's'\n[[claim.check]]\nkind = 'recall'\nmethods = ['a']\n", "check 1: a recall check needs against"),
    ("[[claim]]\ntext = 't'\nsource = 's'\n[[claim.check]]\nkind = 'vibes'\nmethods = ['a']\n", "kind 'vibes' is not one of"),
    ("[[claim]]\ntext = 't'\nsource = 's'\n[[claim.check]]\nkind = 'recall'\nmethods = ['a']\nagainst = ['{boss}']\n",
     "'{boss}' is not a role"),
    ("[[claim]]\ntext = 't'\nsource = 's'\n[[claim.check]]\nkind = 'kept_set'\nmethods = ['a']\nrates = 'all'\n",
     "rates = 'all' must be a list of numbers"),
    ("[[claim]]\ntext = 't'\nsource = 's'\nmetric = 'x'\n", "unknown key 'metric'"),
    ("[[claim]]\ntext = 't'\nsource = 's'\nmargin = -0.01\n", "claim 1 ('t'): margin = -0.01 must be a number above 0"),
    ("[[claim]]\ntext = 't'\nsource = 's'\nmargin = '1 point'\n", "margin = '1 point' must be a number above 0"),
    ("[[claim]]\ntext = 't'\n", "claim 1: source must be a non-empty string"),
    ("[claim\n", "not valid TOML"),
])
def test_a_bad_claims_file_names_the_file_the_entry_and_the_problem(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(ClaimFileError) as error:
        read_claims(path)
    assert str(path) in str(error.value) and message in str(error.value)


def test_the_shipped_file_reads_and_its_claims_are_the_reports(tmp_path: Path) -> None:
    write_claims_results(tmp_path, [("sprc", 0.5, 0)])
    (setting,) = load_results(tmp_path).settings
    shipped = read_claims(REPORT / "analysis" / "verdicts" / "claims.toml")
    assert [c.source for c in claims_on(setting, 20)] == [c.source for c in shipped] and len(shipped) == 14
    published = read_published()
    assert published.baseline not in published.robust and published.floor


def test_a_claim_reads_its_margin_from_its_file(tmp_path: Path) -> None:
    """The same difference under two margins: "mine beats sprc" with mine's hit counts equal
    to sprc's on every seed (the seed interval at 0) and the queries' interval a few points
    wide. Within the file's 10 points it is equivalent, so the claim does not hold; within the
    default point (no margin in the file) it is undecided."""
    hits = {"sprc": HITS["sprc"], "mine": {0.5: HITS["sprc"][0.5]}}
    write_claims_results(tmp_path / "results", [(m, 0.5, s) for m in hits for s in (0, 1, 2)], hits)
    (setting,) = load_results(tmp_path / "results").settings
    wide, default = tmp_path / "wide.toml", tmp_path / "default.toml"
    wide.write_text(PLUGIN_CLAIMS.replace('source = "My paper, Table 2"', 'source = "My paper, Table 2"\nmargin = 0.1'))
    default.write_text(PLUGIN_CLAIMS)
    (spec_wide,), (spec_default,) = read_claims(wide), read_claims(default)
    assert spec_wide.margin == 0.1 and spec_default.margin == DEFAULT_MARGIN == 0.01
    (claim,) = claims_on(setting, 400, specs=[spec_wide])
    (check,) = claim.checks
    assert check.comparison.seed_interval == (0.0, 0.0) and 0.01 < check.half_width < 0.1
    assert check.answer == EQUIVALENT and claim.verdict == DOES_NOT_HOLD and claim.margin == 0.1
    assert "answer: equivalent within ±10 points (does not hold)" in check_line(check)
    (claim,) = claims_on(setting, 400, specs=[spec_default])
    assert claim.checks[0].answer == UNDECIDED and claim.verdict == UNDECIDED
    assert f"smallest decidable ±{100 * claim.checks[0].half_width:.1f}" in check_line(claim.checks[0])


def test_every_shipped_claim_declares_its_margin() -> None:
    text = (REPORT / "analysis" / "verdicts" / "claims.toml").read_text()
    shipped = read_claims(REPORT / "analysis" / "verdicts" / "claims.toml")
    assert text.count("\nmargin = 0.01") == len(shipped) and all(c.margin == 0.01 for c in shipped)


def test_no_report_module_names_a_method() -> None:
    """The report's code (docstrings included) names no method: the built-in methods' names
    (their plugin files), as whole lower-case words, appear only in its data files
    (``claims.toml``, ``palette.toml``); the reference rows are labels (``cirbench.results.labels``),
    not methods."""
    names = sorted(p.stem for p in builtin_methods_dir().glob("*.py") if not p.name.startswith("_"))
    assert {"sprc", "oracle", "tme", "conesep", "hug", "habit", "intent"} <= set(names)
    pattern = re.compile(r"\b(" + "|".join(names) + r")\b")
    found = {str(p.relative_to(REPORT)): sorted(set(pattern.findall(p.read_text(encoding="utf-8"))))
             for p in sorted(REPORT.rglob("*.py"))}
    assert len(found) > 30  # the reading finds every room's modules
    assert not {f: hits for f, hits in found.items() if hits}


def test_a_role_is_declared_by_the_class_never_inherited() -> None:
    from cirbench.method import method_role
    from cirbench.plugins import discover

    methods = discover().methods
    sprc, oracle = methods.get("sprc"), methods.get("oracle")
    assert method_role(sprc) == "baseline" and method_role(oracle) == "perfect_filter"
    assert method_role(type("Mine", (sprc,), {"name": "mine"})) == ""  # built on the baseline, not the baseline


def test_a_folder_written_before_roles_loads_and_reads_the_legacy_baseline(tmp_path: Path) -> None:
    write_golden_results(tmp_path, "partial")
    for part in (tmp_path / "runs").glob("*.parquet"):  # as a results folder of an earlier version wrote them
        pq.write_table(pq.read_table(part).drop_columns(["role"]), part)
    assert set(ResultsStore(tmp_path).read("runs").role) == {""}
    (setting,) = load_results(tmp_path).settings
    assert setting.role("baseline") == "sprc" and setting.role("perfect_filter") == "oracle"
    assert verdicts(paper_claims(setting, n_resamples=N_RESAMPLES)) == json.loads(VERDICTS.read_text())["partial"]


def test_every_method_and_ablation_the_shipped_claims_name_exists() -> None:
    """Renaming a method or an ablation variant fails here, not silently as a claim 'not run'."""
    from cirbench.plugins import discover

    methods = discover().methods
    named = {n for claim in read_claims(REPORT / "analysis" / "verdicts" / "claims.toml") for check in claim.checks for n in (*check.methods, *check.against)}
    named |= {read_published().baseline, *read_published().robust}
    missing = []
    for name in sorted(n for n in named if not n.startswith("{")):
        base, _, variant = name.partition(":")
        if base not in methods or (variant and variant not in methods.get(base).ablations):
            missing.append(name)
    assert missing == [] and len(named) > 10
