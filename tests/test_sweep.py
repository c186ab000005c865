"""An equal tuning budget: each method's search space, the trials drawn from it (trial 0 the
defaults), ``cirbench sweep`` running them as resumable cells, and the report's tuned table
selecting on the held-out split."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cirbench.backbones.registry import BACKBONES
from cirbench.cli import app
from cirbench.settings.config import build_config
from cirbench.engine.planning.sweep import SweepError, sweep_rows
from cirbench.plugins import discover
from cirbench.report.analysis.loading.load import load_results
from cirbench.report.tables.tuned import trial_selection, tuned_table
from cirbench.results.labels import TRIAL_LABEL, trial_label
from cirbench.results.store import ResultsStore
from cirbench.method.search import LR_SPACE, trial_values

runner = CliRunner()
BUILTINS = ["sprc", "tme", "conesep", "hug", "habit", "intent", "ssn", "cala", "oracle"]


def test_every_method_declares_a_space_of_its_own_fields_and_every_draw_is_a_valid_config() -> None:
    discovery = discover([])
    for name in BUILTINS:
        config_cls = discovery.methods.get(name).Config
        names = {f.name for f in fields(config_cls)}
        assert config_cls.search_space["lr"] == LR_SPACE and set(config_cls.search_space) <= names, name
        labels, overrides = sweep_rows([name], 6, discovery, "tiny")
        assert labels == [name] + [trial_label(name, t) for t in range(1, 6)] and trial_label(name, 0) == name
        assert all(TRIAL_LABEL.fullmatch(x) for x in labels[1:]) and name not in overrides  # trial 0: the defaults
        for label, values in overrides.items():
            config = build_config(config_cls, values, label)  # raises on an invalid draw
            default_lr = BACKBONES.get("tiny").default_lr
            assert default_lr / 3 <= config.lr <= default_lr * 3


def test_a_trial_is_the_same_whichever_other_methods_and_trials_run() -> None:
    discovery = discover([])
    alone = sweep_rows(["conesep"], 3, discovery, "tiny")[1]
    together = sweep_rows(["sprc", "conesep"], 5, discovery, "tiny")[1]
    assert all(together[label] == values for label, values in alone.items())
    assert together["sprc:trial1"]["lr"] != together["conesep:trial1"]["lr"]
    config_cls = discovery.methods.get("tme").Config
    assert trial_values("tme", config_cls, 0, {"lr": 1e-5}) == {}
    with pytest.raises(SweepError, match="variants"):
        sweep_rows(["conesep:no_ot"], 2, discovery, "tiny")
    with pytest.raises(SweepError, match="at least one"):
        sweep_rows(["sprc"], 0, discovery, "tiny")


def _sweep(output: Path, cache_dir: Path, *extra: str):
    return runner.invoke(app, ["sweep", "--methods", "sprc", "--noise", "0.5", "--trials", "2", "--dataset", "shapes-mini",
                               "--epochs", "2", "--batch-size", "64", "--output", str(output), "--cache-dir", str(cache_dir),
                               *extra])


def test_cli_sweep_reuses_the_grid_run_as_trial_0_resumes_and_the_report_selects_on_the_holdout(
        cache_dir: Path, tmp_path: Path) -> None:
    output = tmp_path / "results"
    grid = runner.invoke(app, ["run", "--methods", "sprc", "--noise", "0.5", "--dataset", "shapes-mini", "--epochs", "2",
                               "--batch-size", "64", "--output", str(output), "--cache-dir", str(cache_dir)])
    assert grid.exit_code == 0, grid.output
    (grid_run,) = ResultsStore(output).read("runs").query("method == 'sprc'").itertuples(index=False)
    assert grid_run.holdout == 0.1 and grid_run.n_holdout > 0  # a generated dataset holds 10% out by default
    first = _sweep(output, cache_dir)
    assert first.exit_code == 0, first.output
    assert "skipped" in first.output  # trial 0 is the grid's run, not trained again
    runs = ResultsStore(output).read("runs")
    trials = runs[~runs.is_reference].set_index("method")
    assert sorted(trials.index) == ["sprc", "sprc:trial1"] and (trials.holdout == 0.1).all()
    assert trials.loc["sprc", "run_id"] == grid_run.run_id and json.loads(trials.loc["sprc", "config"])["lr"] is None
    assert json.loads(trials.loc["sprc:trial1", "config"])["lr"] is not None
    again = _sweep(output, cache_dir)
    assert again.exit_code == 0 and "skipped" in again.output
    assert len(ResultsStore(output).read("runs")) == len(runs)

    (setting,) = load_results(output).settings
    assert setting.methods == ["sprc"] and setting.variants == [] and setting.trials == ["sprc:trial1"]
    (pick,) = trial_selection(setting).itertuples(index=False)
    best = max(((t, h) for t, h in _holdout_best(setting).items()), key=lambda item: (item[1], -item[0]))
    assert pick.trial == best[0] and pick.holdout == pytest.approx(best[1])
    (row,) = tuned_table(setting).rows
    assert row[1] == "sprc" and f"trial {pick.trial}" in row[2][-1].text

    refused = _sweep(tmp_path / "other", cache_dir, "--holdout", "0")
    assert refused.exit_code != 0 and "held-out" in refused.output


def _holdout_best(setting) -> dict[int, float]:
    """Each trial's best held-out headline, read straight from the metrics (R@10 on shapes-mini)."""
    out = {}
    for run in setting.runs.itertuples(index=False):
        own = setting.metrics[(setting.metrics.run_id == run.run_id) & (setting.metrics.split == "holdout")]
        r10 = own[(own.group == "all") & (own.metric == "recall@10")].value
        trial = TRIAL_LABEL.fullmatch(run.method)
        out[int(trial["trial"]) if trial else 0] = 100.0 * float(r10.max())
    return out


