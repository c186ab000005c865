"""Paired comparisons on constructed data whose answer is known: the verdict rule, the seed
interval, the query and training-sample bootstraps, and the kept-set test against chance."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

from cirbench.report.analysis.statistics.bootstrap import QueryBootstrap, RankTerm, SampleBootstrap, rank_terms, weighted_auroc
from cirbench.report.analysis.loading.numbers import CIRR_AVG, FIQ_AVG
from cirbench.report.analysis.statistics.significance import (
    BETTER, DEFAULT_MARGIN, DOES_NOT_HOLD, EQUIVALENT, HOLDS, NOT_RUN, UNDECIDED, WORSE, Comparison, Term, answer,
    combine_verdicts, difference, half_width_text, kept_set_test, kept_set_verdict, paired_comparison, seed_interval,
    verdict,
)

N_QUERIES = 400
R10 = [RankTerm("all", "rank", 10, 1.0)]


def _ranks(hit_rates: dict[tuple[str, int], float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs and ranks: per (method, seed) a hit rate at R@10; each query is a hit with that
    probability (rank 0) or a miss (rank 50), independently per run."""
    runs, ranks = [], []
    for (method, seed), rate in hit_rates.items():
        run_id = f"{method}-{seed}"
        rng = np.random.default_rng([seed, ord(method[0])])
        hit = rng.random(N_QUERIES) < rate
        runs.append({"run_id": run_id, "method": method, "noise_rate": 0.5, "seed": seed})
        ranks.append(pd.DataFrame({"run_id": run_id, "query": np.arange(N_QUERIES), "group": "all",
                                   "rank": np.where(hit, 0, 50), "subset_rank": -1}))
    return pd.DataFrame(runs), pd.concat(ranks, ignore_index=True)


def _compare(hit_rates: dict[tuple[str, int], float], threshold: float = 0.0, offset: float = 0.0, terms=None):
    runs, ranks = _ranks(hit_rates)
    boot = QueryBootstrap(ranks, R10, n_resamples=500, seed=1)
    point = pd.Series(boot.point(list(runs.run_id)), index=runs.run_id)
    return paired_comparison("A - B", terms or difference("A", "B", 0.5), runs, point, boot.resample,
                             offset=offset, threshold=threshold)


def test_a_clear_difference_holds() -> None:
    result = _compare({("A", s): 0.7 for s in range(3)} | {("B", s): 0.4 for s in range(3)})
    assert result.verdict == HOLDS and result.seeds == [0, 1, 2]
    assert 0.25 < result.mean < 0.35
    assert result.seed_interval[0] > 0 and result.bootstrap_interval[0] > 0
    assert result.bootstrap_interval[0] < result.mean < result.bootstrap_interval[1]


def test_identical_methods_are_undecided() -> None:
    result = _compare({("A", s): 0.5 for s in range(3)} | {("B", s): 0.5 for s in range(3)})
    # the same hit rate, but independent draws: any difference is noise
    assert result.verdict == UNDECIDED
    assert result.bootstrap_interval[0] < 0 < result.bootstrap_interval[1]


def test_a_method_compared_with_itself_is_undecided() -> None:
    runs, ranks = _ranks({("A", s): 0.5 for s in range(3)})
    boot = QueryBootstrap(ranks, R10, n_resamples=200)
    point = pd.Series(boot.point(list(runs.run_id)), index=runs.run_id)
    result = paired_comparison("A - A", difference("A", "A", 0.5), runs, point, boot.resample)
    assert result.seed_interval == (0.0, 0.0) and result.bootstrap_interval == (0.0, 0.0)
    assert result.verdict == UNDECIDED  # an interval at 0 is not above 0


def test_a_reversed_difference_does_not_hold() -> None:
    result = _compare({("A", s): 0.4 for s in range(3)} | {("B", s): 0.7 for s in range(3)})
    assert result.verdict == DOES_NOT_HOLD and result.seed_interval[1] < 0 and result.bootstrap_interval[1] < 0


def test_one_seed_is_at_best_undecided() -> None:
    result = _compare({("A", 0): 0.9, ("B", 0): 0.1})
    assert result.seed_interval is None and result.bootstrap_interval[0] > 0.7
    assert result.verdict == UNDECIDED and "one seed" in result.numbers()


def test_non_inferiority_uses_the_threshold() -> None:
    close = {("A", s): 0.695 for s in range(3)} | {("B", s): 0.7 for s in range(3)}
    assert _compare(close, threshold=-0.2).verdict == HOLDS  # loses far less than 0.2
    assert _compare({("A", s): 0.4 for s in range(3)} | {("B", s): 0.7 for s in range(3)}, threshold=-0.01).verdict == DOES_NOT_HOLD


