"""An experiment as one file (``cirbench study``): a small study run twice (the second run
skips every cell), the committed report's study file against the README's commands,
and the refusals of a bad study file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cirbench.cli import app
from cirbench.cli.grid import calibrate_grid, sweep_grid, validated_grid
from cirbench.cli.options import console
from cirbench.api.study import study_grid
from cirbench.cli.study import run_study
from cirbench.report.analysis.loading.plans import read_plans
from cirbench.settings.study import StudyError, load_study

ROOT = Path(__file__).resolve().parents[1]
SMALL = """
[study]
output = "{output}"
cache_dir = "{cache_dir}"
report = ""

[defaults]
dataset = "shapes-mini"
epochs = 1
batch_size = 64
seeds = [0]

[[grid]]
kind = "run"
methods = ["sprc"]
noise = [0.5]

[[grid]]
kind = "sweep"
methods = ["sprc"]
noise = [0.5]
trials = 2
"""


def test_a_study_run_twice_skips_every_cell_the_second_time(tmp_path: Path, cache_dir: Path) -> None:
    path = tmp_path / "small.toml"
    path.write_text(SMALL.format(output=tmp_path / "results", cache_dir=cache_dir))
    first, met = run_study(path, jobs=1)
    trained = [o.status for o in first if o.cell.key.noise_rate == o.cell.key.noise_rate]  # not the reference rows (NaN)
    assert met and trained == ["completed", "skipped", "completed"]  # sweep trial 0 is the run's cell
    second, met = run_study(path, jobs=1)
    assert met and len(second) == len(first) == 9 and {o.status for o in second} == {"skipped"}
    assert [o.cell.key.run_id for o in second] == [o.cell.key.run_id for o in first]
    plan = read_plans(tmp_path / "results")  # its cells, written before any ran, so a report knows what it meant to run
    assert sorted(zip(plan.method, plan.noise_rate, plan.seed)) == [("sprc", 0.5, 0), ("sprc:trial1", 0.5, 0)]
    assert set(plan.study) == {"small"}


RANKED = ("sprc", "tme", "conesep", "hug", "habit", "intent", "ssn", "cala")


def test_the_committed_study_is_the_readmes_commands(tmp_path: Path) -> None:
    """Its grids have the cells of ``run``, ``calibrate``, ``run --ablate`` and ``sweep`` as the
    README gave them (the same run ids: a rerun of the study skips what they ran); the headline
    grid and the perfect filter's cells beside it on seeds 0-4 (issue 70), the others on 0-2."""
    study = load_study(ROOT / "experiments" / "committed-report.toml")
    study.output = tmp_path
    ids = [sorted(c.key.run_id for c in study_grid(entry, study).cells) for entry in study.grids]
    common = dict(output=tmp_path, cache_dir=Path("datasets"), holdout=None, plugin_files=[])
    commands = [
        validated_grid("sprc,tme,conesep,hug,habit,intent,ssn,cala", "0,0.2,0.5,0.8", None, [], [], {**common, "seeds": [0, 1, 2, 3, 4]}),
        validated_grid("oracle", "0.5,0.8", None, [], [], {**common, "seeds": [0, 1, 2, 3, 4]}),
        calibrate_grid({**common, "seeds": [0, 1, 2]}),
        validated_grid(None, None, "conesep", [], [], {**common, "seeds": [0, 1, 2]}),
        validated_grid(None, None, "hug", [], [], {**common, "seeds": [0, 1, 2]}),
        validated_grid(None, None, "habit,intent", [], [], {**common, "seeds": [0, 1, 2]}),
        validated_grid(",".join(f"{m}:release" for m in RANKED), "0.5,0.8", None,
                       [f"{m}:release.readings=release" for m in RANKED], [], {**common, "seeds": [0, 1, 2]}),
        validated_grid("conesep:inter,conesep:cost,conesep:lastcol,conesep:ul", "0.5,0.8", None,
                       ["conesep:inter.inter_loss=release", "conesep:cost.ot_cost=release",
                        "conesep:lastcol.negative_column=last", "conesep:ul.ul_loss=release"], [], {**common, "seeds": [0, 1, 2]}),
        sweep_grid(list(RANKED), "0.5,0.8", 6, [], {**common, "seeds": [0], "holdout": 0.1}),
        validated_grid(None, "0.5,0.8", "ssn,sprc", [], [], {**common, "seeds": [0, 1, 2, 3, 4]}),
        validated_grid("oracle,tme,conesep,habit", "0.5,0.8", None, [], [], {
            **common, "seeds": [0, 1, 2], "frontier": [0.8, 0.6, 0.4], "noise_types": True,
            "replay": ["tme", "conesep", "habit"]}),
    ]
    assert ids == [sorted(c.key.run_id for c in grid.cells) for grid in commands]
    assert [len(x) for x in ids] == [160, 10, 36, 15, 24, 24, 48, 24, 96, 40, 24 + 51]
    calibration = {c.key.run_id for c in commands[2].cells}
    hosted = [c.key.run_id for c in commands[2].cells if c.key.method not in ("sprc", "oracle")]
    assert len(hosted) == 21 and set(hosted) <= set(ids[0])  # the hosted methods' clean cells are the headline's: none trains twice
    assert calibration <= set(ids[0]) | set(ids[1])  # the calibration's cells are seeds 0-2 of the two grids above
    kept = [c for c in commands[-1].cells if c.kept is not None]
    assert len(kept) == 51 <= 60  # at most 60; its other cells are cells of the grids above (none trained twice)
    assert {c.key.run_id for c in commands[-1].cells} - {c.key.run_id for c in kept} <= set().union(*map(set, ids[:-1]))


