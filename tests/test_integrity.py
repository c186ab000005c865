"""A damaged results folder is found, listed and repaired: a truncated, a deleted and a
tampered part; ``cirbench results verify`` and its ``--repair``; the rerun that redoes
the damaged cells (their files moved aside, never deleted); old folders still read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from cirbench.cli import app
from cirbench.engine.cell.life import run_cell
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.report import build_report, load_results
from cirbench.results.store import TABLES, ResultsStore
from cirbench.results.verify import DATA_TABLES, check_cell, check_folder, recorded_parts

runner = CliRunner()


def _args(out: Path, cache_dir: Path) -> list[str]:
    return ["run", "--methods", "sprc", "--noise", "0,0.5,0.8", "--dataset", "shapes-mini", "--epochs", "1",
            "--batch-size", "64", "--output", str(out), "--cache-dir", str(cache_dir)]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    """A finished grid (three sprc cells and the reference rows), copied by each test."""
    out = tmp_path_factory.mktemp("integrity") / "results"
    result = runner.invoke(app, _args(out, cache_dir), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def results(finished: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "results"
    shutil.copytree(finished, copy)
    return copy


def _ids(root: Path) -> dict[str, str]:
    runs = pd.read_parquet(root / "runs")
    return {f"{r.method}-{r.noise_rate:g}": r.run_id for r in runs.itertuples()}


def _damage(root: Path) -> dict[str, Path]:
    """Truncate one part, delete one, and rewrite one as valid parquet with other values."""
    ids = _ids(root)
    truncated = root / "metrics" / f"{ids['sprc-0']}.parquet"
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    deleted = root / "metrics" / f"{ids['sprc-0.5']}.parquet"
    deleted.unlink()
    tampered = root / "ranks" / f"{ids['zero_shot-nan']}.parquet"
    frame = pd.read_parquet(tampered)
    frame.assign(rank=0).to_parquet(tampered)  # every query a hit
    return {"truncated": truncated, "deleted": deleted, "tampered": tampered}


def test_every_part_is_recorded_with_rows_and_hash(finished: Path) -> None:
    runs = pd.read_parquet(finished / "runs")
    assert len(runs) == 6 and (runs.status == "completed").all()
    for row in runs.itertuples():
        parts = recorded_parts(row._asdict())
        assert set(parts) == set(DATA_TABLES)
        for table, entry in parts.items():
            path = finished / table / f"{row.run_id}.parquet"
            assert entry["rows"] == pq.ParquetFile(path).metadata.num_rows and entry["bytes"] == path.stat().st_size
            assert len(entry["sha256"]) == 64
    assert check_folder(finished).problems == []


def test_truncated_deleted_and_tampered_parts_are_each_found(results: Path) -> None:
    damaged = _damage(results)
    ids = _ids(results)
    store = ResultsStore(results)
    (truncated,) = check_cell(results, ids["sprc-0"])
    assert truncated.file == damaged["truncated"] and truncated.what.startswith("unreadable (")
    assert "recorded (truncated)" in truncated.what
    (deleted,) = check_cell(results, ids["sprc-0.5"])
    assert deleted.file == damaged["deleted"] and deleted.what.startswith("missing")
    (tampered,) = check_cell(results, ids["zero_shot-nan"])
    assert tampered.file == damaged["tampered"] and "differs from the recorded sha256" in tampered.what
    flipped = results / "losses" / f"{ids['text_only-nan']}.parquet"
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    flipped.write_bytes(bytes(data))
    (flip,) = check_cell(results, ids["text_only-nan"])
    assert flip.file == flipped and ("differs from the recorded sha256" in flip.what or flip.what.startswith("unreadable"))
    for key in ("sprc-0", "sprc-0.5", "zero_shot-nan", "text_only-nan"):
        assert store.status(ids[key]) == "completed" and not store.is_complete(ids[key])
    assert store.is_complete(ids["text_blind-nan"]) and store.is_complete(ids["sprc-0.8"])
    assert str(truncated).startswith(f"{damaged['truncated']}: cell {ids['sprc-0']}: ")


def test_the_report_lists_damaged_cells_instead_of_crashing_or_dropping_them(results: Path, tmp_path: Path) -> None:
    _damage(results)
    ids = _ids(results)
    data = load_results(results)
    problems = data.problems.set_index("run_id")
    assert set(problems.index) == {ids["sprc-0"], ids["sprc-0.5"], ids["zero_shot-nan"]}
    assert (problems.status == "damaged").all()
    assert "metrics" in problems.loc[ids["sprc-0.5"], "error"] and "missing" in problems.loc[ids["sprc-0.5"], "error"]
    (setting,) = data.settings
    assert list(setting.runs.run_id) == [ids["sprc-0.8"]]
    assert "zero_shot" not in set(setting.references.method)  # its tampered ranks are not used
    page = build_report(results, tmp_path / "report")
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert page.exists() and markdown.count("| damaged |") == 3


def test_verify_finds_each_problem_and_repair_plus_rerun_restores_the_report(
    results: Path, tmp_path: Path, cache_dir: Path
) -> None:
    build_report(results, tmp_path / "before")
    clean = runner.invoke(app, ["results", "verify", "--results", str(results)])
    assert clean.exit_code == 0 and "6 cells, every part as recorded" in " ".join(clean.output.split())
    damaged = _damage(results)
    found = runner.invoke(app, ["results", "verify", "--results", str(results)])
    assert found.exit_code == 1
    lines = [line for line in found.output.splitlines() if ": cell " in line]
    assert len(lines) == 3 and all(any(line.startswith(str(p)) for line in lines) for p in damaged.values())
    assert "3 problem(s) in 3 cell(s)" in " ".join(found.output.split())

    repaired = runner.invoke(app, ["results", "verify", "--results", str(results), "--repair"])
    assert repaired.exit_code == 1 and "moved" in repaired.output
    (stamp,) = (results / "quarantine").iterdir()
    assert (stamp / "metrics" / damaged["truncated"].name).exists()  # moved aside, never deleted
    assert (stamp / "ranks" / damaged["tampered"].name).exists() and (stamp / "runs" / damaged["deleted"].name).exists()
    assert runner.invoke(app, ["results", "verify", "--results", str(results)]).exit_code == 0

    rerun = runner.invoke(app, _args(results, cache_dir), catch_exceptions=False)
    assert rerun.exit_code == 0, rerun.output
    assert runner.invoke(app, ["results", "verify", "--results", str(results)]).exit_code == 0
    build_report(results, tmp_path / "after")

    def report(folder: str) -> list[str]:  # all but the line saying when it was built
        return [line for line in (tmp_path / folder / "report.md").read_text().splitlines() if not line.startswith("- Built: ")]

    assert report("after") == report("before")


def test_the_rerun_redoes_a_damaged_cell_saying_so_and_keeps_the_damaged_files(
    results: Path, cache_dir: Path
) -> None:
    before = pd.read_parquet(results / "metrics").sort_values(["run_id", "epoch", "metric"]).reset_index(drop=True)
    damaged = _damage(results)
    rerun = runner.invoke(app, _args(results, cache_dir), catch_exceptions=False)
    assert rerun.exit_code == 0, rerun.output
    text = " ".join(rerun.output.split())
    assert text.count("is redone") == 3 and damaged["deleted"].name in text and "missing" in text
    assert "Traceback" not in rerun.output
    kept = {p.name for p in (results / "quarantine").rglob("*.parquet")}
    assert {damaged["truncated"].name, damaged["tampered"].name} <= kept
    assert check_folder(results).problems == []
    after = pd.read_parquet(results / "metrics").sort_values(["run_id", "epoch", "metric"]).reset_index(drop=True)
    pd.testing.assert_series_equal(before.value, after.value)  # same seed, same numbers


def test_an_unreadable_runs_part_and_a_part_without_runs_row_are_reported(results: Path) -> None:
    ids = _ids(results)
    (results / "runs" / f"{ids['sprc-0']}.parquet").write_bytes(b"PAR1 not really")
    (results / "runs" / f"{ids['sprc-0.5']}.parquet").unlink()
    problems = {(p.run_id, p.file.parent.name) for p in check_folder(results).problems}
    assert (ids["sprc-0"], "runs") in problems
    assert {(ids["sprc-0.5"], t) for t in DATA_TABLES} <= problems  # parts with no runs row
    data = load_results(results)
    row = data.problems.set_index("run_id").loc[ids["sprc-0"]]
    assert row.status == "damaged" and "unreadable runs part" in row.error


def test_folders_written_before_hashes_are_checked_for_readability_only(results: Path) -> None:
    ids = _ids(results)
    for path in (results / "runs").glob("*.parquet"):  # drop the parts column, as an older cirbench wrote
        table = pq.read_table(path)
        pq.write_table(table.drop(["parts"]), path)
    store = ResultsStore(results)
    assert all(store.is_complete(run_id) for run_id in ids.values())
    assert len(load_results(results).settings[0].runs) == 3
    part = results / "losses" / f"{ids['sprc-0']}.parquet"
    part.write_bytes(part.read_bytes()[:100])
    (problem,) = check_cell(results, ids["sprc-0"])
    assert problem.file == part and problem.what.startswith("unreadable")
    assert not store.is_complete(ids["sprc-0"])


def test_a_checkpoint_is_recorded_and_checked(tmp_path: Path, cache_dir: Path) -> None:
    grid = Grid(GridSpec(methods=["sprc"], noise_rates=[0.5], dataset="shapes-mini", epochs=1, batch_size=64,
                         output=tmp_path / "r", cache_dir=cache_dir, save=True))
    (cell,) = grid.cells
    assert run_cell(grid.resources, cell, lambda info: None, announce=lambda m: None).status == "completed"
    row = pq.read_table(tmp_path / "r" / "runs" / f"{cell.key.run_id}.parquet").to_pylist()[0]
    assert json.loads(row["parts"])["checkpoint"]["file"] == f"checkpoints/{cell.key.run_id}.pt"
    checkpoint = tmp_path / "r" / "checkpoints" / f"{cell.key.run_id}.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:-10])
    (problem,) = check_cell(tmp_path / "r", cell.key.run_id)
    assert problem.file == checkpoint
    from cirbench.method.checkpoint import CheckpointError
    from cirbench.engine.tools.predict import _check_record

    with pytest.raises(CheckpointError, match="damaged record"):
        _check_record(checkpoint, {"run_id": cell.key.run_id})


def test_every_table_is_checked() -> None:
    assert set(DATA_TABLES) | {"runs"} == set(TABLES)
