"""The held-out noisy split (a share of the noisy training triplets, noise included, never
trained on, evaluated every epoch) and the selection rules that read it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cirbench.data.holdout import HOLDOUT_COLUMN, hold_out
from cirbench.data.noise import inject_noise
from cirbench.engine.grid import Grid, GridError, GridSpec
from cirbench.method import Method
from cirbench.report.load import load_results
from cirbench.report.selection import selection_table, selection_values
from cirbench.results.selection import RULES, headline_by_epoch, selected_epoch, selected_epochs
from cirbench.results.store import ResultsStore
from synthetic import toy_dataset


def test_the_holdout_is_the_same_samples_at_every_rate_and_keeps_their_noise() -> None:
    dataset = toy_dataset(n_train=60)
    held = {}
    for rate in (0.0, 0.5):
        noisy, manifest = inject_noise(dataset, "thirds", rate, seed=3)
        split = hold_out(noisy, manifest, 0.1, seed=3)
        assert len(split.holdout) == 6 and len(split.train) == 54
        assert set(split.holdout.sample_ids).isdisjoint(split.train.sample_ids)
        table = split.manifest.table
        assert table[HOLDOUT_COLUMN].sum() == 6 and list(table.sample_id) == noisy.sample_ids
        held_rows = table[table[HOLDOUT_COLUMN]]
        assert list(held_rows.sample_id) == split.holdout.sample_ids
        # the held-out queries are the noisy triplets as annotated, not the clean ones
        np.testing.assert_array_equal(split.holdout.target, noisy.target[split.holdout_rows])
        assert split.holdout.texts == [noisy.texts[i] for i in split.holdout_rows]
        assert list(split.train_manifest.table.sample_id) == split.train.sample_ids
        for group, images in split.gallery.items():
            assert set(split.holdout.target[np.asarray(split.holdout.groups) == group]) <= set(images)
        held[rate] = split.holdout.sample_ids
    assert held[0.0] == held[0.5]
    noisy, manifest = inject_noise(dataset, "thirds", 0.5, seed=3)
    assert hold_out(noisy, manifest, 0.1, seed=4).holdout.sample_ids != held[0.5]


@pytest.mark.parametrize("share", [0.0, 1.0, 0.001])
def test_a_share_that_holds_out_nothing_or_everything_is_refused(share: float) -> None:
    noisy, manifest = inject_noise(toy_dataset(n_train=30), "thirds", 0.2, seed=0)
    with pytest.raises(ValueError, match="holdout share"):
        hold_out(noisy, manifest, share, seed=0)


def _metrics(val: list[float], holdout: list[float]) -> pd.DataFrame:
    rows = [{"epoch": e, "split": split, "group": "all", "metric": "recall@10", "value": v, "eval_protocol": "p"}
            for split, values in (("val", val), ("holdout", holdout)) for e, v in enumerate(values)]
    return pd.DataFrame(rows)


def test_holdout_selection_never_reads_the_validation_metrics() -> None:
    metrics = _metrics(val=[0.1, 0.2, 0.6, 0.3], holdout=[0.2, 0.5, 0.4, 0.4])
    assert selected_epochs(metrics) == {"final": 3, "holdout": 1, "val_peek": 2}
    rng = np.random.default_rng(0)
    for _ in range(5):  # any validation values, or none at all: the holdout pick does not move
        scrambled = metrics.copy()
        is_val = scrambled.split == "val"
        scrambled.loc[is_val, "value"] = rng.random(int(is_val.sum()))
        assert selected_epoch(scrambled, "holdout") == 1
    assert selected_epoch(metrics[metrics.split != "val"], "holdout") == 1
    assert selected_epoch(_metrics(val=[0.1, 0.2], holdout=[]), "holdout") is None


def test_a_cell_with_a_holdout_never_trains_on_it_and_records_it(cache_dir: Path, tmp_path: Path, monkeypatch) -> None:
    seen: list[int] = []
    original = Method.__init__

    def spy(self, backbone, config, context):
        if context is not None:  # None: a reference row, evaluated untrained
            seen.append(context.num_train)
        original(self, backbone, config, context)

    monkeypatch.setattr(Method, "__init__", spy)
    base = dict(methods=["sprc"], noise_rates=[0.5], dataset="shapes-mini", epochs=2, batch_size=64,
                cache_dir=cache_dir)
    grid = Grid(GridSpec(**base, output=tmp_path / "r", holdout=0.2))
    assert grid.run_cell(grid.cells[0], progress=lambda info: None).status == "completed"
    store = ResultsStore(tmp_path / "r")
    run = store.read("runs").iloc[0]
    manifest = pd.read_parquet(run.noise_manifest_path)
    assert run.n_holdout == manifest[HOLDOUT_COLUMN].sum() > 0 and run.n_train == len(manifest) - run.n_holdout
    assert seen == [run.n_train] and run.holdout == 0.2
    metrics = store.read("metrics")
    held = metrics[metrics.split == "holdout"]
    assert sorted(held.epoch.unique()) == [0, 1] and held[held.metric == "recall@10"].value.between(0, 1).all()
    epochs = selected_epochs(metrics)
    assert sorted(store.read("ranks").epoch.unique()) == sorted({e for e in epochs.values() if e is not None})
    assert Grid(GridSpec(**base, output=tmp_path / "r")).cells[0].key.run_id != run.run_id

    setting = load_results(tmp_path / "r").settings[0]
    values = selection_values(setting).loc[run.run_id]
    val = headline_by_epoch(metrics, "val")
    assert [values[rule] for rule in RULES] == pytest.approx([val[epochs[rule]] for rule in RULES])
    row = next(cells for _, label, cells in selection_table(setting).rows if label.startswith("sprc"))
    assert [c.text for c in row][-2:] == [f"{values.val_peek - values.holdout:+.2f}", f"{values.val_peek - values.final:+.2f}"]
    with pytest.raises(GridError, match="--holdout"):
        Grid(GridSpec(**base, output=tmp_path / "r", holdout=1.5))
