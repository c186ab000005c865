"""``cirbench calibrate``: the checks read the right numbers and fail when a target is missed,
and the command runs the calibration grid end to end."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from cirbench.cli import app
from cirbench.engine.running.calibrate import calibration_grid
from cirbench.engine.running.grid import GridSpec
from cirbench.report.analysis.verdicts.calibration import calibration_checks
from cirbench.report.analysis.loading.load import load_results
from cirbench.results.store import CellKey, ResultsStore

SETTING = ("shapes", "tiny[cir]", "thirds")


def _write(store: ResultsStore, method: str, rate: float, seed: int, metrics: dict[str, float],
           auroc: dict[str, float] | None = None, reference: bool = False, first: float = 0.9, queries: int = 0,
           source: str = "test", role: str | None = None) -> None:
    """One run of two epochs whose first reaches ``first`` of each final value (with
    ``queries`` validation queries in its ``ranks``)."""
    run_id = f"{method}-{rate:g}-s{seed}"
    key = CellKey(run_id, method, *SETTING, float("nan") if reference else rate, seed)
    row = {"status": "completed", "error": "", "config": "{}", "method_version": "1", "method_source": source, "role": role,
           "is_oracle": method == "oracle", "is_reference": reference, "partitions": method == "oracle",
           "package_version": "0", "git_commit": "", "package_versions": "", "torch_version": "", "device": "cpu",
           "dataset_key": "k", "noise_manifest_hash": "", "noise_manifest_path": "", "eval_protocol": "p", "n_train": 10,
           "n_noisy": 0, "epochs": 2, "started": "", "finished": f"2026-01-01T00:00:{seed:02d}", "wall_seconds": 1.0,
           "steps": 1, "model_seconds": 1.0, "seconds_per_step": 1.0, "n_dropped": 0, "dropped_path": "", "checkpoint_path": "",
           "n_warnings": 0}
    epochs = [0] if reference else [0, 1]
    frame = pd.DataFrame([{"epoch": e, "split": "val", "group": "all", "metric": m, "value": v * (1 if e == epochs[-1] else first),
                           "eval_protocol": "p"} for e in epochs for m, v in metrics.items()])
    tables = {"metrics": frame}
    if queries:
        tables["ranks"] = pd.DataFrame({"epoch": max(epochs), "query": range(queries), "group": "all", "rank": 1, "subset_rank": 1,
                                        "ties": 0, "subset_ties": 0})
    if auroc:
        tables["purity"] = pd.DataFrame([{"epoch": e, "noise_type": t, "n_samples": 10, "n_selected": None, "n_selected_clean": None,
                                          "n_selected_noisy": None, "purity": math.nan, "clean_recall": math.nan,
                                          "noise_recall": math.nan, "auroc": a} for e in epochs for t, a in auroc.items()])
    store.write_run(key, row, tables)


HARD_80 = {"all": 0.85, "reference": 0.97, "target": 0.95, "caption": 0.65}
"""The baseline's per-sample loss AUROC at 80% (each epoch): swapped images found, swapped captions not."""


def _results(tmp_path: Path, oracle_80: float, sprc_first: float = 0.9, oracle_first: float = 0.9, queries: int = 0,
             auroc_80: dict[str, float] | None = None) -> Path:
    store = ResultsStore(tmp_path / "results")
    for seed, wobble in ((0, 0.0), (1, 0.01), (2, -0.01)):
        _write(store, "sprc", 0.0, seed, {"recall@10": 0.60 + wobble, "recall_subset@1": 0.55}, first=sprc_first, queries=queries)
        _write(store, "sprc", 0.5, seed, {"recall@10": 0.40 + wobble}, {"all": 0.8, "caption": 0.6, "reference": 0.9})
        _write(store, "sprc", 0.8, seed, {"recall@10": 0.30 + wobble},
               {k: v + wobble for k, v in (HARD_80 if auroc_80 is None else auroc_80).items()})
        _write(store, "oracle", 0.5, seed, {"recall@10": 0.45 + wobble})
        _write(store, "oracle", 0.8, seed, {"recall@10": oracle_80 + wobble}, first=oracle_first)
        _write(store, "zero_shot", 0.0, seed, {"recall@10": 0.30}, reference=True)
        _write(store, "text_blind", 0.0, seed, {"recall@10": 0.24}, reference=True)
    return tmp_path / "results"


