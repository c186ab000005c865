"""Noise instances as files: ``cirbench noise export`` writes one (parquet, and the release's
JSON training files), ``--noise-file`` trains on it, and a bad file is refused naming the entry."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from cirbench.cli import app
from cirbench.data.noise.injection import inject_noise
from cirbench.data.noise.instance_file import NoiseFileError, read_instance
from cirbench.data.datasets.registry import DATASETS
from cirbench.engine.running.grid import Grid, GridError, GridSpec
from fixtures import write_cirr, write_fashioniq
from test_release_noise import releases_shuffle


@pytest.fixture(scope="module")
def cirr(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("cirr")
    write_cirr(root, n_train_sets=15, n_val_sets=2, n_test_sets=1)
    return root, DATASETS.get("cirr")(tmp_path_factory.mktemp("cache"), root)


def _export(root: Path, dataset: str, out: Path, rate: str = "0.5", *extra: str) -> Path:
    result = CliRunner().invoke(app, ["noise", "export", "-d", dataset, "--data-root", str(root), "--noise-protocol",
                                      "release", "--noise", rate, "-o", str(out), "--cache-dir", str(out / "cache"), *extra])
    assert result.exit_code == 0, result.output
    return out / f"{dataset}-release-{rate}-seed0.parquet"


def test_export_round_trips_and_a_grid_trains_on_the_file(cirr, tmp_path: Path) -> None:
    root, dataset = cirr
    path = _export(root, "cirr", tmp_path / "noise")
    injected_split, injected = inject_noise(dataset, "release", 0.5, 0)
    split, manifest = read_instance(path, dataset)
    assert manifest.hash == injected.hash and split.texts == injected_split.texts
    assert (split.reference == injected_split.reference).all() and (split.target == injected_split.target).all()
    table = pd.read_parquet(path)
    assert table["index"].tolist() == list(range(len(dataset.train))) and table.is_noisy.sum() == injected.is_noisy.sum()

    out = tmp_path / "results"
    result = CliRunner().invoke(app, ["run", "-d", "cirr", "--data-root", str(root), "-m", "sprc", "--noise", "0.5",
                                      "--noise-protocol", "release", "--noise-file", str(path), "--epochs", "1",
                                      "--batch-size", "8", "-o", str(out), "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    runs = pd.read_parquet(out / "runs")
    runs = runs[~runs.is_reference]
    assert runs.status.tolist() == ["completed"] and runs.noise_manifest_hash.tolist() == [injected.hash]
    plain = GridSpec(methods=["sprc"], noise_rates=[0.5], dataset="cirr", data_root=root, noise_protocol="release")
    assert runs.run_id.iloc[0] != Grid(plain).cells[0].key.run_id  # the file is part of the run's identity


def test_release_files_hold_the_releases_noisy_triplets(tmp_path: Path) -> None:
    root = tmp_path / "fiq"
    write_fashioniq(root, n_train_images=12, n_train=20, n_val=4)
    _export(root, "fashioniq", tmp_path / "noise", "0.8")
    files = [f"captions/cap.{c}.train.json" for c in ("dress", "shirt", "toptee")]
    original = [e for f in files for e in json.loads((root / f).read_text())]
    written = [e for f in files for e in json.loads((_release(tmp_path / "noise", "fashioniq", "0.8") / f).read_text())]
    assert written == releases_shuffle(original, 0.8, "fashioniq")[0]


def _release(out: Path, dataset: str, rate: str) -> Path:
    """The folder of one rate's release files under an export's ``out``."""
    return out / "release" / f"{dataset}-release-{rate}-seed0"


def test_two_rates_exported_to_one_folder_keep_both_rates_files(tmp_path: Path) -> None:
    root = tmp_path / "fiq"
    write_fashioniq(root, n_train_images=12, n_train=20, n_val=4)
    out = tmp_path / "noise"
    _export(root, "fashioniq", out, "0.2")
    _export(root, "fashioniq", out, "0.8")
    files = [f"captions/cap.{c}.train.json" for c in ("dress", "shirt", "toptee")]
    original = [e for f in files for e in json.loads((root / f).read_text())]
    written = {rate: [e for f in files for e in json.loads((_release(out, "fashioniq", rate) / f).read_text())]
               for rate in ("0.2", "0.8")}
    assert written["0.2"] == releases_shuffle(original, 0.2, "fashioniq")[0]
    assert written["0.8"] == releases_shuffle(original, 0.8, "fashioniq")[0]
    assert written["0.2"] != written["0.8"]


def _corrupt(path: Path, target: Path, change) -> Path:
    table = pq.read_table(path)
    frame = table.to_pandas()
    changed = change(frame)  # in place, or a new frame
    frame = frame if changed is None else changed
    import pyarrow as pa

    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(table.schema.metadata), target)
    return target


@pytest.mark.parametrize("change, message", [
    (lambda f: f.loc.__setitem__((3, "index"), 999), r"entry #3 \(index 999\): index 999 out of range \[0, 30\)"),
    (lambda f: f.loc.__setitem__((5, "reference_id"), "nowhere"), r"entry #5 \(index 5\): reference_id 'nowhere' is not an image"),
    (lambda f: f.loc.__setitem__((2, "is_noisy"), not f.loc[2, "is_noisy"]), r"entry #2 \(index 2\): is_noisy="),
    (lambda f: f.loc.__setitem__((4, "sample_id"), "x"), r"entry #4 \(index 4\): sample_id 'x' is not training triplet 4"),
])
def test_a_bad_file_is_refused_naming_the_entry(cirr, tmp_path: Path, change, message: str) -> None:
    root, dataset = cirr
    bad = _corrupt(_export(root, "cirr", tmp_path / "noise"), tmp_path / "bad.parquet", change)
    with pytest.raises(NoiseFileError, match=message) as info:
        read_instance(bad, dataset)
    assert "\n" not in str(info.value) and str(bad) in str(info.value)
    result = CliRunner().invoke(app, ["run", "-d", "cirr", "--data-root", str(root), "-m", "sprc", "--noise", "0.5",
                                      "--noise-protocol", "release", "--noise-file", str(bad), "--epochs", "1",
                                      "-o", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 2 and "entry #" in " ".join(result.output.split()) and not (tmp_path / "results" / "runs").exists()


def test_a_file_of_another_dataset_count_or_rate_is_refused(cirr, tmp_path: Path) -> None:
    root, dataset = cirr
    path = _export(root, "cirr", tmp_path / "noise")
    short = _corrupt(path, tmp_path / "short.parquet", lambda f: f.iloc[:-1])
    with pytest.raises(NoiseFileError, match="holds 29 triplets .* has 30 training triplets"):
        read_instance(short, dataset)
    fiq = tmp_path / "fiq"
    write_fashioniq(fiq)
    with pytest.raises(NoiseFileError, match="an instance of dataset 'cirr', not 'fashioniq'"):
        read_instance(path, DATASETS.get("fashioniq")(tmp_path / "cache", fiq))
    with pytest.raises(GridError, match="rate 0.5; the grid asks for 'cirr', 'release' at 0.2"):
        Grid(GridSpec(methods=["sprc"], noise_rates=[0.2], dataset="cirr", data_root=root, noise_protocol="release",
                      noise_file=path))
    with pytest.raises(GridError, match="not a readable parquet"):
        Grid(GridSpec(methods=["sprc"], noise_rates=[0.5], dataset="cirr", data_root=root, noise_protocol="release",
                      noise_file=root / "captions" / "cap.rc2.train.json"))
