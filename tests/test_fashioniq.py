"""FashionIQ on a generated fixture root in the release's exact layout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from cirbench.cli import app
from cirbench.settings.config import ConfigError
from cirbench.data.datasets.fashioniq import caption_variant, join_captions, summarize
from cirbench.data.datasets.registry import DATASETS
from cirbench.engine.cell.evaluate import evaluate
from cirbench.engine.running.grid import Grid, GridError, GridSpec
from fixtures import FIQ_CATEGORIES, ScoreTableMethod, write_fashioniq

FIQ = DATASETS.get("fashioniq")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("fiq")
    return path, write_fashioniq(path)


@pytest.fixture(scope="module")
def dataset(root, tmp_path_factory):
    return FIQ(tmp_path_factory.mktemp("cache"), root[0])


def test_caption_join_follows_clip4cir() -> None:
    assert join_captions(" is Solid BLACK.", "has straps?") == "Is solid black and has straps"
    pair = ("is red.", " has dots ")
    assert [caption_variant(pair, v) for v in range(4)] == [
        "Is red and has dots", "Has dots and is red", "Is red", "Has dots",
    ]


def test_loads_every_category_with_its_own_gallery(root, dataset) -> None:
    path, written = root
    assert len(dataset.train) == 3 * 8 and len(dataset.val) == 3 * 6
    assert sorted(dataset.gallery) == sorted(FIQ_CATEGORIES)
    ids = np.asarray(dataset.image_ids)
    for cat in FIQ_CATEGORIES:
        assert sorted(ids[dataset.gallery[cat]]) == sorted(written[cat]["val_names"])
        rows = [i for i, g in enumerate(dataset.val.groups) if g == cat]
        entries = written[cat]["val_captions"]
        assert [dataset.val.texts[i] for i in rows] == [join_captions(*e["captions"]) for e in entries]
        assert list(ids[dataset.val.reference[rows]]) == [e["candidate"] for e in entries]
        assert list(ids[dataset.val.target[rows]]) == [e["target"] for e in entries]
    # .png and .jpg are detected per file, and toptee lives under resized_image/toptee/
    paths = [str(p) for p in dataset.images.paths]
    assert any(p.endswith(".jpg") for p in paths) and any(p.endswith(".png") for p in paths)
    assert all("resized_image/toptee" in p for p, name in zip(paths, dataset.image_ids) if name.startswith("B2"))
    assert dataset.images.load(0).shape == (224, 224, 3)
    assert dataset.train.texts[0] == join_captions(*written["dress"]["train_captions"][0]["captions"])


def test_options_categories_captions_reference_size(root, tmp_path) -> None:
    path, written = root
    dress = FIQ(tmp_path, path, options={"categories": "dress", "reference": "keep", "image_size": "0"})
    assert set(dress.val.groups) == {"dress"} and list(dress.gallery) == ["dress"]
    assert dress.protocol.describe() == "fashioniq:ref-kept:R@10,50"
    assert dress.images.load(0).shape[:2] != (224, 224)  # native size
    random_a = FIQ(tmp_path, path, options={"train_captions": "random", "caption_seed": "1"})
    random_b = FIQ(tmp_path, path, options={"train_captions": "random", "caption_seed": "1"})
    random_c = FIQ(tmp_path, path, options={"train_captions": "random", "caption_seed": "2"})
    assert random_a.train.texts == random_b.train.texts != random_c.train.texts
    pairs = [tuple(e["captions"]) for cat in FIQ_CATEGORIES for e in written[cat]["train_captions"]]
    assert all(t in {caption_variant(p, v) for v in range(4)} for t, p in zip(random_a.train.texts, pairs))
    assert random_a.key != random_c.key
    assert random_a.val.texts == FIQ(tmp_path, path).val.texts  # validation is always joined
    with pytest.raises(ConfigError, match="categories"):
        FIQ(tmp_path, path, options={"categories": "dress,skirt"})
    with pytest.raises(ConfigError, match="valid options"):
        FIQ(tmp_path, path, options={"colour": "red"})


def test_dataset_key_is_stable_and_content_sensitive(root, tmp_path) -> None:
    path, _ = root
    first = FIQ(tmp_path, path)
    assert FIQ(tmp_path, path).key == first.key
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(path, copy)
    caps = json.loads((copy / "captions/cap.shirt.val.json").read_text())
    caps[0]["captions"][0] = "is completely different"
    (copy / "captions/cap.shirt.val.json").write_text(json.dumps(caps))
    assert FIQ(tmp_path, copy).key != first.key


def _hand_scores(dataset) -> tuple[np.ndarray, int]:
    """Targets score 1 and everything else 0, except: dress query 0 has its reference at 5
    and 9 other dress images at 2 (rank 9 with the reference excluded, 10 with it kept);
    dress query 1 has every shirt image at 5 (another gallery: no effect); shirt query 0 has
    10 other shirt images at 2 (rank 10 either way)."""
    val, n_images = dataset.val, len(dataset.image_ids)
    scores = np.zeros((len(val), n_images), dtype=np.float32)
    scores[np.arange(len(val)), val.target] = 1.0
    groups = np.asarray(val.groups)
    d0, d1 = np.flatnonzero(groups == "dress")[:2]
    s0 = np.flatnonzero(groups == "shirt")[0]
    others = [i for i in dataset.gallery["dress"] if i not in (val.reference[d0], val.target[d0])][:9]
    scores[d0, val.reference[d0]] = 5.0
    scores[d0, others] = 2.0
    scores[d1, dataset.gallery["shirt"]] = 5.0
    others = [i for i in dataset.gallery["shirt"] if i not in (val.reference[s0], val.target[s0])][:10]
    scores[s0, others] = 2.0
    return scores, n_images


@pytest.mark.parametrize("reference", ["exclude", "keep"])
def test_recall_per_category_against_a_hand_computed_ranking(root, tmp_path, reference) -> None:
    data = FIQ(tmp_path, root[0], options={"reference": reference})
    scores, _ = _hand_scores(data)
    method = ScoreTableMethod(scores)
    results = evaluate(method, data, data.val, method.tokens(), method.texts(), torch.device("cpu")).results
    dress_r10 = 1.0 if reference == "exclude" else 5 / 6
    expected = {"dress": dress_r10, "shirt": 5 / 6, "toptee": 1.0}
    for cat, r10 in expected.items():
        assert results[cat] == pytest.approx({"recall@10": r10, "recall@50": 1.0})
    avg10 = sum(expected.values()) / 3
    assert results["average"] == pytest.approx(
        {"recall@10": avg10, "recall@50": 1.0, "mean(recall@10,recall@50)": (avg10 + 1.0) / 2}
    )
    assert summarize({"dress": {"recall@10": 0.2, "recall@50": 0.6}})["average"]["mean(recall@10,recall@50)"] == pytest.approx(0.4)


def test_grid_records_dataset_options(root, tmp_path) -> None:
    spec = GridSpec(methods=["sprc"], noise_rates=[0.0], dataset="fashioniq", data_root=root[0],
                    dataset_options={"reference": "keep"}, output=tmp_path)
    plain = GridSpec(methods=["sprc"], noise_rates=[0.0], dataset="fashioniq", data_root=root[0], output=tmp_path)
    keyed, default = Grid(spec).cells[0].key, Grid(plain).cells[0].key
    assert keyed.dataset == "fashioniq[reference=keep]" and default.dataset == "fashioniq"
    assert keyed.run_id != default.run_id
    with pytest.raises(GridError, match="unknown option"):
        Grid(GridSpec(methods=["sprc"], noise_rates=[0.0], dataset="fashioniq", dataset_options={"x": "1"}))
    with pytest.raises(GridError, match="no --dataset-option"):
        Grid(GridSpec(methods=["sprc"], noise_rates=[0.0], dataset="shapes-mini", dataset_options={"x": "1"}))


def test_cli_run_end_to_end_with_hard_noise(root, tmp_path) -> None:
    out = tmp_path / "results"
    result = CliRunner().invoke(app, [
        "run", "--dataset", "fashioniq", "--data-root", str(root[0]), "--methods", "sprc", "--noise", "0.5",
        "--noise-protocol", "hard", "--epochs", "1", "--batch-size", "8", "--output", str(out),
        "--cache-dir", str(tmp_path / "cache"),
    ])
    assert result.exit_code == 0, result.output
    metrics = pd.read_parquet(out / "metrics")
    assert set(metrics.group) == {"dress", "shirt", "toptee", "average"}
    assert set(metrics.metric[metrics.group == "dress"]) == {"recall@10", "recall@50"}
    assert "mean(recall@10,recall@50)" in set(metrics.metric[metrics.group == "average"])
    assert set(metrics.eval_protocol) == {"fashioniq:ref-excluded:R@10,50"}
    runs = pd.read_parquet(out / "runs")
    runs = runs[~runs.is_reference]  # the reference rows of the starting model come with every grid
    assert runs.status.tolist() == ["completed"] and runs.n_dropped.tolist() == [0]
    assert runs.n_noisy.tolist() == [12] and runs.eval_protocol.tolist() == ["fashioniq:ref-excluded:R@10,50"]
    manifest = pd.read_parquet(runs.noise_manifest_path.iloc[0])
    assert set(manifest.noise_type[manifest.is_noisy]) == {"caption"}