def test_checks_read_the_right_numbers(tmp_path: Path) -> None:
    (setting,) = load_results(_results(tmp_path, oracle_80=0.36)).settings
    checks = {c.name: c for c in calibration_checks(setting)}
    assert checks["fine-tuning matters"].value == pytest.approx(0.5)
    assert checks["text matters (ranking)"].value == pytest.approx(0.4)
    assert checks["text matters (subset)"].value == pytest.approx(0.55)
    assert checks["noise hurts, not to chance"].value == pytest.approx(0.5)
    assert checks["stable over seeds"].value == pytest.approx(0.01)
    assert checks["something to win at 50%"].value == pytest.approx(0.05)
    assert checks["something to win at 80%"].value == pytest.approx(0.06)
    premise = checks["small-loss premise"]
    assert premise.value == pytest.approx(0.8) and "caption 0.600" in premise.detail
    found, hidden = checks["hard noise: swapped images found"], checks["hard noise: swapped captions hidden"]
    assert found.value == pytest.approx(0.95) and found.target == ">= 0.9"  # the lower of reference 0.97, target 0.95
    assert "target 0.950 (per seed 0.950, 0.960, 0.940)" in found.detail
    assert hidden.value == pytest.approx(0.65) and hidden.target == "<= 0.8"
    # the filter wins back (0.36 - 0.30) / (0.60 - 0.30) = 0.2 of sprc's loss at 80%, far from the papers'
    assert checks["room to win"].value == pytest.approx(0.2) and checks["room to win"].verdict == "FAIL"
    assert checks["every hosted method learns"].verdict == "n/a"  # no hosted method in these results
    passed = [c for name, c in checks.items() if name not in ("room to win", "every hosted method learns")]
    assert all(c.verdict == "pass" for c in passed), [(c.name, c.value) for c in passed]


def _room_results(root: Path, clean: list[float], noisy_80: list[float], oracle_80: list[float]) -> list:
    """Final R@10 per seed of sprc at 0% and 80%, the filter at 80%; at 50% the filter wins back 0.9."""
    store = ResultsStore(root)
    for seed, (c, n, o) in enumerate(zip(clean, noisy_80, oracle_80)):
        _write(store, "sprc", 0.0, seed, {"recall@10": c})
        _write(store, "sprc", 0.5, seed, {"recall@10": c - 0.2})
        _write(store, "oracle", 0.5, seed, {"recall@10": c - 0.02})
        _write(store, "sprc", 0.8, seed, {"recall@10": n})
        _write(store, "oracle", 0.8, seed, {"recall@10": o})
    (setting,) = load_results(root).settings
    return calibration_checks(setting)


def test_room_to_win_needs_the_share_on_every_seed_and_the_gap(tmp_path: Path) -> None:
    """Mean share >= 0.75 at 80% (0.85 at 50%), no seed below TME's FashionIQ share (0.61 at
    80%), and a mean gap of at least 0.12: each condition alone fails the check."""
    def room(name: str, clean: list[float], noisy: list[float], oracle: list[float]):
        return next(c for c in _room_results(tmp_path / name, clean, noisy, oracle) if c.name == "room to win")

    wins = room("wins", [0.6, 0.6], [0.3, 0.3], [0.54, 0.55])  # shares 0.80 and 0.833, gaps 0.24 and 0.25
    assert wins.value == pytest.approx((0.8 + 0.25 / 0.3) / 2) and wins.verdict == "pass", wins.detail
    assert "share per seed 0.80, 0.83" in wins.detail and "TME" in wins.detail and "CIRR 0.84-0.91" in wins.detail
    assert room("short", [0.6, 0.6], [0.3, 0.3], [0.40, 0.41]).verdict == "FAIL"  # shares 0.33, 0.37
    one_seed_low = room("one-low", [0.6, 0.6, 0.6], [0.3, 0.3, 0.3], [0.58, 0.58, 0.45])  # 0.93, 0.93, 0.50: mean 0.79
    assert one_seed_low.value >= 0.75 and one_seed_low.verdict == "FAIL"
    small_gap = room("small-gap", [0.4, 0.4], [0.3, 0.3], [0.39, 0.39])  # share 0.9, gap 0.09
    assert small_gap.value == pytest.approx(0.9) and small_gap.verdict == "FAIL"


