"""The ``hard`` noise protocol: nearest-neighbour caption swaps in the tower's feature space."""

from __future__ import annotations

import numpy as np
import pytest

from cirbench.data.base import ArrayImages, CIRDataset, EvalProtocol, TripletSplit
from cirbench.data.noise.hard import HardProtocol
from cirbench.data.noise.injection import NOISE_PROTOCOLS, inject_noise
from cirbench.data.datasets.shapes import ShapesParams, load_shapes


def _dataset(n_images: int = 60, n_train: int = 80, seed: int = 0) -> tuple[CIRDataset, np.ndarray]:
    """Random triplets over images whose features form tight clusters of 5."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_images // 5, 16))
    features = np.repeat(centres, 5, axis=0) + 0.01 * rng.normal(size=(n_images, 16))
    train = TripletSplit(
        sample_ids=[f"t{i}" for i in range(n_train)], reference=rng.integers(0, n_images, n_train),
        texts=[f"edit number {i % 70}" for i in range(n_train)], target=rng.integers(0, n_images, n_train),
    )
    val = TripletSplit(sample_ids=["v0"], reference=np.array([0]), texts=["x"], target=np.array([1]))
    data = CIRDataset(
        name="toy", key="toy", image_ids=[f"i{i}" for i in range(n_images)],
        images=ArrayImages(np.zeros((n_images, 4, 4, 3), dtype=np.uint8)), train=train, val=val,
        gallery={"all": np.arange(n_images)}, protocol=EvalProtocol("toy", True),
    )
    return data, features.astype(np.float32)


def _neighbour_sets(features: np.ndarray, reference: np.ndarray, texts: list[str], k: int) -> list[set[int]]:
    """Brute force: the k most similar other samples with a different text, per sample."""
    f = features[reference] / np.linalg.norm(features[reference], axis=1, keepdims=True)
    sim = f @ f.T
    out = []
    for i in range(len(reference)):
        candidates = [j for j in np.argsort(-sim[i], kind="stable") if j != i and texts[j] != texts[i]]
        cutoff = sim[i, candidates[k - 1]]
        out.append({j for j in candidates if sim[i, j] >= cutoff - 1e-6})
    return out


def test_registered() -> None:
    assert NOISE_PROTOCOLS.get("hard") is HardProtocol


@pytest.mark.parametrize("rate", [0.25, 0.8])
def test_donors_are_nearest_neighbours_with_other_texts(rate: float) -> None:
    data, features = _dataset()
    noisy, manifest = inject_noise(data, "hard", rate, seed=3, image_features=lambda: features)
    n = len(data.train)
    flags = manifest.is_noisy
    assert flags.sum() == int(rate * n)
    assert set(manifest.noise_type[flags]) == {"caption"} and set(manifest.noise_type[~flags]) == {"clean"}
    assert np.array_equal(noisy.reference, data.train.reference) and np.array_equal(noisy.target, data.train.target)
    source = manifest.table.text_source_id.str[1:].astype(int).to_numpy()
    near = _neighbour_sets(features, data.train.reference, data.train.texts, HardProtocol.neighbours)
    for i in np.flatnonzero(flags):
        assert source[i] in near[i]
        assert noisy.texts[i] == data.train.texts[source[i]] != data.train.texts[i]
    assert all(noisy.texts[i] == data.train.texts[i] for i in np.flatnonzero(~flags))


def test_deterministic_in_the_seed_and_needs_features() -> None:
    data, features = _dataset()
    first = inject_noise(data, "hard", 0.5, seed=1, image_features=lambda: features)[1]
    again = inject_noise(data, "hard", 0.5, seed=1, image_features=lambda: features)[1]
    other = inject_noise(data, "hard", 0.5, seed=2, image_features=lambda: features)[1]
    assert first.hash == again.hash != other.hash
    with pytest.raises(ValueError, match="image features"):
        inject_noise(data, "hard", 0.5, seed=1)
    with pytest.raises(ValueError, match="n_images"):
        inject_noise(data, "hard", 0.5, seed=1, image_features=lambda: features[:3])
    assert inject_noise(data, "hard", 0.0, seed=1)[1].is_noisy.sum() == 0  # nothing chosen: no features needed


def test_identical_texts_leave_samples_clean() -> None:
    data, features = _dataset()
    data.train.texts = ["same"] * len(data.train)
    assert inject_noise(data, "hard", 0.5, seed=0, image_features=lambda: features)[1].is_noisy.sum() == 0


def test_on_shapes_donors_are_visually_close(tmp_path) -> None:
    data = load_shapes(tmp_path, ShapesParams(n_train_scenes=60, n_val_scenes=10))
    pixels = np.stack([data.images.load(i) for i in range(len(data.image_ids))]).reshape(len(data.image_ids), -1)
    features = pixels.astype(np.float32) - pixels.mean(axis=0)
    noisy, manifest = inject_noise(data, "hard", 0.5, seed=0, image_features=lambda: features)
    flags = manifest.is_noisy
    assert flags.sum() == int(0.5 * len(data.train))
    index = {s: i for i, s in enumerate(data.train.sample_ids)}
    donors = np.array([index[s] for s in manifest.table.text_source_id])
    ref = features[data.train.reference]
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    donor_sim = np.sum(ref[flags] * ref[donors[flags]], axis=1)
    random_sim = np.sum(ref[flags] * ref[np.random.default_rng(0).permutation(len(ref))[: flags.sum()]], axis=1)
    assert donor_sim.mean() > random_sim.mean() + 0.2
