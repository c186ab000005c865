"""The equal tuning budget across methods (issue 76), on results written by hand: a sweep of
several methods picks each one's trial on the held-out split alone (a trial that wins only on
the validation queries is never picked), the tuned leaderboard reads the picked trials' cells
on every seed with the default leaderboard's marks against the baseline's own pick, names
every answer that tuning changes, and the report shows it beside the default one; a claim's
declared cells are set side by side (the SSN temperature claim's four cells)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from cirbench.report import build_report, load_results
from cirbench.report.analysis.rankings.glance import answer_lines, answers_intro
from cirbench.report.analysis.rankings.leaderboard import BETTER, DEFAULT_BOARD, TUNED_BOARD, WORSE, build_leaderboard
from cirbench.report.analysis.loading.load import sweep_seeds
from cirbench.report.analysis.rankings.tuned import picked_trials, trial_selection, tuned_board
from cirbench.report.tables.claim_cells import claim_cells_tables
from cirbench.report.tables.tuned import tuned_table
from cirbench.report.tables.model import heading
from cirbench.results.store import CellKey, ResultsStore
from test_claims import _run_row
from test_leaderboard import REFERENCES, _metrics, _ranks

SETTING = ("shapes-mini", "tiny[cir]", "thirds")
SEEDS = (0, 1, 2)
RATES = (0.5, 0.8)
# The validation R@10 hit rate of each method's defaults (trial 0), per rate. tme is worse than
# sprc at 80% at its defaults; ssn better.
DEFAULT = {"sprc": {0.5: 0.50, 0.8: 0.40}, "tme": {0.5: 0.52, 0.8: 0.20}, "ssn": {0.5: 0.48, 0.8: 0.62},
           "oracle": {0.5: 0.70, 0.8: 0.66}}
# Trial 1 of every method wins on the validation queries (0.80) and loses on the held-out split;
# trial 2 wins the held-out split of sprc and tme (their pick), ssn's defaults win its own.
TRIAL_1 = 0.80
TRIAL_2 = {"sprc": {0.5: 0.52, 0.8: 0.42}, "tme": {0.5: 0.53, 0.8: 0.60}, "ssn": {0.5: 0.38, 0.8: 0.52}}
HELD = {0: {"sprc": 0.50, "tme": 0.50, "ssn": 0.80}, 1: 0.30, 2: 0.70}
CONFIGS = {0: {"lr": None, "temperature": 0.07}, 1: {"lr": 0.003, "temperature": 0.02}, 2: {"lr": 0.0006, "temperature": 0.05}}
TEMPERATURE_CELLS = {"ssn:sprc_temperature": {0.5: 0.46, 0.8: 0.41}, "sprc:fixed_temperature": {0.5: 0.30, 0.8: 0.25}}


def _val(method: str, trial: int, rate: float) -> float:
    if trial == 0:
        return DEFAULT[method][rate]
    return TRIAL_1 if trial == 1 else TRIAL_2[method][rate]


def _held(method: str, trial: int) -> float:
    return HELD[0][method] if trial == 0 else HELD[trial]


def write_key(store: ResultsStore, key: CellKey, val: float, held: float, config: dict) -> None:
    """One completed cell ``key``: two epochs, the first the held-out split's pick (its held-out
    R@10 ``held``, 0.2 lower at the last), validation R@10 ``val`` there (0.08 lower at the last)."""
    label, rate, seed = key.method, key.noise_rate, key.seed
    method = label.split(":", 1)[0]
    ranks = [_ranks(label, rate, seed, epoch, val - 0.08 * epoch) for epoch in (0, 1)]
    held_out = [_ranks(label, rate, seed + 10, epoch, held - 0.2 * epoch) for epoch in (0, 1)]
    tables = {"ranks": pd.concat(ranks, ignore_index=True),
              "metrics": pd.concat([*map(_metrics, ranks), *(_metrics(h, "holdout") for h in held_out)], ignore_index=True)}
    row = _run_row(int(rate * 300)) | {"epochs": 2, "holdout": 0.1, "n_holdout": 30, "config": json.dumps(config),
                                       "role": {"sprc": "baseline", "oracle": "perfect_filter"}.get(method, ""),
                                       "is_oracle": method == "oracle"}
    store.write_run(key, row, tables)


def write_cell(store: ResultsStore, label: str, rate: float, seed: int, val: float, held: float, config: dict) -> None:
    """:func:`write_key` of the cell ``label`` at ``rate`` and ``seed`` of the hand-written setting."""
    write_key(store, CellKey(f"{label.replace(':', '_')}-{rate:g}-s{seed}", label, *SETTING, rate, seed), val, held, config)


def write_tuned_study(root: Path, tuned_seeds: tuple[int, ...] = SEEDS, temperature: bool = True,
                      trials: tuple[int, ...] = (1, 2)) -> None:
    """The headline cells of sprc, tme, ssn and the perfect filter at 50% and 80% on seeds 0-2,
    a sweep of three trials on seed 0 (trial 0 the headline cell), the picked trial (trial 2
    of sprc and tme; ssn's defaults) on ``tuned_seeds``, the SSN temperature grid's cells and
    the reference rows."""
    store = ResultsStore(root)
    for method, rates in DEFAULT.items():
        for rate, val in rates.items():
            for seed in SEEDS:
                write_cell(store, method, rate, seed, val, _held(method, 0) if method != "oracle" else 0.6, CONFIGS[0])
    for method in ("sprc", "tme", "ssn"):
        for rate in RATES:
            for trial in trials:
                seeds = tuned_seeds if trial == 2 and method != "ssn" else (0,)
                for seed in seeds:
                    write_cell(store, f"{method}:trial{trial}", rate, seed, _val(method, trial, rate), _held(method, trial),
                               CONFIGS[trial])
    if temperature:
        for label, rates in TEMPERATURE_CELLS.items():
            for rate, val in rates.items():
                for seed in SEEDS:
                    write_cell(store, label, rate, seed, val, 0.5, CONFIGS[0])
    for name, p10 in REFERENCES.items():
        for seed in SEEDS:
            ranks = _ranks(name, 0.0, 0, 0, p10)
            store.write_run(CellKey(f"{name}-s{seed}", name, *SETTING, float("nan"), seed), _run_row(0) | {"is_reference": True},
                            {"metrics": _metrics(ranks), "ranks": ranks})


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tuned") / "results"
    write_tuned_study(root)
    return root


@pytest.fixture(scope="module")
def setting(study: Path):
    (found,) = load_results(study).settings
    return found


def test_a_sweep_of_several_methods_picks_on_the_held_out_split_alone(setting) -> None:
    """Trial 1 leads every method on the validation queries and is never picked: sprc and tme
    pick trial 2 (the best held-out headline), ssn its defaults; the picks are made on the
    sweep's seed only, not on the seeds the picked trial was re-run at."""
    selected = trial_selection(setting)
    assert set(selected.seed) == {0} and len(selected) == 3 * len(RATES)
    picks = {(p.method, p.noise_rate): p.trial for p in selected.itertuples(index=False)}
    assert picks == {(m, r): (0 if m == "ssn" else 2) for m in ("sprc", "tme", "ssn") for r in RATES}
    for row in selected.itertuples(index=False):
        trial1 = setting.selection.loc[f"{row.method}_trial1-{row.noise_rate:g}-s0", "holdout"]
        assert trial1 > row.tuned  # the validation queries would have picked trial 1
    assert sweep_seeds(setting.runs)[("sprc", 0.5)] == [0]
    (first,) = {tuple(p) for p in picked_trials(setting)[["seed"]].itertuples(index=False)}
    assert first == (0,)
    table = tuned_table(setting)
    assert heading(table) == "Tuned (equal budget, holdout selection), seed 0" and "seed 0 only" in table.note
    assert all("s1:" not in row[2][-1].text for row in table.rows)


def test_a_picked_trial_rerun_on_more_seeds_is_no_missing_sweep_cell(setting) -> None:
    """The picked trial's further seeds are not a sweep there: the other trials are not
    expected at them (no "never run" row), while a sweep trial missing at the sweep's seed is."""
    assert setting.problems.empty, setting.problems


def test_a_sweep_trial_missing_at_a_sweep_seed_is_listed(tmp_path: Path) -> None:
    """tme at 50% swept on seeds 0 and 1 (a third trial on both), its trial 1 never run on seed
    1: listed missing there, and no trial but the pick expected on seed 2 (the pick's alone)."""
    root = tmp_path / "results"
    write_tuned_study(root, temperature=False)
    store = ResultsStore(root)
    for seed in (0, 1):
        write_cell(store, "tme:trial3", 0.5, seed, 0.3, 0.2, CONFIGS[1])
    assert sweep_seeds(store.read("runs"))[("tme", 0.5)] == [0, 1]
    problems = load_results(root).problems
    missing = problems[problems.status == "missing"]
    assert list(zip(missing.method, missing.noise_rate, missing.seed)) == [("tme:trial1", 0.5, 1)]


def test_the_tuned_leaderboard_reads_the_picked_trials_on_every_seed(setting) -> None:
    default = build_leaderboard(setting, n_resamples=300)
    tuned = tuned_board(setting, default, n_resamples=300)
    board = tuned.board
    assert board.name == TUNED_BOARD and board.rates == list(RATES) and board.seeds == list(SEEDS)
    assert [r.method for r in board.ranked] == ["sprc", "ssn", "tme"] and board.baseline == "sprc"
    assert [r.label for r in board.unranked if r.kind == "perfect filter"] == ["oracle (perfect filter)"]
    runs = setting.runs.set_index("run_id")
    for row in board.ranked:
        for rate, cell in row.cells.items():
            label = row.method if row.method == "ssn" else f"{row.method}:trial2"
            picked = runs[(runs.method == label) & (runs.noise_rate == rate)]
            headline = setting.selection.loc[picked.index, "holdout"]
            assert cell.metric.n == len(SEEDS) and cell.metric.mean == pytest.approx(headline.mean(), abs=1e-6)
    cells = {(row.method, rate): cell for row in board.ranked for rate, cell in row.cells.items()}
    before = {(row.method, rate): cell for row in default.ranked for rate, cell in row.cells.items()}
    assert before[("tme", 0.8)].versus == WORSE and cells[("tme", 0.8)].versus == BETTER
    assert before[("ssn", 0.8)].versus == cells[("ssn", 0.8)].versus == BETTER
    differ = [f"`{m}` at {r:.0%}" for r in RATES for m in ("ssn", "tme") if before[(m, r)].versus != cells[(m, r)].versus]
    assert [line.split(":")[0] for line in tuned.changed] == differ == ["`tme` at 80%"]  # every changed answer, by name
    assert "▼ worse at the defaults, ▲ better tuned" in tuned.changed[0]
    assert any(k.startswith("`ssn` at 80% ▲") for k in tuned.kept)
    assert "tme" in answer_lines(board)[1] and "▲" in answer_lines(board)[1]
    assert "trial 2 (lr=0.0006, temperature=0.05)" in tuned.picks_line() and "`ssn` the defaults" in tuned.picks_line()


def test_no_tuned_leaderboard_before_the_picks_ran_on_more_seeds(tmp_path: Path) -> None:
    root = tmp_path / "results"
    write_tuned_study(root, tuned_seeds=(0,), temperature=False)
    (setting,) = load_results(root).settings
    assert tuned_board(setting, None, n_resamples=100) is None
    assert tuned_table(setting) is not None  # the sweep alone: its one-seed picks


def test_a_sweep_of_two_trials_has_its_tuned_leaderboard_too(tmp_path: Path) -> None:
    """With one trial label per method, the pick re-run on seeds 1-2 looks like a sweep there
    (the Tuned table picks on those seeds too): the leaderboard still reads the pick of seed 0."""
    root = tmp_path / "results"
    write_tuned_study(root, temperature=False, trials=(2,))
    (setting,) = load_results(root).settings
    assert sweep_seeds(setting.runs)[("sprc", 0.5)] == list(SEEDS)
    tuned = tuned_board(setting, None, n_resamples=100)
    assert tuned is not None and tuned.board.seeds == list(SEEDS) and set(tuned.picks.seed) == {0}
    assert dict(zip(tuned.picks.method, tuned.picks.trial)) == {"sprc": 2, "ssn": 0, "tme": 2}


def test_the_report_shows_the_tuned_leaderboard_beside_the_default_and_the_claim_cells(study: Path, tmp_path: Path) -> None:
    page = build_report(study, tmp_path / "report")
    markdown = (page.parent / "report.md").read_text(encoding="utf-8")
    default, tuned = markdown.index("## Leaderboard: shapes-mini"), markdown.index("## Tuned leaderboard: shapes-mini")
    assert default < tuned < markdown.index("## Contents")
    assert "**Who wins at the defaults**" in markdown[default:tuned] and "**Who wins tuned**" in markdown[tuned:]
    assert "**Answers that tuning changes**: `tme` at 80%" in markdown
    assert "(#shapes-mini-tiny-cir-thirds-tuned-leaderboard)" in markdown
    text = page.read_text(encoding="utf-8")
    assert 'id="shapes-mini-tiny-cir-thirds-tuned-leaderboard"' in text and text.count('<table class="leaderboard">') == 2
    frame = pd.read_csv(page.parent / "shapes-mini_tiny-cir-_thirds" / "tuned_leaderboard.csv")
    ranked = frame[frame.kind == "ranked"].set_index(["method", "noise_rate"])
    assert ranked.loc[("tme", 0.8), "cells"] == "tme:trial2" and ranked.loc[("ssn", 0.8), "trial"] == 0
    assert ranked.loc[("tme", 0.8), "vs_sprc"] == "better" and (ranked.n_seeds == 3).all()
    assert "Claim 14's cells side by side" in markdown and "SSN's temperature" in markdown


def test_the_claim_cells_set_each_method_at_each_temperature_side_by_side(setting) -> None:
    from cirbench.report.analysis.loading.selection import rule_view

    (table,) = claim_cells_tables(rule_view(setting, "holdout").setting)
    assert table.columns == ["at sprc's temperature (logit scale 14.3)", "at SSN's temperature (logit scale 100)"]
    assert [(noise, name) for noise, name, _ in table.rows] == [("50%", "ssn"), ("", "sprc"), ("80%", "ssn"), ("", "sprc")]
    means = setting.selection.groupby(setting.runs.set_index("run_id").method).holdout.mean()
    stats = setting.runs.assign(h=setting.runs.run_id.map(setting.selection.holdout)).groupby(["method", "noise_rate"]).h.mean()
    ssn_80, sprc_80 = table.rows[2][2], table.rows[3][2]
    assert ssn_80[0].text.startswith(f"{stats[('ssn:sprc_temperature', 0.8)]:.2f} ± ")
    assert ssn_80[1].text.startswith(f"{stats[('ssn', 0.8)]:.2f} ± ")
    assert sprc_80[0].text.startswith(f"{stats[('sprc', 0.8)]:.2f} ± ")
    assert sprc_80[1].text.startswith(f"{stats[('sprc:fixed_temperature', 0.8)]:.2f} ± ")
    assert len(means)


def test_the_claim_cells_leave_out_a_rate_where_only_headline_cells_ran(tmp_path: Path) -> None:
    """At 20% only ``ssn`` (SSN's temperature) and ``sprc`` (its own) ran: one cell in each row
    and column compares nothing, so the table has no 20% rows."""
    from cirbench.report.analysis.loading.selection import rule_view

    root = tmp_path / "results"
    write_tuned_study(root)
    store = ResultsStore(root)
    for label in ("ssn", "sprc"):
        for seed in SEEDS:
            write_cell(store, label, 0.2, seed, 0.5, 0.4, {})
    (found,) = load_results(root).settings
    (table,) = claim_cells_tables(rule_view(found, "holdout").setting)
    assert [noise for noise, _, _ in table.rows if noise] == ["50%", "80%"]


def test_the_temperature_claim_compares_the_methods_at_one_temperature_each(setting) -> None:
    from cirbench.report.analysis.verdicts.claims import paper_claims

    claim = paper_claims(setting, n_resamples=300)[-1]
    assert claim.short == "ssn's lead survives sprc's temperature"
    labels = [c.label for c in claim.checks]
    assert labels == ["at sprc's temperature (logit scale 14.3): ssn:sprc_temperature - sprc at 80%",
                      "at SSN's temperature (logit scale 100): ssn - sprc:fixed_temperature at 80%"], labels
    at_sprcs, at_ssns = claim.checks
    assert at_ssns.verdict == "holds" and at_sprcs.verdict != "holds" and claim.verdict != "holds"


def test_the_answers_name_their_leaderboard_only_where_there_are_two(setting) -> None:
    board = build_leaderboard(setting, n_resamples=100)
    assert answers_intro(board).startswith("**Who wins** on")
    board.name = DEFAULT_BOARD
    assert answers_intro(board).startswith("**Who wins at the defaults**")