def test_gentle_reads_every_epoch(tmp_path: Path) -> None:
    """The filter's lowest epoch against the start, and sprc's largest drop between epochs."""
    checks = {c.name: c for c in calibration_checks(load_results(_results(tmp_path / "a", oracle_80=0.36)).settings[0])}
    gentle = checks["gentle"]
    # oracle at 80%: first epoch 0.9 x 0.35 = 0.315 (seed 2) against the start's 0.30; sprc only rises
    assert gentle.value == pytest.approx(0.015) and gentle.verdict == "pass", gentle.detail
    dipped = {c.name: c for c in calibration_checks(load_results(_results(tmp_path / "b", 0.36, sprc_first=1.02)).settings[0])}
    # sprc at 0% falls from 1.02 x 0.61 to 0.61 (seed 1) between its two epochs: a drop of 0.0122
    assert dipped["gentle"].value == pytest.approx(0.01 - 0.02 * 0.61) and dipped["gentle"].verdict == "FAIL"


def test_gentle_allows_a_dip_within_the_starts_resolution_only(tmp_path: Path) -> None:
    """With 100 validation queries the start's R@10 0.30 has a binomial SE of 0.0458: the
    floor is 0.30 - 2 x 0.0458 = 0.208. The filter at 80% (seed 2: final 0.35) ending its
    first epoch at 0.80 x 0.35 = 0.28 is within it; at 0.55 x 0.35 = 0.1925 it is not."""
    floor = 0.30 - 2 * math.sqrt(0.30 * 0.70 / 100)
    within = {c.name: c for c in calibration_checks(load_results(_results(tmp_path / "a", 0.36, oracle_first=0.8, queries=100)).settings[0])}
    sprc_slack = 0.01 + 0.1 * 0.59  # sprc at 0% only rises: seed 2 from 0.9 x 0.59 to 0.59
    assert within["gentle"].value == pytest.approx(min(0.28 - floor, sprc_slack)) and within["gentle"].verdict == "pass"
    assert "over 100 queries" in within["gentle"].detail
    below = {c.name: c for c in calibration_checks(load_results(_results(tmp_path / "b", 0.36, oracle_first=0.55, queries=100)).settings[0])}
    assert below["gentle"].value == pytest.approx(0.55 * 0.35 - floor) and below["gentle"].verdict == "FAIL"


def _fine_tune_check(root: Path, start: dict[str, float], clean: dict[str, float]):
    store = ResultsStore(root)
    for seed in (0, 1):
        _write(store, "sprc", 0.0, seed, clean)
        _write(store, "zero_shot", 0.0, seed, start, reference=True)
    (setting,) = load_results(root).settings
    return next(c for c in calibration_checks(setting) if c.name == "fine-tuning matters")


def test_fine_tuning_matters_reads_r10_and_r1_against_cirrs_zero_shot_range(tmp_path: Path) -> None:
    """The start's share of ``sprc`` at 0% is at most 0.85 on R@10 and 0.75 on R@1, at least 0.2 on R@10."""
    ok = _fine_tune_check(tmp_path / "ok", {"recall@10": 0.48, "recall@1": 0.14}, {"recall@10": 0.60, "recall@1": 0.20})
    assert ok.value == pytest.approx(0.8) and ok.verdict == "pass" and "R@1 ratio 0.700" in ok.detail
    r1_high = _fine_tune_check(tmp_path / "r1", {"recall@10": 0.48, "recall@1": 0.16}, {"recall@10": 0.60, "recall@1": 0.20})
    assert r1_high.value == pytest.approx(0.8) and r1_high.verdict == "FAIL" and "R@1 ratio 0.800" in r1_high.detail
    r10_high = _fine_tune_check(tmp_path / "r10", {"recall@10": 0.54, "recall@1": 0.10}, {"recall@10": 0.60, "recall@1": 0.20})
    assert r10_high.value == pytest.approx(0.9) and r10_high.verdict == "FAIL"
    chance = _fine_tune_check(tmp_path / "low", {"recall@10": 0.06, "recall@1": 0.01}, {"recall@10": 0.60, "recall@1": 0.20})
    assert chance.verdict == "FAIL"


