"""Evaluation never rewards a degenerate model: a tie counts at its expected value under a
random tie-break (a constant model gets chance), a non-finite score is a miss (an all-NaN
model gets zero, and is flagged), subset members listed twice count once, and metrics
without ties are unchanged to the last digit."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from cirbench.data.datasets.registry import DATASETS
from cirbench.engine.cell.life import run_cell
from cirbench.engine.cell.evaluate import evaluate
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.engine.cell.retrieval import hit_probability, rank_and_ties, recall_at, target_ranks
from fixtures import ScoreTableMethod, write_cirr


@pytest.fixture(scope="module")
def cirr(tmp_path_factory):
    root = tmp_path_factory.mktemp("cirr")
    write_cirr(root)
    return DATASETS.get("cirr")(tmp_path_factory.mktemp("cache"), root)


class ExactScores(ScoreTableMethod):
    """The score table's columns picked, not multiplied (a NaN stays in its own cell)."""

    def similarity(self, queries: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return queries[:, targets.argmax(dim=1)]


def _evaluate(dataset, scores: np.ndarray):
    method = ExactScores(scores)
    return evaluate(method, dataset, dataset.val, method.tokens(), method.texts(), torch.device("cpu"))


def _strict_ranks(scores: torch.Tensor, target: torch.Tensor, exclude: torch.Tensor) -> torch.Tensor:
    """The rank before ties and non-finite scores were handled: columns strictly above."""
    scores = scores.clone()
    rows = torch.arange(len(scores))
    scores[rows[exclude >= 0], exclude[exclude >= 0]] = float("-inf")
    return (scores > scores[rows, target][:, None]).sum(dim=1)


def test_a_constant_model_gets_chance_not_a_perfect_score(cirr) -> None:
    evaluation = _evaluate(cirr, np.zeros((len(cirr.val), len(cirr.image_ids)), dtype=np.float32))
    candidates = len(cirr.gallery["all"]) - 1  # the reference is excluded
    members = len(cirr.val.subset[0]) - 1
    results = evaluation.results["all"]
    for k in (1, 5, 10):
        assert results[f"recall@{k}"] == pytest.approx(k / candidates)
    assert results["recall@50"] == 1.0
    for k in (1, 2, 3):
        assert results[f"recall_subset@{k}"] == pytest.approx(k / members)
    assert (evaluation.ranks["rank"] == 0).all() and (evaluation.ranks["ties"] == candidates - 1).all()
    assert evaluation.n_nonfinite_queries == 0


def test_ties_count_as_a_uniformly_random_tie_break_would_within_sampling() -> None:
    rng = np.random.default_rng(0)
    scores = torch.from_numpy(rng.integers(0, 4, size=(300, 40)).astype(np.float32))  # many ties
    target = torch.from_numpy(rng.integers(0, 40, size=300))
    ranks, ties = rank_and_ties(scores, target)
    expected = recall_at(ranks, (1, 5, 10), ties)
    draws = 400
    simulated = {k: 0.0 for k in (1, 5, 10)}
    for _ in range(draws):  # break ties by a random permutation of the columns, then rank strictly
        order = torch.from_numpy(rng.permutation(40))
        jitter = torch.empty(40)
        jitter[order] = torch.arange(40, dtype=torch.float32) * 1e-3  # below the score spacing of 1
        strict = target_ranks(scores + jitter, target)
        for k in simulated:
            simulated[k] += float((strict < k).float().mean()) / draws
    for k in simulated:
        assert simulated[k] == pytest.approx(expected[k], abs=0.01)
    assert hit_probability(np.array([0, 3, 9]), np.array([9, 0, 0]), 5).tolist() == [0.5, 1.0, 0.0]


def test_an_all_nan_model_gets_zero_and_is_flagged(cirr) -> None:
    evaluation = _evaluate(cirr, np.full((len(cirr.val), len(cirr.image_ids)), np.nan, dtype=np.float32))
    size = len(cirr.gallery["all"])  # a NaN target ranks last, rank M: a miss at every K up to the gallery's size
    recalls = {k: v for k, v in evaluation.results["all"].items() if k.startswith("recall") and int(k.split("@")[1]) <= size}
    assert len(recalls) == 6 and all(v == 0.0 for v in recalls.values())
    assert (evaluation.ranks["rank"] == size).all() and (evaluation.ranks["ties"] == 0).all()
    assert evaluation.n_nonfinite_queries == len(cirr.val)


def test_a_nan_target_is_a_miss_and_nan_elsewhere_never_ranks_above(cirr) -> None:
    val = cirr.val
    rows = np.arange(len(val))
    scores = np.random.default_rng(1).random((len(val), len(cirr.image_ids))).astype(np.float32)
    scores[rows, val.target] = 2.0  # every target first
    scores[0, val.target[0]] = np.nan  # query 0: its target is NaN
    scores[1, :] = np.nan
    scores[1, val.target[1]] = 1.0  # query 1: everything else is NaN
    scores[2, val.reference[2]] = np.inf  # query 2: an infinite score, never above the target
    evaluation = _evaluate(cirr, scores)
    ranks = evaluation.ranks.set_index("query")
    assert ranks.loc[0, "rank"] == len(cirr.gallery["all"]) and ranks.loc[1, "rank"] == 0 and ranks.loc[2, "rank"] == 0
    assert evaluation.results["all"]["recall@1"] == pytest.approx((len(val) - 1) / len(val))
    assert evaluation.n_nonfinite_queries == 3


def test_metrics_without_ties_are_unchanged_to_the_last_digit(cirr) -> None:
    scores = np.random.default_rng(2).random((len(cirr.val), len(cirr.image_ids))).astype(np.float32)
    evaluation = _evaluate(cirr, scores)
    columns = {int(image): col for col, image in enumerate(cirr.gallery["all"])}
    table = torch.from_numpy(scores)[:, torch.as_tensor(cirr.gallery["all"])]
    target = torch.tensor([columns[int(t)] for t in cirr.val.target])
    exclude = torch.tensor([columns[int(r)] for r in cirr.val.reference])
    strict = _strict_ranks(table, target, exclude)
    assert evaluation.ranks["rank"].tolist() == strict.tolist() and (evaluation.ranks["ties"] == 0).all()
    for k in (1, 5, 10, 50):
        assert evaluation.results["all"][f"recall@{k}"] == float((strict < k).float().mean())  # exactly


def test_a_subset_member_listed_twice_counts_once(cirr) -> None:
    val = cirr.val
    scores = np.zeros((len(val), len(cirr.image_ids)), dtype=np.float32)
    scores[np.arange(len(val)), val.target] = 1.0
    above = next(m for m in val.subset[0] if m not in (val.reference[0], val.target[0]))
    scores[0, above] = 2.0  # one member above query 0's target
    original = [s.copy() for s in val.subset]
    try:
        val.subset[0] = np.concatenate([val.subset[0], [above]])  # listed twice
        evaluation = _evaluate(cirr, scores)
    finally:
        val.subset[:] = original
    assert evaluation.ranks.set_index("query").loc[0, "subset_rank"] == 1  # not 2
    assert evaluation.results["all"]["recall_subset@2"] == 1.0


DEGENERATE = '''
    import torch

    from cirbench_methods.sprc import SPRC


    class Flat(SPRC):
        """sprc whose retrieval scores are all equal (a collapsed model)."""

        name = "flat"

        def similarity(self, queries, targets):
            return torch.zeros(queries.shape[0], targets.shape[0])


    class NaNs(SPRC):
        """sprc whose retrieval scores are all NaN."""

        name = "nans"

        def similarity(self, queries, targets):
            return torch.full((queries.shape[0], targets.shape[0]), float("nan"))
'''


def test_degenerate_models_end_to_end(tmp_path: Path, cache_dir: Path) -> None:
    plugin = tmp_path / "degenerate.py"
    plugin.write_text(textwrap.dedent(DEGENERATE))
    grid = Grid(GridSpec(methods=["flat", "nans"], noise_rates=[0.0], dataset="shapes-mini", epochs=1, batch_size=64,
                         output=tmp_path / "r", cache_dir=cache_dir, plugin_files=[plugin]))
    for cell in grid.cells:
        assert run_cell(grid.resources, cell, lambda info: None, announce=lambda m: None).status == "completed"
    metrics = grid.store.read("metrics").set_index(["method", "metric"]).value
    runs = grid.store.read("runs").set_index("method")
    candidates = len(grid.resources.dataset().gallery["all"]) - 1
    for k in (1, 5, 10, 50):
        assert metrics["flat", f"recall@{k}"] == pytest.approx(k / candidates, rel=1e-5)
        assert metrics["nans", f"recall@{k}"] == 0.0
    assert runs.loc["flat", "n_nonfinite_queries"] == 0
    assert runs.loc["nans", "n_nonfinite_queries"] == len(grid.resources.dataset().val)
    ranks = pd.read_parquet(tmp_path / "r" / "ranks")
    assert (ranks[ranks.method == "flat"].ties == candidates - 1).all()
