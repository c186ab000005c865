"""The kept set against chance (cirbench.results.chance): the flag's rule on constructed
purity rows, and the judging of runs written before the ``below_chance`` columns existed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from cirbench.engine.cell.recorder import purity_rows
from cirbench.results.chance import below_chance_reason, chance_test, judge_below_chance
from cirbench.results.store import MAIN_SCORE


def kept_set_rows(n_samples: int, n_noisy: int, n_kept: int | None, n_kept_clean: int = 0, epoch: int = 0,
                  score_name: str = MAIN_SCORE) -> pd.DataFrame:
    """One epoch's ``purity`` rows of a training set of ``n_samples`` (the first ``n_noisy``
    noisy) whose kept set holds ``n_kept_clean`` clean and ``n_kept - n_kept_clean`` noisy
    samples (``n_kept`` None: a method that only scores)."""
    is_noisy = np.arange(n_samples) < n_noisy
    selected = None
    if n_kept is not None:
        selected = np.zeros(n_samples, dtype=bool)
        selected[:n_kept - n_kept_clean] = True  # noisy ones
        selected[n_noisy:n_noisy + n_kept_clean] = True  # clean ones
    rows = purity_rows(selected, None, is_noisy, np.where(is_noisy, "caption", "clean"))
    rows.insert(0, "epoch", epoch)
    rows.insert(1, "score_name", score_name)
    return rows


def kept_complement(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """A constructed cell's ``tables`` with its main score's kept set swapped for its
    complement at every epoch: a selector that keeps mostly noisy samples, below chance."""
    scores = tables["scores"]
    if "score_name" in scores.columns:
        scores = scores[scores.score_name == MAIN_SCORE]
    scores = scores.assign(selected_clean=~scores.selected_clean.astype(bool))
    purity = []
    for epoch, own in scores.groupby("epoch"):
        rows = purity_rows(own.selected_clean.to_numpy(), own.score.to_numpy(), own.is_noisy.to_numpy(),
                           own.noise_type.to_numpy())
        rows.insert(0, "epoch", epoch)
        rows.insert(1, "score_name", MAIN_SCORE)
        purity.append(rows)
    return tables | {"purity": pd.concat(purity, ignore_index=True), "scores": scores}


def test_a_kept_set_significantly_below_chance_is_flagged_with_its_numbers() -> None:
    # 2000 samples, half noisy; HABIT-like: 1000 kept, 390 of them clean (39% against 50%)
    reason = below_chance_reason(kept_set_rows(2000, 1000, 1000, 390), 1000)
    assert reason == "kept set 39.0% clean (390 of 1000) below chance 50.0% (p=4e-23) at the final epoch (1)"
    epoch, test = chance_test(kept_set_rows(2000, 1000, 1000, 390), 1000)
    assert epoch == 0 and test.p_dirtier == pytest.approx(stats.hypergeom(2000, 1000, 1000).cdf(390))
    # at 80% noise chance is 20%: a kept set at 10% is below it
    assert "10.0% clean (50 of 500) below chance 20.0%" in below_chance_reason(kept_set_rows(2000, 1600, 500, 50), 1600)


def test_slightly_below_chance_or_above_it_is_not_flagged() -> None:
    assert below_chance_reason(kept_set_rows(200, 100, 100, 49), 100) == ""  # 49% against 50%: p = 0.44
    assert below_chance_reason(kept_set_rows(1000, 500, 20, 9), 500) == ""  # 45% of 20: p = 0.41
    assert below_chance_reason(kept_set_rows(2000, 1000, 1000, 700), 1000) == ""  # cleaner than chance
    assert below_chance_reason(kept_set_rows(2000, 1000, 2000, 1000), 1000) == ""  # keeps everything: exactly chance
    assert below_chance_reason(kept_set_rows(2000, 1000, 1000, 1000), 1000) == ""  # a perfect filter


def test_no_kept_set_or_no_noise_is_not_judged() -> None:
    for rows, n_noisy in ((kept_set_rows(200, 100, 0), 100),  # keeps nothing
                          (kept_set_rows(200, 100, None), 100),  # only scores
                          (kept_set_rows(200, 0, 150, 150), 0),  # no noise
                          (pd.DataFrame(), 100)):  # no purity table at all (a reference row)
        assert chance_test(rows, n_noisy) is None and below_chance_reason(rows, n_noisy) == ""
    assert chance_test(kept_set_rows(200, 100, 100, 20), float("nan")) is None  # no n_noisy recorded


def test_the_final_epoch_of_the_main_score_is_judged() -> None:
    dirty, clean = kept_set_rows(2000, 1000, 1000, 390, epoch=0), kept_set_rows(2000, 1000, 1000, 700, epoch=1)
    assert below_chance_reason(pd.concat([dirty, clean]), 1000) == ""  # recovered by the last epoch
    late = kept_set_rows(2000, 1000, 1000, 390, epoch=1)
    assert below_chance_reason(pd.concat([clean.assign(epoch=0), late]), 1000).endswith("at the final epoch (2)")
    extra = kept_set_rows(2000, 1000, 1000, 100, epoch=1, score_name="overall_uncertainty")
    assert below_chance_reason(pd.concat([clean, extra]), 1000) == ""  # another named score is not the kept set


def test_runs_without_the_columns_are_judged_from_their_purity_rows() -> None:
    purity = pd.concat([kept_set_rows(2000, 1000, 1000, 390).assign(run_id="habit"),
                        kept_set_rows(2000, 1000, 1000, 700).assign(run_id="conesep")])
    runs = pd.DataFrame({"run_id": ["habit", "conesep", "sprc"], "n_noisy": [1000, 1000, 1000]})
    judged = judge_below_chance(runs, purity).set_index("run_id")
    assert judged.below_chance.tolist() == [True, False, False]
    assert judged.loc["habit", "below_chance_reason"].startswith("kept set 39.0% clean")
    # a stored flag is kept as written; only the null ones (parts written before the flag) are judged
    stored = runs.assign(below_chance=[False, None, None], below_chance_reason=["", None, None])
    assert judge_below_chance(stored, purity).below_chance.tolist() == [False, False, False]