def test_room_to_win_prints_the_gain_at_a_fifth_and_a_half(tmp_path: Path) -> None:
    """(oracle - zero_shot) / (sprc at 0% - zero_shot): at 80% (0.36 - 0.30) / (0.60 - 0.30) = 0.2,
    at 50% (0.45 - 0.30) / 0.30 = 0.5 (means over seeds: the wobbles cancel)."""
    (setting,) = load_results(_results(tmp_path, oracle_80=0.36)).settings
    room = next(c for c in calibration_checks(setting) if c.name == "room to win")
    assert "gain at a fifth 0.20, gain at a half 0.50" in room.detail


@pytest.mark.parametrize("auroc_80, failed", [
    ({"all": 0.9, "reference": 0.97, "target": 0.95, "caption": 0.86}, "hard noise: swapped captions hidden"),
    ({"all": 0.7, "reference": 0.97, "target": 0.85, "caption": 0.60}, "hard noise: swapped images found"),
])
def test_hard_noise_fails_when_captions_are_found_or_images_are_not(tmp_path: Path, auroc_80: dict, failed: str) -> None:
    (setting,) = load_results(_results(tmp_path, oracle_80=0.36, auroc_80=auroc_80)).settings
    checks = {c.name: c for c in calibration_checks(setting) if c.name.startswith("hard noise")}
    assert {name: c.verdict for name, c in checks.items()} == {
        name: "FAIL" if name == failed else "pass" for name in ("hard noise: swapped images found",
                                                                 "hard noise: swapped captions hidden")}


def test_hard_noise_reads_n_a_without_the_baselines_scores_at_80(tmp_path: Path) -> None:
    (setting,) = load_results(_results(tmp_path, oracle_80=0.36, auroc_80={})).settings
    checks = [c for c in calibration_checks(setting) if c.name.startswith("hard noise")]
    assert [c.verdict for c in checks] == ["n/a", "n/a"] and "caption: not recorded" in checks[1].detail


def test_a_missed_target_fails(tmp_path: Path) -> None:
    (setting,) = load_results(_results(tmp_path, oracle_80=0.32)).settings
    checks = {c.name: c for c in calibration_checks(setting)}
    assert checks["something to win at 80%"].value == pytest.approx(0.02)
    assert checks["something to win at 80%"].verdict == "FAIL"


CALIBRATION_CELLS = (("sprc", 0.0), ("sprc", 0.5), ("sprc", 0.8), ("oracle", 0.5), ("oracle", 0.8))
HOSTED_CELLS = tuple((m, 0.0) for m in ("cala", "conesep", "habit", "hug", "intent", "ssn", "tme"))


def test_calibration_grid_leaves_out_the_oracle_at_no_noise_and_runs_hosted_methods_clean_only(tmp_path: Path) -> None:
    spec = GridSpec(methods=["hug"], noise_rates=[0.2], seeds=[0, 1], output=tmp_path, cache_dir=tmp_path)
    grid = calibration_grid(spec)
    cells = sorted((c.key.method, c.key.noise_rate, c.key.seed) for c in grid.cells)
    assert cells == sorted([(m, r, s) for m, r in CALIBRATION_CELLS + HOSTED_CELLS for s in (0, 1)])
    alone = calibration_grid(spec, hosted=False)
    assert sorted((c.key.method, c.key.noise_rate, c.key.seed) for c in alone.cells) == sorted(
        [(m, r, s) for m, r in CALIBRATION_CELLS for s in (0, 1)])