@pytest.mark.parametrize("text, message", [
    ("[[grid]]\nkind = 'run'\nmethods = ['sprc']\nepoch = 1\n", r"grid 1 \(run\): unknown key 'epoch'; valid keys: .*epochs"),
    ("[[grid]]\nkind = 'run'\nmethods = ['sprc']\n[[grid]]\nkind = 'ablation'\n", "grid 2: unknown grid kind 'ablation'; valid kinds: run, sweep, calibrate"),
    ("[[grid]]\nkind = 'sweep'\nmethods = ['sprc']\ntrials = 'four'\n", r"grid 1 \(sweep\): trials must be an integer, got 'four'"),
    ("[[grid]]\nkind = 'run'\nmethods = ['sprc']\nnoise = [0.5, 1.0]\n", r"grid 1 \(run\): noise must be every rate in \[0, 1\)"),
    ("[defaults]\nseeds = [-1]\n[[grid]]\nkind = 'calibrate'\n", r"\[defaults\]: seeds must be every seed >= 0"),
    ("[[grid]]\nkind = 'sweep'\n", r"grid 1 \(sweep\): methods is required"),
    ("[[grid]]\nkind = 'run'\nmethods = ['oracle']\nfrontier = 'yes'\n", r"grid 1 \(run\): frontier must be true or false"),
    ("[[grid]]\nkind = 'run'\nmethods = ['oracle']\nfrontier_purity = [1.0]\n",
     r"grid 1 \(run\): frontier_purity must be every purity in \(0, 1\)"),
    ("[[grid]]\nkind = 'sweep'\nmethods = ['tme']\nreplay = ['tme']\n", r"grid 1 \(sweep\): unknown key 'replay'"),
    ("[studdy]\n", "unknown key 'studdy'; valid keys: study, defaults, grid"),
    ("[study]\noutput = 'r'\n", r"no grid: add at least one \[\[grid\]\]"),
    ("[[grid]\n", "not valid TOML"),
])
def test_a_bad_study_file_names_the_file_the_entry_and_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(StudyError, match=f"^{path}: {message}"):
        load_study(path)


def test_the_command_refuses_a_bad_study_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "width", 300)  # where an 80-column console wraps depends on the temporary path's length
    path = tmp_path / "bad.toml"
    path.write_text(f"[study]\noutput = '{tmp_path / 'results'}'\n[[grid]]\nkind = 'run'\nmethods = ['sprcc']\n")
    result = CliRunner().invoke(app, ["study", str(path)])
    output = " ".join(result.output.split())  # the console wraps long lines
    assert result.exit_code == 2 and "bad.toml: grid 1 (run) error: unknown method 'sprcc'. Did you mean 'sprc'" in output
    assert not (tmp_path / "results" / "runs").exists()
    missing = CliRunner().invoke(app, ["study", str(tmp_path / "none.toml")])
    assert missing.exit_code == 2 and "none.toml: cannot be read" in missing.output