def test_a_missing_cell_is_not_run_and_a_constant_offsets() -> None:
    result = _compare({("A", s): 0.7 for s in range(3)}, terms=difference("A", "C", 0.5))
    assert result.verdict == NOT_RUN and "C at 50%" in result.numbers()
    against = _compare({("A", s): 0.7 for s in range(3)}, terms=[Term("A", 0.5)], offset=-0.5)
    assert against.verdict == HOLDS and against.mean == pytest.approx(0.2, abs=0.06)


def test_seed_interval_is_the_t_interval() -> None:
    values = [0.1, 0.3, 0.2, 0.25]
    low, high = seed_interval(values)
    half = stats.t.ppf(0.975, 3) * np.std(values, ddof=1) / 2
    assert (low, high) == pytest.approx((np.mean(values) - half, np.mean(values) + half))
    assert seed_interval([0.3]) is None


def _constructed(per_seed: list[float], spread: float, threshold: float = 0.0, margin: float | None = DEFAULT_MARGIN,
                 n_resamples: int = 4000) -> tuple[Comparison, np.ndarray]:
    """A - B whose per-seed differences are ``per_seed`` and whose resampled values scatter
    around each run's value with standard deviation ``spread`` (seeded): the comparison and
    the resampled mean differences it reads."""
    seeds = range(len(per_seed))
    runs = pd.DataFrame([{"run_id": f"{m}-{s}", "method": m, "noise_rate": 0.5, "seed": s} for m in "AB" for s in seeds])
    point = pd.Series({f"A-{s}": 0.5 + d for s, d in zip(seeds, per_seed)} | {f"B-{s}": 0.5 for s in seeds})
    noise = np.random.default_rng(7).normal(0.0, spread, (n_resamples, len(runs)))

    def resample(run_ids: list[str]) -> np.ndarray:
        return point[run_ids].to_numpy()[None, :] + noise[:, : len(run_ids)]

    result = paired_comparison("A - B", difference("A", "B", 0.5), runs, point, resample, threshold=threshold,
                               margin=margin)
    contrast = resample([r for s in seeds for r in (f"A-{s}", f"B-{s}")]).reshape(n_resamples, len(per_seed), 2) @ [1, -1]
    return result, contrast.mean(axis=1)


def test_a_zero_difference_with_a_tight_spread_is_equivalent_and_a_wide_one_undecided() -> None:
    tight, _ = _constructed([0.001, -0.001, 0.0, 0.0005, -0.0005], spread=0.001)
    assert tight.answer == EQUIVALENT and tight.verdict == DOES_NOT_HOLD  # "A beats B" does not hold
    assert -DEFAULT_MARGIN < tight.seed_interval[0] and tight.bootstrap_interval[1] < DEFAULT_MARGIN
    wide, _ = _constructed([0.03, -0.03, 0.0, 0.015, -0.015], spread=0.001)  # the seeds disagree
    assert wide.mean == pytest.approx(0.0) and wide.answer == UNDECIDED and wide.verdict == UNDECIDED
    queries, _ = _constructed([0.001, -0.001, 0.0, 0.0005, -0.0005], spread=0.03)  # the queries do
    assert queries.answer == UNDECIDED and queries.verdict == UNDECIDED
    unmargined, _ = _constructed([0.001, -0.001, 0.0, 0.0005, -0.0005], spread=0.001, margin=None)
    assert unmargined.answer == UNDECIDED and unmargined.verdict == UNDECIDED  # no margin: never equivalent
    loose, _ = _constructed([0.03, -0.03, 0.0, 0.015, -0.015], spread=0.001, margin=0.1)
    assert loose.answer == EQUIVALENT  # the margin is the claim's: wide enough, the same spread decides


def test_a_real_difference_inside_the_margin_is_better_and_non_inferiority_keeps_its_threshold() -> None:
    small, _ = _constructed([0.004, 0.005, 0.006], spread=0.0005)
    assert small.answer == BETTER and small.verdict == HOLDS  # both intervals above 0: real, if small
    assert _constructed([-0.02, -0.021, -0.019], spread=0.001)[0].answer == WORSE
    close, _ = _constructed([0.001, -0.001, 0.0, 0.0005, -0.0005], spread=0.001, threshold=-0.01)
    assert close.answer == EQUIVALENT and close.verdict == HOLDS  # loses no more than a point: holds
    behind, _ = _constructed([-0.02, -0.021, -0.019], spread=0.001, threshold=-0.01)
    assert behind.verdict == DOES_NOT_HOLD


