"""The report's claims section on constructed results whose answers are known: verdicts per
claim, "not run" for missing cells, the kept-set test, and the rendered section."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from cirbench.engine.cell.recorder import purity_rows
from cirbench.report import build_report, load_results
from cirbench.report.analysis.verdicts.claims import CLAIMS_TITLE, check_line, kept_set_check, paper_claims, verdict_summary
from cirbench.report.analysis.statistics.significance import DOES_NOT_HOLD, HOLDS, UNDECIDED, NOT_RUN
from cirbench.results.chance import below_chance_reason
from cirbench.results.store import KEY_COLUMNS, MAIN_SCORE, SCHEMAS, CellKey, ResultsStore
from test_chance import kept_complement

N_TRAIN, N_QUERIES, SEEDS = 300, 300, (0, 1, 2)
# R@10 hit probability per method and rate: robust methods ahead at 50 and 80%, the gap
# widening; conesep ahead of tme everywhere; hug behind sprc (its claim does not hold).
HITS = {
    "sprc": {0.0: 0.60, 0.5: 0.40, 0.8: 0.20},
    "tme": {0.0: 0.60, 0.5: 0.55, 0.8: 0.45},
    "conesep": {0.0: 0.70, 0.5: 0.65, 0.8: 0.60},
    "hug": {0.0: 0.30, 0.5: 0.20, 0.8: 0.10},
    "habit": {0.0: 0.62, 0.5: 0.55, 0.8: 0.50},  # ahead of sprc under noise, behind conesep
    "intent": {0.0: 0.45, 0.5: 0.60, 0.8: 0.40},  # loses 0.15 to sprc at 0%
}
# share kept of clean samples, of caption swaps and of the other noisy samples
KEEP = {"tme": (0.85, 0.6, 0.45), "conesep": (0.9, 0.2, 0.2)}


def _run_row(n_noisy: int) -> dict:
    defaults = {pa.types.is_string: "", pa.types.is_integer: 0, pa.types.is_floating: 0.0, pa.types.is_boolean: False}
    row = {f.name: next(v for test, v in defaults.items() if test(f.type)) for f in SCHEMAS["runs"] if f.name not in KEY_COLUMNS}
    return row | {"status": "completed", "n_train": N_TRAIN, "n_noisy": n_noisy, "epochs": 1, "finished": "2024-01-01T00:00:00"}


def _cell(method: str, rate: float, seed: int,
          hits: dict[str, dict[float, float]] = HITS) -> tuple[dict[str, pd.DataFrame], int]:
    rng = np.random.default_rng([seed, int(rate * 10), sum(map(ord, method))])
    jitter = 0.01 * ((seed + len(method)) % 3 - 1)  # seeds differ a little, and differently per method
    hit = np.zeros(N_QUERIES, dtype=bool)
    hit[rng.permutation(N_QUERIES)[: round((hits[method][rate] + jitter) * N_QUERIES)]] = True
    ranks = pd.DataFrame({"epoch": 0, "query": np.arange(N_QUERIES), "group": "all", "rank": np.where(hit, 0, 30),
                          "subset_rank": -1})
    metrics = pd.DataFrame([{"epoch": 0, "split": "val", "group": "all", "metric": "recall@10", "value": hit.mean(),
                             "eval_protocol": "p"}])
    n_noisy = int(rate * N_TRAIN)
    is_noisy = np.arange(N_TRAIN) < n_noisy
    noise_type = np.where(is_noisy, np.array(["reference", "caption", "target"])[np.arange(N_TRAIN) % 3], "clean")
    tables = {"metrics": metrics, "ranks": ranks}
    views = []
    if method in KEEP:
        clean, caption, other = KEEP[method]
        p_keep = np.where(~is_noisy, clean, np.where(noise_type == "caption", caption, other))
        kept = rng.random(N_TRAIN) < p_keep
        views.append((MAIN_SCORE, kept, 1.0 - p_keep + rng.normal(0, 0.1, N_TRAIN)))
    if method == "hug":  # the coordination uncertainty separates, the overall one does not
        views.append((MAIN_SCORE, None, is_noisy + rng.normal(0, 0.5, N_TRAIN)))
        views.append(("overall_uncertainty", None, rng.normal(0, 1, N_TRAIN)))
    purity, scores = [], []
    for name, kept, score in views:
        rows = purity_rows(kept, score, is_noisy, noise_type)
        rows.insert(0, "epoch", 0)
        rows.insert(1, "score_name", name)
        purity.append(rows)
        scores.append(pd.DataFrame({
            "sample_id": [f"s{i:03d}" for i in range(N_TRAIN)], "epoch": 0, "score_name": name, "score": score,
            "selected_clean": kept if kept is not None else pd.array([pd.NA] * N_TRAIN, dtype="boolean"),
            "is_noisy": is_noisy, "noise_type": noise_type,
        }))
    if views:
        tables["purity"], tables["scores"] = pd.concat(purity, ignore_index=True), pd.concat(scores, ignore_index=True)
    return tables, n_noisy


def write_claims_results(root: Path, cells: list[tuple[str, float, int]], hits: dict[str, dict[float, float]] = HITS,
                         dataset: str = "toy") -> None:
    """The constructed results of ``cells`` (method, rate, seed) in one setting (R@10 hit
    probabilities ``hits``, labelled ``dataset``)."""
    store = ResultsStore(root)
    for method, rate, seed in cells:
        tables, n_noisy = _cell(method, rate, seed, hits)
        key = CellKey(f"{method}-{rate}-{seed}", method, dataset, "tiny", "thirds", rate, seed)
        store.write_run(key, _run_row(n_noisy), tables)


ALL_CELLS = [(m, r, s) for m in HITS for r in (0.0, 0.5, 0.8) for s in SEEDS]


@pytest.fixture(scope="module")
def claims(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("claims")
    write_claims_results(root, ALL_CELLS)
    (setting,) = load_results(root).settings
    return {c.source + " | " + c.text: c for c in paper_claims(setting, n_resamples=400)}


def _claim(claims: dict, source_start: str):
    (claim,) = [c for key, c in claims.items() if key.startswith(source_start)]
    return claim


def test_robust_methods_beat_sprc_and_the_gap_widens(claims) -> None:
    claim = _claim(claims, "ConeSep Sec. 4.2")
    assert [c.label for c in claim.checks] == [
        "tme - sprc at 50%", "tme - sprc at 80%", "tme: gap at 80% - gap at 50%",
        "conesep - sprc at 50%", "conesep - sprc at 80%", "conesep: gap at 80% - gap at 50%",
    ]
    assert all(c.verdict == HOLDS for c in claim.checks if "gap" not in c.label), claim.checks
    assert claim.verdict == HOLDS
    assert "seeds 0,1,2: [" in claim.checks[0].numbers and "queries: [" in claim.checks[0].numbers


def test_a_claim_that_fails_does_not_hold_and_each_rate_is_checked(claims) -> None:
    hug = _claim(claims, "HUG Tables 1-2")
    assert [c.label for c in hug.checks] == ["hug - sprc at 0%", "hug - sprc at 50%", "hug - sprc at 80%"]
    assert hug.verdict == DOES_NOT_HOLD
    assert _claim(claims, "ConeSep Tables 1-2").verdict == HOLDS  # conesep ahead of tme at every rate


def test_purity_and_caption_purity_of_the_kept_sets(claims) -> None:
    claim = _claim(claims, "ConeSep App. C.3")
    assert [c.verdict for c in claim.checks] == [HOLDS, HOLDS]
    assert "training samples: [" in claim.checks[0].numbers


def test_non_inferiority_at_zero_noise(claims) -> None:
    claim = _claim(claims, "ConeSep Table 1")
    verdicts = {c.label.split(" ")[0]: c.verdict for c in claim.checks}
    assert verdicts["conesep"] == HOLDS and verdicts["hug"] == DOES_NOT_HOLD  # hug loses 0.3
    assert verdicts["tme"] == UNDECIDED  # equal hit rates: within a point is not certain on 300 queries
    assert claim.verdict == DOES_NOT_HOLD


def test_uncertainty_claim_separates_the_two_scores(claims) -> None:
    claim = _claim(claims, "HUG, uncertainty")
    verdicts = {c.label: c.verdict for c in claim.checks}
    assert verdicts["coordination uncertainty AUROC - 50 at 50%"] == HOLDS
    assert verdicts["coordination uncertainty AUROC - 50 at 80%"] == HOLDS
    assert verdicts["overall uncertainty AUROC - 50 at 80%"] != HOLDS  # a random score
    assert claim.verdict != HOLDS


def test_missing_cells_are_not_run(claims) -> None:
    assert _claim(claims, "ConeSep Table 3").verdict == NOT_RUN  # no ablation variants in these results
    ladder = _claim(claims, "HUG Table 3")
    assert ladder.verdict == NOT_RUN and all("not run" in c.numbers for c in ladder.checks)


def test_conesep_table_claims_on_habit_and_intent(claims) -> None:
    beat = _claim(claims, "ConeSep, Tables 1-2: the HABIT and INTENT rows against SPRC")
    assert [c.label for c in beat.checks] == ["habit - sprc at 50%", "habit - sprc at 80%", "intent - sprc at 50%",
                                             "intent - sprc at 80%"]
    assert beat.verdict == HOLDS
    conesep = _claim(claims, "ConeSep, Sec. 4.2 and Tables 1-2")
    assert [c.label for c in conesep.checks] == [f"conesep - {m} at {r}" for m in ("habit", "intent") for r in ("0%", "50%", "80%")]
    assert {c.label: c.verdict for c in conesep.checks}["conesep - intent at 80%"] == HOLDS
    zero = _claim(claims, "ConeSep, Tables 1-2: the 0% rows")
    assert {c.label.split(" ")[0]: c.verdict for c in zero.checks}["intent"] == DOES_NOT_HOLD
    assert zero.verdict == DOES_NOT_HOLD


def test_kept_sets_against_chance_per_seed(claims) -> None:
    claim = _claim(claims, "ConeSep Fig. 6")
    assert [c.label for c in claim.checks] == ["tme at 50%", "tme at 80%", "conesep at 50%", "conesep at 80%"]
    assert claim.verdict == HOLDS and "seed 2:" in claim.checks[0].numbers


def test_partial_results_are_not_run_or_undecided_never_an_error(tmp_path: Path) -> None:
    cells = [("sprc", 0.5, 0), ("conesep", 0.5, 0), ("tme", 0.5, 0), ("tme", 0.5, 1)]
    write_claims_results(tmp_path, cells)
    (setting,) = load_results(tmp_path).settings
    claims = {c.source: c for c in paper_claims(setting, n_resamples=100)}
    robust = claims["ConeSep Sec. 4.2, Tables 1-2"]
    by_label = {c.label: c for c in robust.checks}
    assert by_label["conesep - sprc at 80%"].verdict == NOT_RUN
    assert "no result for conesep at 80%" in by_label["conesep - sprc at 80%"].numbers
    assert by_label["conesep - sprc at 50%"].verdict == UNDECIDED  # one seed
    assert robust.verdict == UNDECIDED
    assert claims["HUG, uncertainty analysis (Fig. 4)"].verdict == NOT_RUN
    assert kept_set_check(setting, "conesep", 0.5).verdict == UNDECIDED  # one seed: never a verdict
    assert kept_set_check(setting, "tme", 0.8).verdict == NOT_RUN


def test_the_report_renders_the_claims_section(tmp_path: Path) -> None:
    cells = [(m, r, s) for m in ("sprc", "conesep") for r in (0.5,) for s in (0, 1)]
    write_claims_results(tmp_path / "results", cells)
    page = build_report(tmp_path / "results", tmp_path / "report")
    markdown = (page.parent / "report.md").read_text(encoding="utf-8")
    assert f"### {CLAIMS_TITLE}" in markdown
    section = markdown[markdown.index(f"### {CLAIMS_TITLE}"):]
    assert "### Retrieval" in section  # near the top, before the tables
    assert "| # | Claim | Source | Verdict |" in section
    assert "<details><summary>" in section and "conesep - sprc at 50%: +" in section and "**not run**" in section
    assert any(f"**{v}**" in section for v in (HOLDS, UNDECIDED, DOES_NOT_HOLD))
    assert "Verdict rule:" in section
    claims = paper_claims(load_results(tmp_path / "results").settings[0], n_resamples=50)
    summary = verdict_summary(claims)
    assert f"**{summary}**" in section and summary.startswith(f"Verdicts of {len(claims)} claims: ")
    counted = [int(part.split()[-1]) for part in summary.split(": ", 1)[1].rstrip(".").split(", ")]
    assert sum(counted) == len(claims) and counted[-1] == sum(c.verdict == "not run" for c in claims) > 0
    html = page.read_text(encoding="utf-8")
    assert CLAIMS_TITLE.replace("'", "&#x27;") in html and 'class="verdict not-run"' in html


def test_ranks_that_do_not_line_up_make_a_check_undecided_not_an_error(tmp_path: Path) -> None:
    cells = [(m, 0.5, s) for m in ("sprc", "tme") for s in (0, 1)]
    write_claims_results(tmp_path, cells)
    tables, n_noisy = _cell("tme", 0.5, 1)  # rewritten through the store: a part changed behind its back is damaged
    tables["ranks"] = tables["ranks"].assign(query=tables["ranks"]["query"] + N_QUERIES)  # other queries, same count
    ResultsStore(tmp_path).write_run(CellKey("tme-0.5-1", "tme", "toy", "tiny", "thirds", 0.5, 1), _run_row(n_noisy), tables)
    (setting,) = load_results(tmp_path).settings
    (robust,) = [c for c in paper_claims(setting, n_resamples=50) if c.source.startswith("ConeSep Sec. 4.2")]
    check = robust.checks[0]
    assert check.label == "tme - sprc at 50%" and check.verdict == UNDECIDED and "cannot compare" in check.numbers


def test_a_check_on_a_collapsed_cell_is_undecided_and_names_it(tmp_path: Path) -> None:
    cells = [(m, 0.5, s) for m in ("sprc", "conesep") for s in SEEDS]
    for root in (tmp_path / "healthy", tmp_path / "collapsed"):
        write_claims_results(root, cells)
    tables, n_noisy = _cell("conesep", 0.5, 1)
    ResultsStore(tmp_path / "collapsed").write_run(
        CellKey("conesep-0.5-1", "conesep", "toy", "tiny", "thirds", 0.5, 1),
        _run_row(n_noisy) | {"collapsed": True, "collapse_reason": "total loss constant over epoch 1 (0.9930)"}, tables)
    checks = {}
    for name in ("healthy", "collapsed"):
        (setting,) = load_results(tmp_path / name).settings
        (robust,) = [c for c in paper_claims(setting, n_resamples=100) if c.source.startswith("ConeSep Sec. 4.2")]
        checks[name] = ({c.label: c for c in robust.checks}["conesep - sprc at 50%"], robust)
    assert checks["healthy"][0].verdict == HOLDS and not checks["healthy"][0].collapsed
    check, robust = checks["collapsed"]
    assert check.verdict == UNDECIDED and check.collapsed == ("conesep at 50% (seed 1)",)
    assert check.numbers == checks["healthy"][0].numbers  # the numbers stay
    assert robust.verdict_text == "undecided (collapsed: conesep at 50% (seed 1))"
    assert "(undecided; collapsed: conesep at 50% (seed 1))" in check_line(check)
    assert kept_set_check(setting, "conesep", 0.5).collapsed == ("conesep at 50% (seed 1)",)


def test_a_kept_set_below_chance_is_read_by_the_claims_not_set_aside(tmp_path: Path) -> None:
    """A flag, not a failure: the kept-set claim counts the seed as not holding, and the
    checks that read the cell keep their verdicts (none is made undecided, none names it)."""
    write_claims_results(tmp_path, [(m, 0.5, s) for m in ("sprc", "conesep") for s in SEEDS])
    tables, n_noisy = _cell("conesep", 0.5, 1)
    tables = kept_complement(tables)
    reason = below_chance_reason(tables["purity"], n_noisy)
    ResultsStore(tmp_path).write_run(CellKey("conesep-0.5-1", "conesep", "toy", "tiny", "thirds", 0.5, 1),
                                     _run_row(n_noisy) | {"below_chance": True, "below_chance_reason": reason}, tables)
    (setting,) = load_results(tmp_path).settings
    assert setting.below_chance.run_id.tolist() == ["conesep-0.5-1"] and reason
    check = kept_set_check(setting, "conesep", 0.5)
    assert check.verdict == DOES_NOT_HOLD and check.collapsed == () and "seed 1: " in check.numbers
    (robust,) = [c for c in paper_claims(setting, n_resamples=100) if c.source.startswith("ConeSep Sec. 4.2")]
    recall = {c.label: c for c in robust.checks}["conesep - sprc at 50%"]
    assert recall.verdict == HOLDS and not recall.collapsed
