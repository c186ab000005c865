"""``cirbench study FILE --plan``: the papers' study files (experiments/real/) planned against
fixture roots in the releases' formats, the data roots from the environment and the default
BLIP-2 weights a tiny random checkpoint in a local Hugging Face cache; nothing trains."""

from __future__ import annotations

import math
import shutil
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cirbench.api.plan import PlanError, plan_study
from cirbench.backbones.blip2 import DEFAULT_WEIGHTS, write_random_checkpoint
from cirbench.cli import app
from fixtures import write_cirr, write_fashioniq

ROOT = Path(__file__).resolve().parents[1]
STUDIES = {"fashioniq": ROOT / "experiments" / "real" / "fashioniq.toml", "cirr": ROOT / "experiments" / "real" / "cirr.toml"}
WORDS = ["is", "and", "red", "blue", "longer", "shorter", "striped", "floral", "darker", "lighter", "sleeveless", "plain"]


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("real")
    write_fashioniq(base / "fiq")
    write_cirr(base / "cirr", n_train_sets=6)
    org, name = DEFAULT_WEIGHTS.split("/")
    repo = base / "hub" / f"models--{org}--{name}"
    write_random_checkpoint(repo / "snapshots" / "0123abcd", words=WORDS)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    return {"fashioniq": base / "fiq", "cirr": base / "cirr", "hub": base / "hub"}


@pytest.fixture
def environment(setting: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Path]:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(setting["hub"]))
    monkeypatch.setenv("CIRBENCH_FASHIONIQ_ROOT", str(setting["fashioniq"]))
    monkeypatch.setenv("CIRBENCH_CIRR_ROOT", str(setting["cirr"]))
    monkeypatch.chdir(tmp_path)  # the study's results and caches, relative to here
    return setting


@pytest.mark.parametrize("name", ["fashioniq", "cirr"])
def test_the_papers_study_files_plan_on_the_fixtures(name: str, environment: dict[str, Path]) -> None:
    study = tomllib.loads(STUDIES[name].read_text())
    plans = plan_study(STUDIES[name])
    assert len(plans) == len(study["grid"])
    defaults = study["defaults"]
    planned = {row.label for plan in plans for row in plan.rows}
    assert planned == {m for grid in study["grid"] for m in grid["methods"]}
    assert {"sprc", "tme", "conesep", "hug", "habit", "intent"} <= planned
    for plan, grid in zip(plans, study["grid"]):
        n_train = int(plan.notes[0].split(": ")[1].split()[0])
        assert plan.notes[0].startswith(f"{name}: ") and n_train > 0
        cells = len(grid["methods"]) * len(defaults["noise"]) * len(defaults["seeds"])
        assert plan.cells == plan.pending == cells and "release" in plan.setting
        for row in plan.rows:
            assert row.cells == len(defaults["noise"]) * len(defaults["seeds"])
            assert row.steps == grid["epochs"] * math.ceil(n_train / grid["batch_size"])
            per_epoch = row.steps / grid["epochs"]
            expected = row.cells * per_epoch * (row.first_gflop + (grid["epochs"] - 1) * row.step_gflop) / 1e6
            assert row.step_gflop > 0 and row.first_gflop > 0 and row.pflop == pytest.approx(expected)
    assert not (Path.cwd() / study["study"]["output"]).exists() or not any((Path.cwd() / study["study"]["output"]).rglob("*.parquet"))


def test_the_command_prints_the_plan(environment: dict[str, Path]) -> None:
    result = CliRunner().invoke(app, ["study", str(STUDIES["cirr"]), "--plan", "--tflops", "50"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "grid 3 (run)" in result.output and "hug" in result.output and "at 50 TFLOP/s" in result.output


def test_a_plan_names_what_fails(environment: dict[str, Path], tmp_path: Path) -> None:
    broken = shutil.copytree(environment["cirr"], tmp_path / "broken")
    (broken / "captions" / "cap.rc2.train.json").unlink()
    study = tmp_path / "study.toml"
    study.write_text(STUDIES["cirr"].read_text().replace('dataset = "cirr"', f'dataset = "cirr"\ndata_root = "{broken}"'))
    with pytest.raises(PlanError, match=r"captions/cap.rc2.train.json : file not found"):
        plan_study(study)
    shapes = tmp_path / "shapes.toml"
    shapes.write_text('[study]\noutput = "r"\nreport = ""\n[[grid]]\nkind = "run"\nmethods = ["sprc"]\n'
                      'dataset = "shapes-mini"\nnoise_protocol = "release"\nnoise = [0.5]\n')
    with pytest.raises(PlanError, match="no release order to follow"):
        plan_study(shapes)


@pytest.mark.parametrize("method", ["sprc", "conesep"])
def test_the_counted_step_extrapolates_to_a_larger_batch(method: str, environment: dict[str, Path], tmp_path: Path) -> None:
    import torch

    from cirbench.api.plan import _batch, scaled_step_gflop, step_gflop
    from cirbench.backbones.registry import BACKBONES
    from cirbench.engine.running.grid import Grid, GridSpec

    grid = Grid(GridSpec(methods=[method], noise_rates=[0.0], dataset="fashioniq", backbone="blip2", cache_dir=tmp_path))
    backbone, dataset, cpu = BACKBONES.get("blip2")(0, tmp_path, None), grid.resources.dataset(), torch.device("cpu")
    cell = grid.cells[0]
    big = _batch(backbone, dataset, cpu, 16)
    rows = torch.arange(8)
    small = type(big)(big.index[:8], big.reference[:8], big.target[:8], big.text.select(rows), big.texts[:8])
    estimate = scaled_step_gflop(cell, backbone, small, 2, 16, cpu)
    assert estimate == pytest.approx(step_gflop(cell, backbone, big, 2, cpu), rel=0.02)
