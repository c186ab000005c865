"""Tests for the embedded synthetic benchmark ``shapes``."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cirbench.data.datasets import shapes
from cirbench.data.datasets.shapes import (
    SHAPES_COLOURS,
    SHAPES_SHAPES,
    ShapesParams,
    caption_scene,
    generate_shapes,
    load_shapes,
    random_scenes,
    render_scenes,
)

SMALL = ShapesParams(seed=3, n_train_scenes=60, n_val_scenes=20, mods_per_scene=2, val_family_size=8, subset_size=4)
REPO = Path(__file__).resolve().parents[1]


def _digest(pixels: np.ndarray, ids: list[str], meta: dict) -> str:
    h = hashlib.sha256(pixels.tobytes())
    h.update(json.dumps([ids, meta], sort_keys=True).encode())
    return h.hexdigest()


@pytest.fixture(scope="module")
def small() -> tuple[np.ndarray, list[str], dict]:
    return generate_shapes(SMALL)


def _scene(meta: dict, index: int) -> set[tuple[int, ...]]:
    return {tuple(o) for o in meta["scenes"][index]}


def test_deterministic_in_process_and_seed_sensitive(small) -> None:
    pixels, ids, meta = small
    again = generate_shapes(SMALL)
    assert _digest(pixels, ids, meta) == _digest(*again)
    other = generate_shapes(ShapesParams(seed=4, n_train_scenes=60, n_val_scenes=20))
    assert not np.array_equal(pixels, other[0])
    assert meta["train"]["texts"] != other[2]["train"]["texts"]


def test_deterministic_across_processes(small) -> None:
    code = (
        "import hashlib, json\n"
        "from cirbench.data.datasets.shapes import ShapesParams, generate_shapes\n"
        "p, ids, meta = generate_shapes(ShapesParams(seed=3, n_train_scenes=60, n_val_scenes=20, mods_per_scene=2,"
        " val_family_size=8, subset_size=4))\n"
        "h = hashlib.sha256(p.tobytes()); h.update(json.dumps([ids, meta], sort_keys=True).encode())\n"
        "print(h.hexdigest())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == _digest(*small)


def test_sizes_splits_and_gallery(small) -> None:
    pixels, ids, meta = small
    p = SMALL
    n_images = p.n_train_scenes * (1 + p.mods_per_scene) + p.n_val_scenes * (1 + p.val_family_size)
    assert pixels.shape == (n_images, 32, 32, 3)
    assert pixels.dtype == np.uint8 and len(ids) == len(pixels) == len(set(ids))
    assert ids[7] == "shapes-img-000007"
    train, val = meta["train"], meta["val"]
    assert len(train["sample_ids"]) == p.n_train_scenes * p.mods_per_scene
    assert len(val["sample_ids"]) == p.n_val_scenes * p.val_family_size
    assert train["sample_ids"][0] == "shapes-train-000000" and val["sample_ids"][5] == "shapes-val-000005"
    for split, mods in ((train, p.mods_per_scene), (val, p.val_family_size)):
        assert all(r != t for r, t in zip(split["reference"], split["target"]))
        # each base scene gets `mods` modifications with distinct targets, of distinct kinds while kinds remain
        for ref in set(split["reference"]):
            kinds = [k for r, k in zip(split["reference"], split["modification"]) if r == ref]
            targets = [t for r, t in zip(split["reference"], split["target"]) if r == ref]
            assert len(kinds) == mods == len(set(targets))
            assert len(set(kinds)) == min(mods, len(set(kinds))) and len(set(kinds)) >= min(mods, 4)

    train_bases = {frozenset(_scene(meta, r)) for r in train["reference"]}
    val_bases = {frozenset(_scene(meta, r)) for r in val["reference"]}
    assert len(train_bases) == p.n_train_scenes and len(val_bases) == p.n_val_scenes
    assert not train_bases & val_bases
    train_images = set(train["reference"]) | set(train["target"])
    val_images = set(val["reference"]) | set(val["target"])
    assert not train_images & val_images
    assert set(meta["gallery"]) == val_images


def test_validation_families_and_subsets(small) -> None:
    """Every validation target competes with its siblings (the other edits of its reference),
    and its subset is the target plus ``subset_size - 1`` of them."""
    _, _, meta = small
    val = meta["val"]
    family = {}
    for ref, tgt in zip(val["reference"], val["target"]):
        family.setdefault(ref, set()).add(tgt)
    for ref, tgt, subset in zip(val["reference"], val["target"], val["subset"]):
        assert len(subset) == SMALL.subset_size == len(set(subset))
        assert tgt in subset and set(subset) <= family[ref]
        assert ref not in subset
    assert all(len(f) == SMALL.val_family_size for f in family.values())
    assert set().union(*family.values()) <= set(meta["gallery"])


def test_texts_non_empty_and_varied(small) -> None:
    texts = small[2]["train"]["texts"] + small[2]["val"]["texts"]
    assert all(t.strip() for t in texts)
    assert len(set(texts)) > 0.9 * len(texts)
    openings = {" ".join(t.split()[:2]) for t in texts}
    assert len(openings) >= 20
    assert set(small[2]["train"]["modification"]) == {"add", "remove", "colour", "shape", "size", "move"}


def test_scenes_valid(small) -> None:
    for scene in small[2]["scenes"]:
        assert 2 <= len(scene) <= 4
        assert len({o[3] for o in scene}) == len(scene)
        assert len({(o[0], o[1]) for o in scene}) == len(scene)


def test_modifications_are_semantically_right(small) -> None:
    meta = small[2]
    for split in (meta["train"], meta["val"]):
        for ref, tgt, kind, text in zip(split["reference"], split["target"], split["modification"], split["texts"]):
            a, b = _scene(meta, ref), _scene(meta, tgt)
            gone, new = a - b, b - a
            if kind == "add":
                assert len(b) == len(a) + 1 and not gone and len(new) == 1
                (o,) = new
                assert SHAPES_COLOURS[o[0]] in text and SHAPES_SHAPES[o[1]] in text
            elif kind == "remove":
                assert len(b) == len(a) - 1 and not new and len(gone) == 1
            else:
                assert len(gone) == len(new) == 1
                (old,), (changed,) = gone, new
                field = {"colour": 0, "shape": 1, "size": 2, "move": 3}[kind]
                assert [i for i in range(4) if old[i] != changed[i]] == [field]
                if kind == "colour":
                    assert text.endswith(SHAPES_COLOURS[changed[0]]) or f"to {SHAPES_COLOURS[changed[0]]}" in text
                if kind == "shape":
                    assert SHAPES_SHAPES[changed[1]] in text


def test_two_renders_differ_but_are_close() -> None:
    scenes = random_scenes(np.random.Generator(np.random.PCG64(1)), 8)
    rng = np.random.Generator(np.random.PCG64(2))
    a = render_scenes(scenes, rng, 32).astype(np.int16)
    b = render_scenes(scenes, rng, 32).astype(np.int16)
    other = render_scenes(scenes[1:] + scenes[:1], rng, 32).astype(np.int16)
    for i in range(len(scenes)):
        assert not np.array_equal(a[i], b[i])
        assert np.abs(a[i] - b[i]).mean() < np.abs(a[i] - other[i]).mean()
    assert np.abs(a - b).mean() < 20


def test_caption_scene() -> None:
    scene = random_scenes(np.random.Generator(np.random.PCG64(5)), 1)[0]
    caption = caption_scene(scene)
    assert caption.count(", ") == len(scene) - 1
    for o in scene:
        assert f"{SHAPES_COLOURS[o.colour]} {SHAPES_SHAPES[o.shape]}" in caption


def test_key_stable_and_parameter_sensitive() -> None:
    assert SMALL.key() == ShapesParams(seed=3, n_train_scenes=60, n_val_scenes=20, val_family_size=8, subset_size=4).key()
    assert SMALL.key().startswith(f"shapes-v{shapes.GENERATOR_VERSION}-")
    assert SMALL.key() != ShapesParams(seed=3, n_train_scenes=60, n_val_scenes=21, val_family_size=8, subset_size=4).key()
    assert SMALL.key() != ShapesParams(seed=3, n_train_scenes=60, n_val_scenes=20, val_family_size=9, subset_size=4).key()


def _assert_same(d1, d2) -> None:
    assert d1.key == d2.key and d1.image_ids == d2.image_ids
    assert np.array_equal(d1.images.pixels, d2.images.pixels)
    for s1, s2 in ((d1.train, d2.train), (d1.val, d2.val)):
        assert s1.sample_ids == s2.sample_ids and s1.texts == s2.texts and s1.extra == s2.extra
        assert np.array_equal(s1.reference, s2.reference) and np.array_equal(s1.target, s2.target)
    assert np.array_equal(d1.gallery["all"], d2.gallery["all"])


def test_load_shapes_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small) -> None:
    first = load_shapes(tmp_path, SMALL)
    path = tmp_path / f"{SMALL.key()}.npz"
    assert path.exists() and [p.name for p in tmp_path.iterdir()] == [path.name]
    assert first.name == "shapes" and first.key == SMALL.key()
    assert first.protocol.exclude_reference and first.protocol.recall_at == (1, 5, 10, 50)
    assert first.protocol.subset_recall_at == (1, 2, 3) and len(first.val.subset) == len(first.val)
    assert np.array_equal(first.images.pixels, small[0])
    assert first.train.extra["modification"] == small[2]["train"]["modification"]
    assert first.info["params"]["seed"] == 3
    assert sum(first.info["modification_kind"]["val"].values()) == len(first.val)

    def boom(params):
        raise AssertionError("generate_shapes called although the cache exists")

    monkeypatch.setattr(shapes, "generate_shapes", boom)
    _assert_same(first, load_shapes(tmp_path, SMALL))


def test_corrupt_cache_is_regenerated(tmp_path: Path) -> None:
    first = load_shapes(tmp_path, SMALL)
    path = tmp_path / f"{SMALL.key()}.npz"
    path.write_bytes(b"not an npz file")
    with pytest.warns(UserWarning, match="regenerating"):
        second = load_shapes(tmp_path, SMALL)
    _assert_same(first, second)
    _assert_same(first, load_shapes(tmp_path, SMALL))  # the rewritten cache is readable


def test_rendering_is_pinned() -> None:
    """The pixels of a fixed draw, pinned from the renderer of generator v2 as first
    released: a faster renderer must draw the same images (run ids name the data, not the code)."""
    scenes = random_scenes(np.random.default_rng(7), 300)
    pixels = render_scenes(scenes, np.random.default_rng(8))
    assert hashlib.sha256(pixels.tobytes()).hexdigest() == (
        "050817aa298252928d6f51ea3047582840d07126305856a3e9080a30776b1de8"
    )
