"""The command line end to end on a tiny configuration, and its errors."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from cirbench.cli import app
from cirbench.results.store import SCHEMAS, TABLES

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_end_to_end_run_writes_all_tables(tmp_path: Path, cache_dir: Path) -> None:
    out = tmp_path / "results"
    args = ["run", "--methods", "sprc,oracle", "--noise", "0,0.5", "--dataset", "shapes-mini", "--epochs", "2",
            "--batch-size", "64", "--output", str(out), "--cache-dir", str(cache_dir)]
    result = cli(*args)
    assert result.exit_code == 0, result.output
    assert "completed" in result.output and "R@10" in result.output
    for table in TABLES:
        frame = pd.read_parquet(out / table)
        assert list(frame.columns) == SCHEMAS[table].names
        assert len(frame) > 0, table
    all_runs = pd.read_parquet(out / "runs")
    assert set(all_runs.status) == {"completed"} and (all_runs.backbone == "tiny[cir]").all()  # the default start, named
    assert sorted(all_runs[all_runs.is_reference].method) == ["text_blind", "text_only", "zero_shot"]
    runs = all_runs[~all_runs.is_reference]
    assert sorted(zip(runs.method, runs.noise_rate)) == [("oracle", 0.5), ("sprc", 0.0), ("sprc", 0.5)]  # oracle at 0% is sprc's
    assert "skipped: oracle at 0% noise is sprc at 0%" in " ".join(result.output.split())
    assert runs.noise_manifest_hash.str.len().eq(16).all() and (runs.git_commit != "").all()
    assert runs.set_index("method").loc["oracle", "is_oracle"].all()
    assert dict(zip(runs.method, runs.role)) == {"sprc": "baseline", "oracle": "perfect_filter"}  # Method.role
    assert (all_runs[all_runs.is_reference].role == "").all()
    assert (runs.method_version == "2").all() and runs.eval_protocol.str.contains("ref-excluded").all()
    metrics = pd.read_parquet(out / "metrics")
    assert set(metrics.metric) == {"recall@1", "recall@5", "recall@10", "recall@50", "recall_subset@1", "recall_subset@2",
                                   "recall_subset@3"}
    assert sorted(metrics[metrics.method == "sprc"].epoch.unique()) == [0, 1]
    purity = pd.read_parquet(out / "purity")
    assert set(purity.method) == {"oracle", "sprc"}  # sprc scores (its loss) but does not partition
    assert set(purity[purity.noise_rate == 0.5].noise_type) == {"all", "reference", "caption", "target"}
    assert (purity[purity.method == "oracle"].purity.dropna() == 1.0).all()
    assert purity[purity.method == "sprc"].purity.isna().all()
    assert purity[(purity.method == "sprc") & (purity.noise_rate == 0.5)].auroc.between(0, 1).all()

    again = cli(*args)
    assert again.exit_code == 0 and "already complete (skipped)" in again.output
    pd.testing.assert_frame_equal(pd.read_parquet(out / "runs"), all_runs)  # nothing was rewritten

    # same seed, same command in a fresh directory: identical manifests and metrics
    repeat = cli(*[a if a != str(out) else str(tmp_path / "repeat") for a in args])
    assert repeat.exit_code == 0
    first = pd.read_parquet(out / "metrics").sort_values(["run_id", "epoch", "metric"]).reset_index(drop=True)
    second = pd.read_parquet(tmp_path / "repeat" / "metrics").sort_values(["run_id", "epoch", "metric"]).reset_index(drop=True)
    pd.testing.assert_series_equal(first.value, second.value)
    assert set(pd.read_parquet(out / "runs").noise_manifest_hash) == set(pd.read_parquet(tmp_path / "repeat" / "runs").noise_manifest_hash)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--methods", "sprcc"], "Did you mean 'sprc'"),
        (["--dataset", "shapez"], "Valid datasets"),
        (["--noise-protocol", "nope"], "thirds"),
        (["--backbone", "huge"], "Valid backbones"),
        (["--noise", "0.2,1.0"], "outside [0, 1)"),
        (["--set", "sprc.nope=1"], "valid keys for sprc"),
        (["--set", "sprc.temperature=warm"], "not a valid float"),
        (["--set", "conesepp.omega=1"], "not a selected method"),
        (["--noise", "a,b"], "comma-separated"),
    ],
)
def test_errors_before_any_work(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["run", "--methods", "sprc", "--output", str(tmp_path / "r"), *args])
    assert result.exit_code != 0
    assert message in result.output
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("what, expected", [("methods", "sprc"), ("datasets", "shapes"), ("backbones", "tiny"), ("noise", "thirds")])
def test_list(what: str, expected: str) -> None:
    result = cli("list", what)
    assert result.exit_code == 0 and expected in result.output


def test_documented_example_plugin_runs(tmp_path: Path, cache_dir: Path) -> None:
    plugin = ROOT / "docs" / "examples" / "small_loss.py"
    result = cli("run", "--plugin", str(plugin), "--methods", "small_loss", "--set", "small_loss.keep=0.6",
                 "--noise", "0.5", "--dataset", "shapes-mini", "--epochs", "1", "--batch-size", "64",
                 "--output", str(tmp_path / "r"), "--cache-dir", str(cache_dir))
    assert result.exit_code == 0, result.output
    runs = pd.read_parquet(tmp_path / "r" / "runs")
    assert runs.method_source.iloc[0] == f"file {plugin.resolve()}"
    assert '"keep": 0.6' in runs.config.iloc[0]
    purity = pd.read_parquet(tmp_path / "r" / "purity")
    kept = purity[purity.noise_type == "all"].n_selected.iloc[0]
    assert 0.5 * 600 < kept < 0.7 * 600  # 60% of each batch kept