def test_the_smallest_decidable_difference_is_the_wider_intervals_half_width() -> None:
    per_seed = [0.01, -0.02, 0.005, 0.0]
    result, means = _constructed(per_seed, spread=0.002)
    seed_half = stats.t.ppf(0.975, 3) * np.std(per_seed, ddof=1) / np.sqrt(4)  # the t interval, by hand
    low, high = np.percentile(means, [2.5, 97.5])
    assert result.half_width == pytest.approx(max(seed_half, (high - low) / 2))
    assert result.half_width == pytest.approx(seed_half)  # here the seeds' interval is the wider
    assert f"smallest decidable {half_width_text(seed_half)}" in result.numbers()
    narrow_seeds, means = _constructed([0.01, 0.011, 0.009, 0.01], spread=0.02)
    low, high = np.percentile(means, [2.5, 97.5])
    assert narrow_seeds.half_width == pytest.approx((high - low) / 2)  # here the queries'
    assert Comparison("x", 0.0, seed_interval=(0.0, 0.04), bootstrap_interval=(-0.01, 0.02)).half_width == pytest.approx(0.02)
    assert _constructed([0.01], spread=0.01)[0].half_width is None  # one seed: no interval over seeds
    assert half_width_text(0.0234) == "±2.3" and half_width_text(None) == "-"


def test_the_four_answers_on_intervals() -> None:
    assert answer((0.01, 0.05), (0.02, 0.04)) == BETTER
    assert answer((-0.05, -0.01), (-0.04, -0.02)) == WORSE
    assert answer((-0.005, 0.009), (-0.002, 0.004)) == EQUIVALENT
    assert answer((-0.005, 0.011), (-0.002, 0.004)) == UNDECIDED  # one interval reaches past the margin
    assert answer((-0.005, 0.009), (-0.002, 0.004), margin=None) == UNDECIDED
    assert answer(None, (-0.002, 0.004)) == UNDECIDED
    assert verdict((-0.005, 0.009), (-0.002, 0.004), margin=DEFAULT_MARGIN) == DOES_NOT_HOLD
    assert verdict((-0.005, 0.009), (-0.002, 0.004)) == UNDECIDED  # no margin given


def test_verdict_rule_and_combination() -> None:
    assert verdict((0.01, 0.05), (0.02, 0.04)) == HOLDS
    assert verdict((0.01, 0.05), (-0.01, 0.04)) == UNDECIDED  # the intervals disagree
    assert verdict((-0.05, -0.01), (-0.04, -0.02)) == DOES_NOT_HOLD
    assert verdict(None, (0.02, 0.04)) == UNDECIDED
    assert verdict((-0.009, 0.01), (-0.005, 0.0), threshold=-0.01) == HOLDS
    assert combine_verdicts([HOLDS, HOLDS]) == HOLDS
    assert combine_verdicts([HOLDS, UNDECIDED]) == UNDECIDED
    assert combine_verdicts([HOLDS, NOT_RUN]) == UNDECIDED
    assert combine_verdicts([HOLDS, DOES_NOT_HOLD, NOT_RUN]) == DOES_NOT_HOLD
    assert combine_verdicts([NOT_RUN, NOT_RUN]) == combine_verdicts([]) == NOT_RUN
    with pytest.raises(ValueError, match="unknown verdicts"):
        combine_verdicts(["maybe"])


def test_grouped_metrics_resample_within_each_group() -> None:
    metrics = pd.DataFrame([{"group": g, "metric": m} for g in ("dress", "shirt", "average") for m in ("recall@10", "recall@50")])
    terms = rank_terms(FIQ_AVG, metrics)
    assert {(t.group, t.k) for t in terms} == {("dress", 10), ("dress", 50), ("shirt", 10), ("shirt", 50)}
    assert sum(t.weight for t in terms) == pytest.approx(1.0)
    assert rank_terms(CIRR_AVG, metrics) == [RankTerm("all", "rank", 5, 0.5), RankTerm("all", "subset_rank", 1, 0.5)]
    assert rank_terms("dress R@50", metrics) == [RankTerm("dress", "rank", 50, 1.0)]
    with pytest.raises(ValueError, match="not a recall"):
        rank_terms("Purity", metrics)
    # 10 dress queries all hits, 90 shirt queries all misses: the category average is 0.5
    # on every resample (each category keeps its size), where a pooled mean would be 0.1
    ranks = pd.DataFrame({"run_id": "r", "query": np.arange(100), "group": ["dress"] * 10 + ["shirt"] * 90,
                          "rank": [0] * 10 + [99] * 90, "subset_rank": -1})
    boot = QueryBootstrap(ranks, terms, n_resamples=50)
    assert boot.point(["r"]) == pytest.approx([0.5])
    assert np.allclose(boot.resample(["r"]), 0.5)
    assert boot.resample(["absent"]) is None


