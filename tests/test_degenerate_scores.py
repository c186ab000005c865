"""Evaluation never rewards a degenerate model: ties are broken uniformly at random (seeded
by the query), so a constant model gets chance within sampling; a non-finite score is a
miss (an all-NaN model gets zero, and is flagged); subset members listed twice count once;
metrics without ties are unchanged to the last digit."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from cirbench.data.registry import DATASETS
from cirbench.engine.evaluate import evaluate
from cirbench.engine.grid import Grid, GridSpec
from cirbench.engine.retrieval import rank_and_ties, recall_at, tie_break
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


def _within_sampling(value: float, p: float, n: int) -> bool:
    return abs(value - p) <= 4 * (p * (1 - p) / n) ** 0.5 + 1e-9


def test_a_constant_model_gets_chance_not_a_perfect_score() -> None:
    n, m = 4000, 50
    ranks, ties = rank_and_ties(torch.zeros(n, m), torch.arange(n) % m, keys=torch.arange(n))
    assert (ties == m - 1).all() and ranks.min() >= 0 and ranks.max() <= m - 1
    for k, value in recall_at(ranks, (1, 5, 10, 25)).items():
        assert _within_sampling(value, k / m, n), (k, value)
    counts = np.bincount(ranks.numpy(), minlength=m)  # the target's position is uniform over the tie
    assert counts.min() > 0.6 * n / m and counts.max() < 1.4 * n / m


def test_the_tie_break_depends_on_the_query_alone(cirr) -> None:
    ties = torch.tensor([0, 3, 3, 7, 1000])
    keys = torch.tensor([5, 6, 6, 8, 9])
    draw = tie_break(ties, keys)
    assert draw[0] == 0 and draw[1] == draw[2] and (draw >= 0).all() and (draw <= ties).all()
    assert torch.equal(draw, tie_break(ties, keys))
    scores = np.zeros((len(cirr.val), len(cirr.image_ids)), dtype=np.float32)
    once = _evaluate(cirr, scores)
    method = ExactScores(scores)
    chunked = evaluate(method, cirr, cirr.val, method.tokens(), method.texts(), torch.device("cpu"), chunk=2)
    pd.testing.assert_frame_equal(once.ranks, chunked.ranks)
    candidates = len(cirr.gallery["all"]) - 1  # the reference is excluded
    assert (once.ranks["ties"] == candidates - 1).all() and once.ranks["rank"].between(0, candidates - 1).all()
    assert (once.ranks["subset_ties"] == len(cirr.val.subset[0]) - 2).all()


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
        assert grid.run_cell(cell, lambda info: None, announce=lambda m: None).status == "completed"
    metrics = grid.store.read("metrics").set_index(["method", "metric"]).value
    runs = grid.store.read("runs").set_index("method")
    candidates = len(grid.dataset().gallery["all"]) - 1
    for k in (1, 5, 10, 50):
        assert _within_sampling(metrics["flat", f"recall@{k}"], min(1.0, k / candidates), len(grid.dataset().val))
        assert metrics["nans", f"recall@{k}"] == 0.0
    assert runs.loc["flat", "n_nonfinite_queries"] == 0
    assert runs.loc["nans", "n_nonfinite_queries"] == len(grid.dataset().val)
    ranks = pd.read_parquet(tmp_path / "r" / "ranks")
    assert (ranks[ranks.method == "flat"].ties == candidates - 1).all()
