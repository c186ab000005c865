"""Recall and purity on hand-computed cases, and the evaluator on a fixed score matrix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cirbench.engine.cell.recorder import purity_rows
from cirbench.engine.cell.retrieval import recall_at, subset_scores, target_ranks


def test_target_ranks_hand_computed() -> None:
    scores = torch.tensor(
        [
            [0.9, 0.1, 0.5, 0.3],  # target col 2: one higher (0.9) -> rank 1
            [0.2, 0.8, 0.1, 0.7],  # target col 1: rank 0
            [0.4, 0.4, 0.4, 0.1],  # target col 0: ties do not count against it -> rank 0
        ]
    )
    assert target_ranks(scores, torch.tensor([2, 1, 0])).tolist() == [1, 0, 0]


def test_reference_exclusion_and_missing_target() -> None:
    scores = torch.tensor([[0.9, 0.1, 0.5, 0.3], [0.2, 0.8, 0.1, 0.7]])
    # excluding column 0 (the reference) lifts query 0's target to rank 0
    ranks = target_ranks(scores, torch.tensor([2, -1]), exclude_col=torch.tensor([0, -1]))
    assert ranks.tolist() == [0, 4]  # a target not in the gallery never counts as found


def test_recall_at() -> None:
    r = recall_at(np.array([0, 1, 4, 9, 10, 60]), (1, 5, 10, 50))
    assert r == pytest.approx({1: 1 / 6, 5: 3 / 6, 10: 4 / 6, 50: 5 / 6})


def test_subset_scores_masks_padding() -> None:
    scores = torch.tensor([[0.1, 0.9, 0.3, 0.7]])
    sub = subset_scores(scores, torch.tensor([[3, 2, -1]]))
    assert sub[0, :2].tolist() == pytest.approx([0.7, 0.3]) and sub[0, 2] == float("-inf")
    assert target_ranks(sub, torch.tensor([1])).tolist() == [1]


def test_purity_counts_hand_computed() -> None:
    is_noisy = np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=bool)
    noise_type = np.array(["clean"] * 4 + ["reference", "caption", "caption", "target"], dtype=object)
    selected = np.array([1, 1, 1, 0, 0, 1, 0, 0], dtype=bool)  # keeps 3 clean + 1 caption-noisy
    score = np.array([0.1, 0.2, 0.3, 0.6, 0.9, 0.4, 0.8, 0.7])
    rows = purity_rows(selected, score, is_noisy, noise_type).set_index("noise_type")
    overall = rows.loc["all"]
    assert (overall.n_selected, overall.n_selected_clean, overall.n_selected_noisy) == (4, 3, 1)
    assert overall.purity == pytest.approx(0.75)
    assert overall.clean_recall == pytest.approx(0.75)
    assert overall.noise_recall == pytest.approx(0.75)
    # AUROC: noisy scores {0.9, 0.4, 0.8, 0.7} vs clean {0.1, 0.2, 0.3, 0.6}: 15 of 16 pairs ordered
    assert overall.auroc == pytest.approx(15 / 16)
    caption = rows.loc["caption"]
    assert (caption.n_samples, caption.n_selected, caption.noise_recall) == (2, 1, 0.5)
    assert rows.loc["reference"].noise_recall == 1.0 and rows.loc["reference"].auroc == 1.0
    assert list(rows.index) == ["all", "reference", "caption", "target"]


def test_purity_for_a_method_that_only_scores() -> None:
    is_noisy = np.array([0, 1, 0, 1], dtype=bool)
    rows = purity_rows(None, np.array([0.1, 0.9, 0.2, 0.8]), is_noisy, np.array(["clean", "caption"] * 2, dtype=object))
    assert rows.n_selected.isna().all() and rows.purity.isna().all()
    assert rows.set_index("noise_type").loc["all"].auroc == 1.0