def test_weighted_auroc_matches_sklearn_and_purity_the_counts() -> None:
    rng = np.random.default_rng(0)
    n = 300
    is_noisy = rng.random(n) < 0.4
    score = np.round(np.where(is_noisy, 0.6, 0.4) + rng.normal(0, 0.2, n), 1)  # rounded: ties
    weights = rng.integers(0, 3, size=(4, n)).astype(np.float32)
    expected = [roc_auc_score(is_noisy, score, sample_weight=w) for w in weights]
    assert weighted_auroc(score, is_noisy, weights) == pytest.approx(expected)

    kept = score < 0.5
    noise_type = np.where(is_noisy, np.array(["reference", "caption", "target"])[np.arange(n) % 3], "clean")
    scores = pd.DataFrame({"run_id": "r", "sample_id": [f"s{i:03d}" for i in range(n)], "score": score,
                           "selected_clean": kept, "is_noisy": is_noisy, "noise_type": noise_type})
    boot = SampleBootstrap(scores.sample_id, n_resamples=30)
    once = boot.values(scores, ["r"], "purity", resampled=False)
    assert once[0, 0] == pytest.approx((kept & ~is_noisy).sum() / kept.sum())
    caption = boot.values(scores, ["r"], "purity", "caption", resampled=False)[0, 0]
    captions_kept = (kept & (noise_type == "caption")).sum()
    assert caption == pytest.approx((kept & ~is_noisy).sum() / ((kept & ~is_noisy).sum() + captions_kept))
    assert boot.values(scores, ["r"], "auroc", resampled=False)[0, 0] == pytest.approx(roc_auc_score(is_noisy, score))
    assert boot.values(scores, ["r"], "purity").shape == (30, 1)
    no_partition = scores.assign(selected_clean=pd.array([pd.NA] * n, dtype="boolean"))
    assert boot.values(no_partition, ["r"], "purity") is None


def test_sample_bootstrap_reads_each_run_on_the_samples_it_trained_on() -> None:
    # two seeds whose runs hold out different samples (as --holdout draws them per seed): the
    # universe is every id, each run's purity and AUROC are those of its own samples
    rng = np.random.default_rng(1)
    n = 200
    ids = np.array([f"s{i:03d}" for i in range(n)])
    frames, expected = [], {}
    for run_id, held in (("seed0", np.arange(n) < 20), ("seed1", np.arange(n) >= n - 20)):
        is_noisy = rng.random(n) < 0.5
        score = np.where(is_noisy, 0.7, 0.3) + rng.normal(0, 0.3, n)
        kept = score < 0.5
        own = ~held
        frames.append(pd.DataFrame({"run_id": run_id, "sample_id": ids[own], "score": score[own],
                                    "selected_clean": kept[own], "is_noisy": is_noisy[own], "noise_type": "reference"}))
        expected[run_id] = ((kept & ~is_noisy & own).sum() / (kept & own).sum(), roc_auc_score(is_noisy[own], score[own]))
    scores = pd.concat(frames, ignore_index=True)
    boot = SampleBootstrap(scores.sample_id.unique(), n_resamples=20)
    assert len(boot.sample_ids) == n
    purity = boot.values(scores, ["seed0", "seed1"], "purity", resampled=False)[0]
    auroc = boot.values(scores, ["seed0", "seed1"], "auroc", resampled=False)[0]
    assert purity == pytest.approx([expected["seed0"][0], expected["seed1"][0]])
    assert auroc == pytest.approx([expected["seed0"][1], expected["seed1"][1]])
    assert np.isfinite(boot.values(scores, ["seed0", "seed1"], "purity")).all()


def test_kept_set_test_on_a_constructed_purity() -> None:
    # 1000 samples, 500 clean; a kept set of 400 with 300 clean (75% against 50% by chance)
    clean = kept_set_test(1000, 500, 400, 300)
    assert clean.p_cleaner < 1e-20 and kept_set_verdict(clean) == HOLDS
    assert clean.p_cleaner == pytest.approx(stats.hypergeom(1000, 500, 400).sf(299))
    assert (clean.purity, clean.chance) == (0.75, 0.5)
    assert kept_set_verdict(kept_set_test(1000, 500, 400, 200)) == UNDECIDED  # exactly chance
    assert kept_set_verdict(kept_set_test(1000, 500, 400, 150)) == DOES_NOT_HOLD  # dirtier than chance
    assert kept_set_test(10, 5, 4, 4).p_cleaner == pytest.approx(5 / 210)  # C(5,4)/C(10,4)
    with pytest.raises(ValueError, match="inconsistent"):
        kept_set_test(10, 5, 4, 6)
