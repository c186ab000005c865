"""The single-device options of ``cirbench run``: frozen-tower features cached or computed
on the fly, the cache-size check, bf16 autocast and gradient checkpointing (all on the CPU
here, with the tiny backbone)."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from cirbench.backbones.registry import BACKBONES
from cirbench.cli import app
from cirbench.data.datasets.registry import DATASETS
from cirbench.engine.cell.features import image_tokens
from cirbench.engine.cell.online import OnlineTokens, cache_bytes, check_cache_fits


@pytest.fixture(scope="module")
def data_dir(cache_dir: Path) -> Path:
    return cache_dir


@pytest.fixture(autouse=True)
def one_thread() -> object:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _run(output: Path, data_dir: Path, *extra: str) -> dict[str, pd.DataFrame]:
    result = CliRunner().invoke(app, [
        "run", "--methods", "conesep", "--noise", "0.5", "--dataset", "shapes-mini", "--epochs", "1",
        "--batch-size", "200", "--output", str(output), "--cache-dir", str(data_dir), *extra,
    ])
    runs = pd.read_parquet(output / "runs")
    assert result.exit_code == 0, result.output + str(runs.error.tolist())
    return {name: pd.read_parquet(output / name) for name in ("runs", "losses", "metrics", "scores")}


def test_online_features_equal_the_cache(tmp_path: Path, data_dir: Path) -> None:
    dataset = DATASETS.get("shapes-mini")(data_dir, None)
    backbone = BACKBONES.get("tiny")(0, data_dir, None)
    cached = image_tokens(dataset, backbone, data_dir)
    online = OnlineTokens(dataset, backbone, workers=2)
    last = len(dataset.image_ids) - 1
    index = np.array([[3, 7], [7, last]])
    assert online.shape == cached.shape and np.array_equal(online[index], np.asarray(cached[index]))
    assert cache_bytes(dataset, backbone) == cached.nbytes
    with pytest.raises(IndexError):
        online[np.array([last + 1])]

    from_cache = _run(tmp_path / "cache", data_dir)
    from_images = _run(tmp_path / "online", data_dir, "--features", "online", "--decode-workers", "1")
    for table in ("losses", "metrics", "scores"):
        a, b = from_cache[table], from_images[table]
        value = "score" if table == "scores" else "value"
        assert len(a) == len(b) > 0 and np.allclose(a[value], b[value], atol=1e-6), table


def test_a_cache_that_does_not_fit_is_refused_before_it_is_computed(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = DATASETS.get("shapes-mini")(data_dir, None)
    backbone = BACKBONES.get("tiny")(0, data_dir, None)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr("shutil.disk_usage", lambda path: usage(10**6, 10**6 - 1000, 1000))
    with pytest.raises(OSError, match="--features online"):
        check_cache_fits(dataset, backbone, tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("**/*.npy"))


def test_bf16_autocast_trains_close_to_fp32_and_is_recorded(tmp_path: Path, data_dir: Path) -> None:
    fp32 = _run(tmp_path / "fp32", data_dir)
    bf16 = _run(tmp_path / "bf16", data_dir, "--precision", "bf16")
    assert bf16["runs"].device.str.endswith("bf16").all() and not fp32["runs"].device.str.contains("bf16").any()
    total = lambda t: t["losses"][t["losses"].name == "total"].value.to_numpy()  # noqa: E731
    assert np.isfinite(total(bf16)).all() and np.allclose(total(bf16), total(fp32), rtol=0.01)


def test_unsupported_options_fail_clearly(tmp_path: Path, data_dir: Path) -> None:
    result = CliRunner().invoke(app, ["run", "--methods", "sprc", "--precision", "fp8"])
    assert result.exit_code == 2 and "--precision must be one of fp32, bf16" in result.output
    result = CliRunner().invoke(app, [
        "run", "--methods", "sprc", "--noise", "0", "--dataset", "shapes-mini", "--epochs", "1",
        "--output", str(tmp_path / "gc"), "--cache-dir", str(data_dir), "--gradient-checkpointing",
    ])
    runs = pd.read_parquet(tmp_path / "gc" / "runs")
    assert result.exit_code == 1 and "does not support gradient checkpointing" in runs.error.iloc[0]