def test_a_plugin_method_is_not_a_hosted_method(tmp_path: Path) -> None:
    """Only built-in methods without a role are hosted: a user's plugin never enters a calibration."""
    plugin = tmp_path / "mine.py"
    plugin.write_text("from cirbench_methods.sprc import SPRC\n\n\nclass Mine(SPRC):\n    name = 'mine-calibration-plugin'\n")
    spec = GridSpec(methods=["sprc"], noise_rates=[0.0], seeds=[0], output=tmp_path, cache_dir=tmp_path, plugin_files=[plugin])
    methods = {c.key.method for c in calibration_grid(spec).cells}
    assert "mine-calibration-plugin" not in methods and {"sprc", "oracle", "hug", "tme"} <= methods


def _hosted_results(root: Path, hosted: dict[str, float], start: float = 0.30) -> Path:
    """Calibration results of two seeds with ``hosted`` methods' clean R@10 (sprc at 0.60)."""
    store = ResultsStore(root)
    for seed in (0, 1):
        _write(store, "sprc", 0.0, seed, {"recall@10": 0.60}, source="built-in sprc.py", role="baseline")
        _write(store, "zero_shot", 0.0, seed, {"recall@10": start}, reference=True)
        for name, value in hosted.items():
            _write(store, name, 0.0, seed, {"recall@10": value + 0.01 * (seed - 0.5)}, source=f"built-in {name}.py")
        _write(store, "plugin", 0.0, seed, {"recall@10": 0.01}, source="file /x/plugin.py")  # a plugin: never read
        _write(store, "hug:no_fc", 0.0, seed, {"recall@10": 0.01}, source="built-in hug.py")  # an ablation row: never read
    return root


def _learn(root: Path, hosted: dict[str, float], start: float = 0.30):
    (setting,) = load_results(_hosted_results(root, hosted, start)).settings
    return next(c for c in calibration_checks(setting) if c.name == "every hosted method learns")


def test_every_hosted_method_learns_reads_the_worst_share_of_the_baseline(tmp_path: Path) -> None:
    check = _learn(tmp_path / "a", {"tme": 0.57, "hug": 0.55})
    assert check.value == pytest.approx(0.55 / 0.60) and check.verdict == "pass"
    assert "hug 0.92 (0.550)" in check.detail and "tme 0.95" in check.detail and "plugin" not in check.detail
    low = _learn(tmp_path / "b", {"tme": 0.57, "hug": 0.53})  # 0.883 of sprc
    assert low.value == pytest.approx(0.53 / 0.60) and low.verdict == "FAIL"


def test_every_hosted_method_learns_needs_each_above_the_start(tmp_path: Path) -> None:
    """A method at 0.9 of the baseline still fails when it ends at or below the un-fine-tuned start."""
    check = _learn(tmp_path / "a", {"hug": 0.56}, start=0.58)
    assert check.value == pytest.approx(0.56 / 0.60) and check.verdict == "FAIL"
    assert "at or below zero_shot: hug" in check.detail


def test_every_hosted_method_learns_reads_n_a_without_hosted_cells(tmp_path: Path) -> None:
    (setting,) = load_results(_results(tmp_path, oracle_80=0.36)).settings
    check = next(c for c in calibration_checks(setting) if c.name == "every hosted method learns")
    assert check.verdict == "n/a" and "not run" in check.detail


def test_cli_calibrate_end_to_end(tmp_path: Path, cache_dir: Path) -> None:
    out = tmp_path / "cal"
    result = CliRunner().invoke(app, ["calibrate", "--dataset", "shapes-mini", "--seeds", "0", "--epochs", "1",
                                      "--batch-size", "150", "--output", str(out), "--cache-dir", str(cache_dir)])
    assert result.exit_code in (0, 1), result.output  # 1: some target missed on this toy setting
    text = (out / "calibration.md").read_text()
    for name in ("fine-tuning matters", "text matters (subset)", "something to win at 80%", "small-loss premise",
                 "hard noise: swapped images found", "hard noise: swapped captions hidden", "every hosted method learns"):
        assert name in text
    assert "| stable over seeds |" in text and "| n/a |" in text  # one seed: no spread to judge
    runs = pd.read_parquet(out / "runs")
    assert len(runs) == 5 + 7 + 3 and set(runs.status) == {"completed"}  # calibration, hosted at 0%, reference rows
    hosted = runs[runs.method.isin([m for m, _ in HOSTED_CELLS])]
    assert set(hosted.noise_rate) == {0.0} and len(hosted) == 7


