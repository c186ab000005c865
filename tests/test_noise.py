"""The noise layer: counts, flag truth, determinism, only the training split."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from cirbench.data.noise.injection import NOISE_PROTOCOLS, inject_noise
from synthetic import toy_dataset


@pytest.mark.parametrize("rate", [0.0, 0.2, 0.5, 0.8])
def test_thirds_counts_and_types(rate: float) -> None:
    ds = toy_dataset(n_train=300)
    noisy, manifest = inject_noise(ds, "thirds", rate, seed=3)
    chosen = int(rate * 300)
    t = manifest.table
    assert len(t) == 300
    # each third of the chosen samples is one noise type; a permuted value that lands back
    # on its own sample is clean, so each type has at most its third
    thirds = [int(chosen / 3), int(2 * chosen / 3) - int(chosen / 3), chosen - int(2 * chosen / 3)]
    for kind, cap in zip(("reference", "caption", "target"), thirds):
        count = int((t.noise_type == kind).sum())
        assert count <= cap
        assert count >= cap - max(3, cap // 5)  # only a few land back on themselves
    assert int(t.is_noisy.sum()) == int((t.noise_type != "clean").sum())
    assert (t.noise_type[~t.is_noisy] == "clean").all()


def test_flags_tell_the_truth() -> None:
    ds = toy_dataset(n_train=60)
    noisy, manifest = inject_noise(ds, "thirds", 0.9, seed=1)
    changed = (
        (noisy.reference != ds.train.reference)
        | (np.asarray(noisy.texts) != np.asarray(ds.train.texts))
        | (noisy.target != ds.train.target)
    )
    assert (manifest.is_noisy == changed).all()
    ref_swapped = manifest.table.noise_type == "reference"
    assert (noisy.reference[ref_swapped] != ds.train.reference[ref_swapped]).all()
    assert (noisy.target[ref_swapped] == ds.train.target[ref_swapped]).all()


def test_equal_text_landing_is_clean() -> None:
    ds = toy_dataset(n_train=4, duplicate_texts=True)  # all four texts are identical
    noisy, manifest = inject_noise(ds, "caption", 0.99, seed=0)
    assert not manifest.is_noisy.any()
    assert (manifest.noise_type == "clean").all()


def test_caption_protocol_gives_other_texts() -> None:
    ds = toy_dataset(n_train=100)
    noisy, manifest = inject_noise(ds, "caption", 0.5, seed=2)
    t = manifest.table
    assert int(t.is_noisy.sum()) == 50
    assert set(t.noise_type[t.is_noisy]) == {"caption"}
    swapped = t.is_noisy.to_numpy()
    assert (np.asarray(noisy.texts)[swapped] != np.asarray(ds.train.texts)[swapped]).all()
    assert (noisy.reference == ds.train.reference).all() and (noisy.target == ds.train.target).all()


def test_only_training_split_changes() -> None:
    ds = toy_dataset()
    val_before = (ds.val.reference.copy(), list(ds.val.texts), ds.val.target.copy())
    train_before = list(ds.train.texts)
    inject_noise(ds, "thirds", 0.8, seed=0)
    assert (ds.val.reference == val_before[0]).all() and ds.val.texts == val_before[1]
    assert ds.train.texts == train_before  # the dataset object itself is untouched


def test_same_seed_same_manifest_other_seed_differs() -> None:
    ds = toy_dataset(n_train=200)
    a = inject_noise(ds, "thirds", 0.5, seed=7)[1]
    b = inject_noise(ds, "thirds", 0.5, seed=7)[1]
    c = inject_noise(ds, "thirds", 0.5, seed=8)[1]
    assert a.hash == b.hash and a.table.equals(b.table)
    assert a.hash != c.hash


def test_manifest_hash_is_stable_across_processes() -> None:
    code = (
        "import sys; sys.path.insert(0, 'tests');"
        "from synthetic import toy_dataset; from cirbench.data.noise.injection import inject_noise;"
        "print(inject_noise(toy_dataset(n_train=200), 'thirds', 0.5, seed=7)[1].hash)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == inject_noise(toy_dataset(n_train=200), "thirds", 0.5, seed=7)[1].hash


@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5])
def test_rate_outside_range_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="noise rate"):
        inject_noise(toy_dataset(), "thirds", rate, seed=0)


def test_unknown_protocol_lists_valid_names() -> None:
    with pytest.raises(KeyError, match="thirds"):
        NOISE_PROTOCOLS.get("thirdz")


def test_manifest_saved_and_readable(tmp_path) -> None:
    import pandas as pd

    _, manifest = inject_noise(toy_dataset(), "thirds", 0.5, seed=0)
    path = manifest.save(tmp_path)
    assert manifest.hash in path.name
    assert pd.read_parquet(path).equals(manifest.table)
