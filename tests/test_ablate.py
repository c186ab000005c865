"""``cirbench run --ablate``: a method's ablation grid expanded into labelled grid rows with
their ``--set`` scopes, the papers' ablation noise rates by default, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import cirbench.api.grids as grid_module  # where `cirbench run` builds its grid
from cirbench.cli import app
from cirbench.engine.planning.ablation import expand_ablations, merge_rows
from cirbench.engine.running.grid import Grid, GridError, GridSpec
from cirbench.plugins import discover

METHODS = discover().methods
CONESEP, HUG = METHODS.get("conesep"), METHODS.get("hug")


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[GridSpec]:
    """The specs ``cirbench run`` builds; the grid has no cells, so nothing is trained."""
    specs: list[GridSpec] = []

    class SpecOnly(Grid):
        def __init__(self, spec, discovery=None) -> None:
            super().__init__(spec, discovery)  # validates every row and builds its config
            specs.append(spec)
            self.built, self.cells = self.cells, []

        def reference_cells(self) -> list:
            return []

    monkeypatch.setattr(grid_module, "Grid", SpecOnly)
    return specs


def _run(tmp_path: Path, *args: str):
    return CliRunner().invoke(app, ["run", "--output", str(tmp_path / "r"), *args])


def test_ablate_adds_the_full_method_and_every_variant_at_the_papers_rate(tmp_path: Path, captured) -> None:
    result = _run(tmp_path, "--ablate", "conesep")
    assert result.exit_code == 0, result.output
    (spec,) = captured
    assert spec.methods == ["conesep"] + [f"conesep:{v}" for v in CONESEP.ablations]
    assert spec.noise_rates == [0.2]  # ConeSep Sec. 4.3; no --noise given
    assert spec.overrides["conesep:no_nbl"] == {"negative_prompt": "false", "query_loss": "false", "target_loss": "false"}
    assert "conesep" not in spec.overrides  # the full method runs on its defaults
    assert "conesep:no_btu (unlearning=false)" in " ".join(result.output.split())  # the expansion is shown


def test_each_variant_row_gets_its_overrides_and_the_full_row_none() -> None:
    ablation = expand_ablations(["conesep"], METHODS)
    labels, overrides = merge_rows([], {}, ablation)
    grid = Grid(GridSpec(methods=labels, noise_rates=ablation.noise_rates, overrides=overrides, output=Path("unused")))
    configs = {cell.key.method: cell.config for cell in grid.cells}
    assert configs["conesep"] == CONESEP.Config()
    for variant, values in CONESEP.ablations.items():
        config = configs[f"conesep:{variant}"]
        assert all(getattr(config, k) == v for k, v in values.items()), variant
    assert len({cell.key.run_id for cell in grid.cells}) == len(grid.cells)


def test_methods_stay_alongside_and_noise_defaults_to_the_union(tmp_path: Path, captured) -> None:
    result = _run(tmp_path, "--methods", "sprc,conesep", "--ablate", "conesep,hug")
    assert result.exit_code == 0, result.output
    (spec,) = captured
    assert spec.methods[:2] == ["sprc", "conesep"] and spec.methods.count("conesep") == 1
    assert [m for m in spec.methods if m.startswith("hug")] == ["hug"] + [f"hug:{row}" for row in HUG.ablations]
    assert spec.noise_rates == [0.0, 0.2]  # HUG's 0 and ConeSep's 0.2
    # only the switches a row turns off are set: the others are HUG's defaults already
    assert spec.overrides["hug:coordination"] == {"dynamic_weighting": "false"}


def test_explicit_noise_and_a_users_set_win(tmp_path: Path, captured) -> None:
    result = _run(tmp_path, "--ablate", "conesep", "--noise", "0.5,0.8",
                  "--set", "conesep:no_btu.unlearning=true", "--set", "conesep:no_btu.kappa=0.3",
                  "--set", "conesep.omega=0.4")
    assert result.exit_code == 0, result.output
    (spec,) = captured
    assert spec.noise_rates == [0.5, 0.8]
    assert spec.overrides["conesep:no_btu"] == {"unlearning": "true", "kappa": "0.3"}
    assert spec.overrides["conesep"] == {"omega": "0.4"}


def test_without_ablate_the_documented_defaults_hold(tmp_path: Path, captured) -> None:
    assert _run(tmp_path).exit_code == 0
    (spec,) = captured
    assert spec.methods == ["sprc", "oracle"] and spec.noise_rates == [0.0, 0.5, 0.8]


@pytest.mark.parametrize("names, message", [
    ("tme", "method 'tme' has no ablations"),
    ("conesep,oracle", "method 'oracle' has no ablations"),
    ("conesepp", "Did you mean 'conesep'"),
    ("conesep:no_btu", "name a method (e.g. conesep), not one of its variants"),
])
def test_a_method_without_ablations_is_a_clear_error(tmp_path: Path, names: str, message: str) -> None:
    result = _run(tmp_path, "--ablate", names)
    assert result.exit_code == 2 and message in " ".join(result.output.split())
    assert not (tmp_path / "r").exists()
    with pytest.raises(GridError, match="conesep, habit, hug, intent, sprc, ssn"):
        expand_ablations(["tme"], METHODS)  # the error lists the methods that have ablations


def test_the_help_shows_the_expansion_as_it_is() -> None:
    """The help names the rows ``--ablate`` adds and at which noise rate, as the expansion
    makes them (the overrides are printed before the run: see the first test)."""
    assert "--ablate" in CliRunner().invoke(app, ["run", "--help"]).output
    (option,) = [p for p in typer.main.get_command(app).commands["run"].params if p.name == "ablate"]
    text = " ".join(option.help.split())
    conesep, hug = (expand_ablations([m], METHODS) for m in ("conesep", "hug"))
    *rows, last = conesep.labels[1:]
    assert f"--ablate conesep adds {', '.join(rows)} and {last} at --noise {conesep.noise_rates[0]:g};" in text
    assert f"--ablate hug runs HUG's Table 3 ladder at --noise {hug.noise_rates[0]:g}." in text
    assert "rows and their overrides are printed before the run" in text