def test_two_cells_at_once_give_the_same_numbers_as_one_after_another(tmp_path: Path, cache_dir: Path) -> None:
    """``--jobs 2`` runs cells in two single-threaded processes; the store holds what one
    process running them one after another (also single-threaded, as every test) writes."""
    args = ["run", "--methods", "sprc", "--noise", "0,0.5", "--dataset", "shapes-mini", "--epochs", "1",
            "--batch-size", "150", "--cache-dir", str(cache_dir)]
    runner = CliRunner()
    serial = runner.invoke(app, [*args, "--output", str(tmp_path / "serial"), "--jobs", "1"])
    parallel = runner.invoke(app, [*args, "--output", str(tmp_path / "parallel"), "--jobs", "2"])
    assert serial.exit_code == 0 and parallel.exit_code == 0, serial.output + parallel.output
    assert "queued" not in serial.output
    frames = [pd.read_parquet(tmp_path / name / "metrics").sort_values(["run_id", "epoch", "group", "metric"])
              for name in ("serial", "parallel")]
    assert len(frames[0]) == len(frames[1]) > 0
    pd.testing.assert_series_equal(frames[0].value.reset_index(drop=True), frames[1].value.reset_index(drop=True))
    runs = pd.read_parquet(tmp_path / "parallel" / "runs")
    assert set(runs.status) == {"completed"} and len(runs) == 2 + 3


def test_no_margin_at_50_percent_is_a_failure(tmp_path: Path) -> None:
    """At 50% the perfect filter must beat sprc, not tie it: the target is strict."""
    store = ResultsStore(tmp_path / "results")
    for seed in (0, 1):
        _write(store, "sprc", 0.5, seed, {"recall@10": 0.40})
        _write(store, "oracle", 0.5, seed, {"recall@10": 0.40 + 0.01 * seed})
    (setting,) = load_results(tmp_path / "results").settings
    check = next(c for c in calibration_checks(setting) if c.name == "something to win at 50%")
    assert (check.value, check.target, check.verdict) == (0.0, "> 0", "FAIL")
    assert next(c for c in calibration_checks(setting) if c.name == "text matters (ranking)").verdict == "n/a"  # not run


def test_calibrate_resolves_a_plugin_datasets_held_out_default(tmp_path: Path, cache_dir: Path) -> None:
    """A generated dataset from ``--plugin`` gets the generated datasets' held-out share, as
    ``shapes`` does (it resolved to none when the share was read before the plugin registered)."""
    from cirbench.settings import defaults
    from cirbench.cli.grid import calibrate_grid

    plugin = tmp_path / "tiny_shapes.py"
    plugin.write_text("from cirbench.data.datasets.registry import ShapesLoader\n\n\n"
                      "class TinyShapes(ShapesLoader):\n    name = 'shapes-calibrate-plugin'\n\n"
                      "    def __init__(self) -> None:\n"
                      "        super().__init__('test set', n_train_scenes=30, n_val_scenes=10)\n")
    grid = calibrate_grid(dict(seeds=[0], dataset="shapes-calibrate-plugin", epochs=1, batch_size=16,
                               output=tmp_path / "out", cache_dir=cache_dir, holdout=None, plugin_files=[plugin]))
    assert grid.spec.holdout == defaults.HOLDOUT > 0


def test_the_report_names_each_hosted_method_below_clean_parity(tmp_path: Path) -> None:
    from cirbench.report.analysis.verdicts.calibration import parity_lines

    (setting,) = load_results(_hosted_results(tmp_path / "a", {"tme": 0.57, "hug": 0.40})).settings
    (line,) = parity_lines(setting)
    assert "`hug` reaches 67% of `sprc`'s R@10" in line and "40.0% against 60.0%" in line and "target is 90%" in line
    (setting,) = load_results(_hosted_results(tmp_path / "b", {"tme": 0.57, "hug": 0.55})).settings
    assert parity_lines(setting) == []
