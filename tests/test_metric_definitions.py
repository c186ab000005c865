"""Each metric and the headline defined once (:mod:`cirbench.results.metrics`): the evaluator's
names, a dataset's stored average, the report's column and the bootstrap's terms all follow
the one definition of each average."""

from __future__ import annotations

import pandas as pd
import pytest

from cirbench.data.datasets import cirr

from cirbench.data.datasets import fashioniq
from cirbench.report.analysis.statistics.bootstrap import rank_terms
from cirbench.results.headline import headline_column, wide_columns
from cirbench.results.metrics import AVERAGES, CIRR_AVERAGE, FASHIONIQ_AVERAGE, RECALL, RECALL_NAME, metric_label, recall_name


def _frame(results: dict[str, dict[str, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"run_id": "a", "group": g, "metric": m, "value": v} for g, values in results.items()
                         for m, v in values.items()])


def test_the_evaluators_names_read_back() -> None:
    assert RECALL_NAME.fullmatch(recall_name(10)).group("k") == "10" and recall_name(1, subset=True) == "recall_subset@1"
    assert metric_label(recall_name(1, subset=True)) == "R_sub@1" and metric_label(RECALL) == "R@10"
    assert all(RECALL_NAME.fullmatch(part) for average in AVERAGES for part in average.parts)


def test_a_datasets_stored_average_is_the_reports_column() -> None:
    clean = {"recall@1": 0.1, "recall@5": 0.35, "recall@10": 0.5, "recall@50": 0.9, "recall_subset@1": 0.62}
    results = {"all": clean}
    results.update(cirr.summarize(results))
    assert results["all"][CIRR_AVERAGE.stored] == pytest.approx((0.35 + 0.62) / 2)
    wide = wide_columns(_frame(results), ["run_id"])
    assert wide.loc["a", CIRR_AVERAGE.column] == pytest.approx(100 * results["all"][CIRR_AVERAGE.stored])
    assert headline_column(list(wide.columns)) == CIRR_AVERAGE.column
    categories = {c: {"recall@10": 0.1 * (i + 1), "recall@50": 0.2 * (i + 2)} for i, c in enumerate(fashioniq.CATEGORIES)}
    stored = fashioniq.summarize(categories)
    wide = wide_columns(_frame({**categories, **stored}), ["run_id"])
    (group, values), = stored.items()
    assert wide.loc["a", FASHIONIQ_AVERAGE.column] == pytest.approx(100 * values[FASHIONIQ_AVERAGE.stored])
    assert [wide.loc["a", FASHIONIQ_AVERAGE.part_column(p)] for p in FASHIONIQ_AVERAGE.parts] == pytest.approx(
        [100 * values[p] for p in FASHIONIQ_AVERAGE.parts])
    assert headline_column(list(wide.columns)) == FASHIONIQ_AVERAGE.column


@pytest.mark.parametrize("average", AVERAGES, ids=lambda a: a.column)
def test_the_bootstrap_weighs_each_part_of_an_average_as_defined(average) -> None:
    groups = ["dress", "shirt"] if average.over_categories else ["all"]
    metrics = pd.DataFrame([{"group": g, "metric": m} for g in groups for m in average.parts])
    terms = rank_terms(average.column, metrics)
    assert sum(t.weight for t in terms) == pytest.approx(1.0) and len(terms) == len(groups) * len(average.parts)
    assert {(t.column == "subset_rank", t.k) for t in terms} == {
        (bool(RECALL_NAME.fullmatch(p).group("subset")), int(RECALL_NAME.fullmatch(p).group("k"))) for p in average.parts}
