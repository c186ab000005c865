"""The held-out noisy split (a share of the noisy training triplets, noise included, never
trained on, evaluated every epoch) and the selection rules that read it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cirbench.data.noise.holdout import HOLDOUT_COLUMN, hold_out
from cirbench.data.noise.injection import inject_noise
from cirbench.engine.cell.life import run_cell
from cirbench.engine.running.grid import Grid, GridError, GridSpec
from cirbench.method import Method
from cirbench.report.analysis.loading.load import load_results
from cirbench.report.tables.selection import selection_table
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
    assert run_cell(grid.resources, grid.cells[0], progress=lambda info: None).status == "completed"
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
    plain = Grid(GridSpec(**base, output=tmp_path / "r"))
    assert plain.cells[0].key.run_id != run.run_id
    assert [c.key.run_id for c in plain.reference_cells()] == [c.key.run_id for c in grid.reference_cells()]  # untrained

    setting = load_results(tmp_path / "r").settings[0]
    values = setting.selection.loc[run.run_id]
    val = headline_by_epoch(metrics, "val")
    assert [values[rule] for rule in RULES] == pytest.approx([val[epochs[rule]] for rule in RULES])
    row = next(cells for _, label, cells in selection_table(setting).rows if label.startswith("sprc"))
    assert [c.text for c in row][-2:] == [f"{values.val_peek - values.holdout:+.2f}", f"{values.val_peek - values.final:+.2f}"]
    with pytest.raises(GridError, match="--holdout"):
        Grid(GridSpec(**base, output=tmp_path / "r", holdout=1.5))


def _two_epoch_cell(val: tuple[float, float], holdout: tuple[float, float], seed: int, n: int = 300) -> dict[str, pd.DataFrame]:
    """Metrics (validation and held-out R@10) and validation ranks at two epochs."""
    rng = np.random.default_rng(seed)
    metrics, ranks = [], []
    for epoch in (0, 1):
        hit = np.zeros(n, dtype=bool)
        hit[rng.permutation(n)[: round((val[epoch] + 0.01 * (seed - 1)) * n)]] = True
        ranks.append(pd.DataFrame({"epoch": epoch, "query": np.arange(n), "group": "all", "rank": np.where(hit, 0, 30),
                                   "subset_rank": -1}))
        for split, value in (("val", hit.mean()), ("holdout", holdout[epoch])):
            metrics.append({"epoch": epoch, "split": split, "group": "all", "metric": "recall@10", "value": value,
                            "eval_protocol": "p"})
    return {"metrics": pd.DataFrame(metrics), "ranks": pd.concat(ranks, ignore_index=True)}


def test_the_claims_read_the_holdout_epoch_and_name_a_rule_that_changes_the_verdict(tmp_path: Path) -> None:
    from test_claims import _run_row

    from cirbench.report.analysis.verdicts.claims import claims_selection, paper_claims
    from cirbench.results.store import CellKey

    store = ResultsStore(tmp_path)
    cells = {"hug": ((0.7, 0.3), (0.6, 0.2)), "sprc": ((0.5, 0.5), (0.4, 0.5))}  # hug peaks early, on both splits
    for method, (val, held) in cells.items():
        for seed in (0, 1, 2):
            key = CellKey(f"{method}-{seed}", method, "toy", "tiny", "thirds", 0.0, seed)
            store.write_run(key, _run_row(0) | {"epochs": 2, "holdout": 0.1, "n_holdout": 30}, _two_epoch_cell(val, held, seed))
    (setting,) = load_results(tmp_path).settings
    claim = next(c for c in paper_claims(setting, n_resamples=200) if c.text.startswith("hug beats point matching"))
    assert claim.verdict == "holds" and claim.other_rules == {"final": "does not hold"}
    assert "final: does not hold" in claim.verdict_text
    sentence = claims_selection(setting)
    assert "`holdout` selection rule" in sentence and "no held-out split" not in sentence and "Not compared" not in sentence
