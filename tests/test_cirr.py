"""CIRR on a generated fixture root: loading, the official protocol against a
hand-computed ranking, submission files, checkpoints and ``cirbench predict``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from cirbench.method.checkpoint import CheckpointError, load_method, read_checkpoint
from cirbench.cli import app
from cirbench.data.datasets.cirr import HEADLINE
from cirbench.data.datasets.registry import DATASETS
from cirbench.engine.cell.evaluate import evaluate
from cirbench.engine.cell.features import image_tokens
from cirbench.plugins import discover
from cirbench.engine.tools.predict import checkpoint_method_class, rank_test_queries, write_submission
from fixtures import ScoreTableMethod, write_cirr

CIRR = DATASETS.get("cirr")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("cirr")
    return path, write_cirr(path)


@pytest.fixture(scope="module")
def dataset(root, tmp_path_factory):
    return CIRR(tmp_path_factory.mktemp("cache"), root[0])


def test_loads_splits_subsets_and_gallery(root, dataset, tmp_path) -> None:
    _, written = root
    ids = np.asarray(dataset.image_ids)
    assert dataset.train.sample_ids == [str(e["pairid"]) for e in written["train"]]
    assert dataset.val.sample_ids == [str(e["pairid"]) for e in written["val"]]
    assert sorted(ids[dataset.gallery["all"]]) == sorted(written["val_images"])
    for i, entry in enumerate(written["val"]):
        assert ids[dataset.val.reference[i]] == entry["reference"]
        assert ids[dataset.val.target[i]] == entry["target_hard"]
        assert list(ids[dataset.val.subset[i]]) == entry["img_set"]["members"]
        assert dataset.val.texts[i] == entry["caption"]
    assert dataset.protocol.describe() == "cirr:ref-excluded:R@1,5,10,50+subset@1,2,3"
    test = CIRR.load_test(tmp_path, root[0])
    assert (test.val.target == -1).all() and len(test.val) == len(written["test1"])
    assert sorted(np.asarray(test.image_ids)[test.gallery["all"]]) == sorted(written["test1_images"])


def test_recall_and_subset_recall_against_a_hand_computed_ranking(dataset) -> None:
    """Query 0: reference 9 (excluded), 3 non-members at 3, 1 member at 2, target 1 ->
    global rank 4, subset rank 1. Query 1: reference 9, 5 non-members at 2, target 1 ->
    global rank 5, subset rank 0. Every other query: target 1, the rest 0 -> rank 0."""
    val = dataset.val
    scores = np.zeros((len(val), len(dataset.image_ids)), dtype=np.float32)
    scores[np.arange(len(val)), val.target] = 1.0
    for q, (n_outside, member_above) in enumerate(((3, True), (5, False))):
        ref, target, members = val.reference[q], val.target[q], set(val.subset[q].tolist())
        scores[q, ref] = 9.0
        outside = [i for i in dataset.gallery["all"] if i not in members][:n_outside]
        scores[q, outside] = 3.0 if member_above else 2.0
        if member_above:
            scores[q, next(m for m in val.subset[q] if m not in (ref, target))] = 2.0
    method = ScoreTableMethod(scores)
    results = evaluate(method, dataset, val, method.tokens(), method.texts(), torch.device("cpu")).results
    n = len(val)
    expected = {
        "recall@1": (n - 2) / n, "recall@5": (n - 1) / n, "recall@10": 1.0, "recall@50": 1.0,
        "recall_subset@1": (n - 1) / n, "recall_subset@2": 1.0, "recall_subset@3": 1.0,
    }
    expected[HEADLINE] = (expected["recall@5"] + expected["recall_subset@1"]) / 2
    assert results == {"all": pytest.approx(expected)}


def test_submission_json_layout(root, tmp_path) -> None:
    test = CIRR.load_test(tmp_path, root[0])
    rng = np.random.default_rng(0)
    scores = rng.random((len(test.val), len(test.image_ids))).astype(np.float32)
    scores[np.arange(len(test.val)), test.val.reference] = 10.0  # the reference must never be predicted
    method = ScoreTableMethod(scores)
    submission = rank_test_queries(method, test, method.tokens(), method.texts(), torch.device("cpu"))
    ids = np.asarray(test.image_ids)
    gallery = test.gallery["all"]
    for q, pairid in enumerate(test.val.sample_ids):
        ref = test.val.reference[q]
        ranked = [i for i in gallery[np.argsort(-scores[q, gallery], kind="stable")] if i != ref]
        assert submission.recall[pairid] == list(ids[ranked[:50]])
        members = [m for m in test.val.subset[q] if m != ref]
        best = sorted(members, key=lambda m: -scores[q, m])[:3]
        assert submission.recall_subset[pairid] == list(ids[best])
    recall_path, subset_path = write_submission(submission, tmp_path / "sub", "run1")
    assert recall_path.name == "recall_submission_run1.json" and subset_path.name == "recall_subset_submission_run1.json"
    blob = json.loads(recall_path.read_text())
    assert blob["version"] == "rc2" and blob["metric"] == "recall"
    assert set(blob) - {"version", "metric"} == {str(e) for e in test.val.sample_ids}
    assert json.loads(subset_path.read_text())["metric"] == "recall_subset"


def test_cli_run_save_reload_and_predict(root, tmp_path) -> None:
    out, cache = tmp_path / "results", tmp_path / "cache"
    runner = CliRunner()
    result = runner.invoke(app, [
        "run", "--dataset", "cirr", "--data-root", str(root[0]), "--methods", "sprc", "--noise", "0.2",
        "--epochs", "1", "--batch-size", "4", "--output", str(out), "--cache-dir", str(cache), "--save",
    ])
    assert result.exit_code == 0, result.output
    metrics = pd.read_parquet(out / "metrics")
    assert set(metrics.metric) == {"recall@1", "recall@5", "recall@10", "recall@50", "recall_subset@1",
                                   "recall_subset@2", "recall_subset@3", HEADLINE}
    assert set(metrics.eval_protocol) == {"cirr:ref-excluded:R@1,5,10,50+subset@1,2,3"}
    runs = pd.read_parquet(out / "runs")
    checkpoint = Path(runs.checkpoint_path.iloc[0])
    assert checkpoint == out / "checkpoints" / f"{runs.run_id.iloc[0]}.pt"

    # the reloaded method reproduces the run's final validation metrics exactly
    meta, state = read_checkpoint(checkpoint)
    assert meta["method"] == "sprc" and not any(k.startswith("backbone.tower.") for k in state)
    method_cls = discover().methods.get("sprc")
    loaded = load_method(checkpoint, method_cls, cache, torch.device("cpu")).method
    data = CIRR(cache, root[0])
    tokens = image_tokens(data, loaded.backbone, cache)
    again = evaluate(loaded, data, data.val, tokens, loaded.backbone.tokenize(data.val.texts), torch.device("cpu")).results
    stored = metrics[metrics.method == "sprc"].set_index("metric").value.to_dict()
    assert again["all"] == pytest.approx(stored)

    result = runner.invoke(app, ["predict", runs.run_id.iloc[0], "--results", str(out), "--cache-dir", str(cache)])
    assert result.exit_code == 0, result.output
    folder = out / "predictions" / runs.run_id.iloc[0]
    recall = json.loads((folder / f"recall_submission_{runs.run_id.iloc[0]}.json").read_text())
    subset = json.loads((folder / f"recall_subset_submission_{runs.run_id.iloc[0]}.json").read_text())
    pairids = {str(e["pairid"]) for e in root[1]["test1"]}
    assert set(recall) == pairids | {"version", "metric"} and set(subset) == pairids | {"version", "metric"}
    assert all(len(v) == 11 for k, v in recall.items() if k in pairids)  # 12 test1 images minus the reference
    assert all(len(v) == 3 for k, v in subset.items() if k in pairids)


def test_a_kept_set_cells_checkpoint_reloads_and_predicts(root, tmp_path) -> None:
    """A frontier cell's checkpoint (the perfect filter's model under the cell's label) is
    rebuilt by ``cirbench predict`` and reproduces the cell's stored validation metrics."""
    out, cache = tmp_path / "results", tmp_path / "cache"
    runner = CliRunner()
    result = runner.invoke(app, [
        "run", "--dataset", "cirr", "--data-root", str(root[0]), "--methods", "sprc", "--noise", "0.5", "--frontier-purity", "0.8",
        "--epochs", "1", "--batch-size", "4", "--output", str(out), "--cache-dir", str(cache), "--save",
    ])
    assert result.exit_code == 0, result.output
    runs = pd.read_parquet(out / "runs").set_index("method")
    run_id = runs.loc["frontier:p0.8", "run_id"]
    result = runner.invoke(app, ["predict", run_id, "--results", str(out), "--cache-dir", str(cache)])
    assert result.exit_code == 0, result.output
    recall = json.loads((out / "predictions" / run_id / f"recall_submission_{run_id}.json").read_text())
    assert set(recall) == {str(e["pairid"]) for e in root[1]["test1"]} | {"version", "metric"}

    meta, _ = read_checkpoint(Path(runs.loc["frontier:p0.8", "checkpoint_path"]))
    loaded = load_method(Path(runs.loc["frontier:p0.8", "checkpoint_path"]), checkpoint_method_class(Path("x"), meta, discover()),
                         cache, torch.device("cpu")).method
    data = CIRR(cache, root[0])
    again = evaluate(loaded, data, data.val, image_tokens(data, loaded.backbone, cache),
                     loaded.backbone.tokenize(data.val.texts), torch.device("cpu")).results
    metrics = pd.read_parquet(out / "metrics")
    stored = metrics[(metrics.run_id == run_id) & (metrics.split == "val")]
    stored = stored[stored.epoch == stored.epoch.max()].set_index("metric").value.to_dict()
    assert again["all"] == pytest.approx(stored)


def test_checkpoint_refuses_pickles_and_mismatches(tmp_path) -> None:
    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))

    evil = tmp_path / "evil.pt"
    torch.save({"format": "cirbench-checkpoint-1", "metadata": Payload()}, evil)
    with pytest.raises(CheckpointError, match="not a readable"):
        read_checkpoint(evil)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(CheckpointError, match="not a cirbench checkpoint"):
        read_checkpoint(foreign)
    with pytest.raises(CheckpointError, match="not found"):
        read_checkpoint(tmp_path / "absent.pt")
    result = CliRunner().invoke(app, ["predict", "nothing-here", "--results", str(tmp_path)])
    assert result.exit_code == 2 and "--save" in result.output
