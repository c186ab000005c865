"""The ``release`` noise protocol against the releases' algorithm, on fixture roots in the
releases' formats. The expected instance is computed here, in the test, by a small
re-statement of the releases' ``shuffle()`` that moves the JSON values themselves (module
``random`` seeded with 42, ``random.sample``, thirds, ``random.shuffle``, FashionIQ's
``.pop()`` and CIRR's positional write-back), independent of the protocol's own code."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import numpy as np
import pytest

from cirbench.data.datasets.fashioniq import join_captions
from cirbench.data.noise.injection import NOISE_PROTOCOLS, inject_noise
from cirbench.data.datasets.registry import DATASETS
from cirbench.data.noise.release import ReleaseProtocol, release_moves
from cirbench.engine.tools.conformance import noise_problems
from fixtures import FIQ_CATEGORIES, write_cirr, write_fashioniq

FIELDS = {"fashioniq": ("candidate", "captions", "target"), "cirr": ("reference", "caption", "target_hard")}


def releases_shuffle(triplets: list[dict], rate: float, dataset: str) -> tuple[list[dict], set[int]]:
    """The releases' shuffle on a copy of ``triplets`` after ``random.seed(42)``: the noisy
    triplets and the drawn positions."""
    random.seed(42)
    out = copy.deepcopy(triplets)
    drawn = random.sample(range(len(out)), int(rate * len(out)))
    cut1, cut2 = int(len(drawn) * (1 / 3)), int(len(drawn) * (2 / 3))
    for positions, field in zip((drawn[:cut1], drawn[cut1:cut2], drawn[cut2:]), FIELDS[dataset]):
        values = [out[i][field] for i in positions]
        random.shuffle(values)
        for k, i in enumerate(positions):
            out[i][field] = values.pop() if dataset == "fashioniq" else values[k]
    return out, set(drawn)


def _entries(root: Path, dataset: str) -> list[dict]:
    files = [f"cap.{c}.train.json" for c in FIQ_CATEGORIES] if dataset == "fashioniq" else ["cap.rc2.train.json"]
    return [e for name in files for e in json.loads((root / "captions" / name).read_text())]


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    fiq, cirr = tmp_path_factory.mktemp("fiq"), tmp_path_factory.mktemp("cirr")
    write_fashioniq(fiq, n_train_images=12, n_train=20, n_val=4)
    write_cirr(cirr, n_train_sets=30, n_val_sets=2, n_test_sets=1)
    return {"fashioniq": fiq, "cirr": cirr}


@pytest.fixture(scope="module")
def datasets(roots: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    cache = tmp_path_factory.mktemp("cache")
    return {name: DATASETS.get(name)(cache, root) for name, root in roots.items()}


@pytest.mark.parametrize("name", ["fashioniq", "cirr"])
@pytest.mark.parametrize("rate", [0.2, 0.5, 0.8])
def test_release_protocol_gives_the_releases_noisy_triplets(name: str, rate: float, roots: dict, datasets: dict) -> None:
    original = _entries(roots[name], name)
    expected, drawn = releases_shuffle(original, rate, name)
    split, manifest = inject_noise(datasets[name], "release", rate, seed=3)  # the cell's seed does not matter
    table = manifest.table
    text = (lambda e: join_captions(*e["captions"])) if name == "fashioniq" else (lambda e: e["caption"])
    ref, _, target = FIELDS[name]
    assert len(table) == len(original)
    assert table.reference_id.tolist() == [e[ref] for e in expected]
    assert split.texts == [text(e) for e in expected]
    assert table.target_id.tolist() == [e[target] for e in expected]
    changed = [e != o for e, o in zip(expected, original)]
    assert table.is_noisy.tolist() == changed  # a value landing back on its own sample stays clean
    assert set(np.flatnonzero(table.is_noisy.to_numpy())) <= drawn
    assert len(drawn) == int(rate * len(original)) and 0 < sum(changed) <= len(drawn)


def test_the_instance_is_the_shuffle_seeds_whatever_the_cells_seed(datasets: dict) -> None:
    hashes = {inject_noise(datasets["cirr"], "release", 0.5, seed)[1].hash for seed in (0, 1, 7)}
    assert len(hashes) == 1

    class Seven(ReleaseProtocol):
        shuffle_seed = 7

    a = release_moves(60, 0.5, 42, "position")
    b = release_moves(60, 0.5, Seven.shuffle_seed, "position")
    assert not np.array_equal(a.drawn, b.drawn)


def test_the_write_back_orders_differ_only_in_the_direction() -> None:
    pop, position = release_moves(90, 0.5, 42, "pop"), release_moves(90, 0.5, 42, "position")
    for part in ("reference", "caption", "target"):
        assert np.array_equal(pop.positions[part], position.positions[part])
        assert np.array_equal(pop.sources[part], position.sources[part][::-1])


def test_release_protocol_conforms_on_a_release_dataset(datasets: dict) -> None:
    assert noise_problems(NOISE_PROTOCOLS.get("release"), datasets["fashioniq"]) == []


def test_release_protocol_is_refused_on_the_synthetic_dataset(cache_dir: Path) -> None:
    shapes = DATASETS.get("shapes-mini")(cache_dir, None)
    with pytest.raises(ValueError, match="no release order to follow") as info:
        inject_noise(shapes, "release", 0.5, 0)
    assert "\n" not in str(info.value)


def test_release_protocol_is_refused_when_an_entry_is_left_out(roots: dict, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "fiq"
    shutil.copytree(roots["fashioniq"], root)
    first = _entries(root, "fashioniq")[0]["candidate"]
    for image in (root / "images").glob(f"{first}.*"):
        image.unlink()
    dataset = DATASETS.get("fashioniq")(tmp_path / "cache", root, allow_missing=True)
    with pytest.raises(ValueError, match=r"training entries were left out \(first: dress-train-00000"):
        inject_noise(dataset, "release", 0.5, 0)


def test_release_protocol_is_refused_on_a_subset_of_categories(roots: dict, tmp_path: Path) -> None:
    dataset = DATASETS.get("fashioniq")(tmp_path, roots["fashioniq"], {"categories": "dress,shirt"})
    with pytest.raises(ValueError, match="categories=dress,shirt: the release draws over all three"):
        inject_noise(dataset, "release", 0.2, 0)