TOY = '''
from dataclasses import dataclass
from typing import ClassVar

from cirbench.method import Method, MethodConfig, StepOutput
from cirbench.method.search import Distribution, LogUniform


@dataclass
class ToyConfig(MethodConfig):
    search_space: ClassVar[dict[str, Distribution]] = {
        **MethodConfig.search_space, "temperature": LogUniform(0.01, 0.1), "logit_scale": LogUniform(10.0, 200.0)}

    temperature: float = 0.07
    logit_scale: float = 100.0
    weight: float = 1.0


class Toy(Method):
    """A plugin whose space declares a temperature and a logit scale."""

    name = "toy"
    version = "1"
    Config = ToyConfig

    def training_step(self, batch, epoch, step):
        return StepOutput(self.backbone.composed_feature(batch.reference, batch.text).sum() * 0)
'''


def test_a_declared_temperature_and_logit_scale_are_swept_beside_the_other_methods(tmp_path: Path) -> None:
    """A search space's temperature and logit scale are drawn in every trial but 0, within
    their ranges, as ``--set`` values the config takes, whichever other methods the sweep
    holds; a field the space does not declare (``weight``) is never touched."""
    plugin = tmp_path / "toy.py"
    plugin.write_text(TOY)
    discovery = discover([plugin])
    labels, overrides = sweep_rows(["sprc", "toy", "ssn"], 6, discovery, "tiny")
    assert labels[6:12] == ["toy"] + [f"toy:trial{t}" for t in range(1, 6)] and "toy" not in overrides
    config_cls = discovery.methods.get("toy").Config
    drawn = [build_config(config_cls, overrides[f"toy:trial{t}"], "toy") for t in range(1, 6)]
    assert all(0.01 <= c.temperature <= 0.1 and 10.0 <= c.logit_scale <= 200.0 and c.weight == 1.0 for c in drawn)
    assert len({c.temperature for c in drawn}) == len({c.logit_scale for c in drawn}) == 5  # a new draw each trial
    alone = sweep_rows(["toy"], 6, discovery, "tiny")[1]
    assert all(alone[label] == overrides[label] for label in alone)


TEMPERATURES: dict[str, tuple[str, ...]] = {
    "sprc": ("temperature",), "tme": ("temperature",), "ssn": ("logit_scale",), "conesep": ("tau",),
    "habit": ("temperature",), "intent": ("temperature",), "hug": ("point_temperature", "fc_temperature"),
    "cala": ("matching_scale", "association_scale"),
}
"""Each ranked method's temperature or logit scale (issue 76): the field a sweep must be able to
vary, so that no method wins by a sharpness its rivals never got to try."""


def test_every_ranked_methods_temperature_is_a_field_of_its_config() -> None:
    discovery = discover([])
    for name, names in TEMPERATURES.items():
        fields_of = {f.name for f in fields(discovery.methods.get(name).Config)}
        assert set(names) <= fields_of, (name, set(names) - fields_of)


def test_every_ranked_methods_search_space_holds_its_temperature() -> None:
    discovery = discover([])
    missing = {name: sorted(set(names) - set(discovery.methods.get(name).Config.search_space))
               for name, names in TEMPERATURES.items()}
    assert {name: left for name, left in missing.items() if left} == {}
