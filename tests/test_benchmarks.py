"""Every script of ``benchmarks/`` runs: on ``shapes-mini`` with an epoch cut short, or on a
small fixture of its own, through the engine's hooks (:mod:`cirbench.engine.cell.hooks`), never
by patching the engine. What they print is measured by hand; here only that they work."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
from test_study import SMALL

from cirbench.api.study import run_study

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture
def scripts(monkeypatch: pytest.MonkeyPatch):
    """Import a script of ``benchmarks/`` by name, as ``python benchmarks/NAME.py`` does."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))

    def load(name: str):
        sys.modules.pop(name, None)
        return importlib.import_module(name)

    return load


def test_no_script_patches_the_engine() -> None:
    """A script that wraps the engine's functions breaks silently when one is renamed."""
    patching = [path.name for path in BENCHMARKS.glob("*.py")
                if any(word in path.read_text() for word in ("setattr(", "patched(", "train_module"))]
    assert len(list(BENCHMARKS.glob("*.py"))) > 3 and patching == []


def test_cell_profile_prints_each_cells_parts(scripts, cache_dir: Path, tmp_path: Path, capsys) -> None:
    scripts("cell_profile").main(["--dataset", "shapes-mini", "--epochs", "1", "--max-steps", "2",
                                  "--cache-dir", str(cache_dir), "--output", str(tmp_path / "results")])
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("sprc 0.5"))
    assert row.count("%") == 6


def test_step_rules_cost_prints_each_methods_ratio(scripts, cache_dir: Path, tmp_path: Path, capsys) -> None:
    scripts("step_rules_cost").main(["--methods", "sprc,oracle", "--dataset", "shapes-mini", "--max-steps", "2",
                                     "--repeats", "2", "--cache-dir", str(cache_dir), "--output", str(tmp_path / "r")])
    lines = [line for line in capsys.readouterr().out.splitlines() if "checks / step" in line]
    assert [line.split()[0] for line in lines] == ["sprc", "oracle"] and all("completed, 2 steps" in line for line in lines)


def test_grid_time_prints_each_methods_ratios(scripts, cache_dir: Path, tmp_path: Path, capsys) -> None:
    scripts("grid_time").main(["--methods", "sprc", "--noise", "0.5", "--dataset", "shapes-mini", "--epochs", "1",
                               "--rounds", "1", "--cache-dir", str(cache_dir), "--work", str(tmp_path)])
    out = capsys.readouterr().out
    assert "grid: 1 cells" in out and any(line.startswith("sprc ") and "1.00" in line for line in out.splitlines())


def test_data_check_time_times_each_check(scripts, tmp_path: Path, capsys) -> None:
    scripts("data_check_time").main(["--root", str(tmp_path / "fiq"), "--images", "12", "--size", "16"])
    timings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("data check")]
    assert len(timings) == 4 and all("(exit 0)" in line for line in timings)


def test_cell_flops_counts_each_part_and_its_ceiling(scripts, cache_dir: Path, tmp_path: Path, capsys) -> None:
    scripts("cell_flops").main(["--methods", "sprc,tme", "--dataset", "shapes-mini", "--epochs", "2", "--max-steps", "2",
                                "--cache-dir", str(cache_dir), "--json", str(tmp_path / "flops.json"),
                                "--ceiling", "--repeats", "1"])
    capsys.readouterr()
    record = json.loads((tmp_path / "flops.json").read_text())
    found = record["methods"]
    assert found["tme"]["parts"]["passes"]["flops"] > 0 and found["sprc"]["steps_by_epoch"] == {"0": 2, "1": 2}
    assert all(found[m]["parts"][part]["flops"] > 0 for m in ("sprc", "tme") for part in ("step", "validation", "held-out"))
    ceiling = record["ceiling"]
    assert all(set(ceiling[m]) == {"step", "validation", "held-out"} for m in ("sprc", "tme"))
    assert all(p["ops_seconds"] > 0 for parts in ceiling.values() for p in parts.values())


def test_backbone_cost_times_each_methods_step(scripts, tmp_path: Path, capsys) -> None:
    pytest.importorskip("transformers")
    scripts("backbone_cost").main(["--size", "tiny", "--batch-size", "4", "--steps", "1", "--methods", "sprc,tme",
                                   "--json", str(tmp_path / "cost.json")])
    capsys.readouterr()
    rows = json.loads((tmp_path / "cost.json").read_text())["rows"]
    assert [r["method"] for r in rows] == ["sprc", "tme"] and all(r["seconds_per_step"] > 0 for r in rows)


def test_pins_cost_prints_the_ratio_of_a_pinned_cell_to_an_unpinned_one(scripts, cache_dir: Path, capsys) -> None:
    scripts("pins_cost").main(["--dataset", "shapes-mini", "--epochs", "1", "--max-steps", "2", "--rounds", "1",
                               "--cache-dir", str(cache_dir)])
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("sprc 0.5 round 1 pinned:") and "pinned True" in line for line in out)
    assert any(line.startswith("sprc 0.5 round 1 unpinned:") and "pinned False" in line for line in out)
    assert any(line.startswith("sprc 0.5 pinned / unpinned: wall ") for line in out)


def test_study_cost_prints_each_grids_measured_time(scripts, cache_dir: Path, tmp_path: Path, capsys,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A small study (a run grid, then a two-trial sweep whose trial 0 is the run's cell): each
    grid's cells, the new ones and their time, then the total of the distinct cells."""
    path = tmp_path / "small.toml"
    path.write_text(SMALL.format(output=tmp_path / "results", cache_dir=cache_dir))
    run_study(path, jobs=1)
    monkeypatch.chdir(tmp_path)
    scripts("study_cost").main([str(path), "--at-once", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("grid 1 (run): 1 cells, 1 new, 1 finished: 0 h 0")
    assert lines[1].startswith("grid 2 (sweep): 2 cells, 1 new, 1 finished")
    assert lines[-1].startswith("total: 2 cells, 0 h 0")
