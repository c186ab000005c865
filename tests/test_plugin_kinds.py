"""Datasets, noise protocols and backbones as plugins: the three doors (a ``--plugin`` file
or folder, ``CIRBENCH_PLUGINS``, an entry-point group), the refusals of a bad file, the
conformance checks on every registered one and on the examples, and a plugin noise type in
the report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cirbench.engine.cell.life import run_cell
import cirbench.plugins as plugins
from cirbench.backbones.registry import BACKBONES
from cirbench.data.noise.injection import NOISE_PROTOCOLS
from cirbench.data.datasets.registry import DATASETS
from cirbench.engine.tools.conformance import (backbone_problems, check_plugin_file, dataset_problems, micro_dataset,
                                         noise_problems)
from cirbench.engine.running.grid import Grid, GridError, GridSpec
from cirbench.report import build_report

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"

NOISE_PLUGIN = textwrap.dedent(
    '''
    from cirbench.data.noise.proposal import NoiseProtocol, choose_noisy, untouched

    class {cls}(NoiseProtocol):
        name = "{name}"
        description = "a test protocol"

        def propose(self, split, rate, rng, context):
            out = untouched(split)
            chosen = choose_noisy(len(split), rate, rng)
            out.texts = [t + " please" if i in set(chosen) else t for i, t in enumerate(split.texts)]
            out.attempted[chosen] = "polite"
            return out
    '''
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_plugin_file_of_each_kind_is_registered() -> None:
    d = plugins.discover([EXAMPLES / "squares.py", EXAMPLES / "word_drop.py", EXAMPLES / "tiny_small.py"])
    assert d.errors == []
    assert DATASETS.entry("squares").source == f"file {EXAMPLES / 'squares.py'}"
    assert NOISE_PROTOCOLS.get("word_drop").name == "word_drop"
    assert BACKBONES.get("tiny-small").default_lr == 1e-3
    assert {(k, n) for k, n, _ in d.found} >= {("dataset", "squares"), ("noise protocol", "word_drop"),
                                               ("backbone", "tiny-small")}


def test_a_folder_registers_every_plugin_file_in_it(tmp_path: Path) -> None:
    write(tmp_path, "polite.py", NOISE_PLUGIN.format(cls="Polite", name="polite_folder"))
    write(tmp_path, "_helper.py", "raise ImportError('never imported: a leading underscore')\n")
    d = plugins.discover([tmp_path])
    assert d.errors == [] and "polite_folder" in NOISE_PROTOCOLS


def test_plugins_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(plugins.PLUGINS_ENV, str(write(tmp_path, "env_noise.py", NOISE_PLUGIN.format(cls="E", name="polite_env"))))
    assert "polite_env" in plugins.discover().registries["noise protocol"]


class FakeEntryPoint:
    def __init__(self, name: str, target: object) -> None:
        self.name, self.value, self.dist, self._target = name, f"pkg:{name}", None, target

    def load(self) -> object:
        return self._target


def test_entry_point_groups_of_each_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = plugins.load_plugin_file(write(tmp_path, "ep_noise.py", NOISE_PLUGIN.format(cls="EpNoise", name="polite_ep")))
    groups = {"cirbench.noise": [FakeEntryPoint("polite_ep", module.EpNoise)],
              "cirbench.backbones": [FakeEntryPoint("not_a_factory", object)]}
    monkeypatch.setattr(plugins, "entry_points", lambda group: groups.get(group, []))
    d = plugins.discover()
    assert NOISE_PROTOCOLS.entry("polite_ep").source == "entry point pkg:polite_ep"
    assert any("'not_a_factory'" in p and "BackboneFactory" in p for p in d.problems)


def test_a_plugin_name_taken_by_a_builtin_is_ignored(tmp_path: Path) -> None:
    d = plugins.discover([write(tmp_path, "thirds.py", NOISE_PLUGIN.format(cls="T", name="thirds"))])
    assert NOISE_PROTOCOLS.entry("thirds").source == "built-in"
    assert any("'thirds'" in p and "ignored" in p for p in d.problems)


@pytest.mark.parametrize("text, message", [
    (None, "no such file"),
    ("import not_a_module_anywhere\n", "cannot be imported: .*line 1.*not_a_module_anywhere"),
    ("X = 1\n", "defines no plugin .*DatasetLoader.*NoiseProtocol.*Backbone"),
    ("from cirbench.data.noise.proposal import NoiseProtocol\nclass Lazy(NoiseProtocol):\n    name = 'lazy'\n",
     "noise protocol 'lazy'.* does not implement propose"),
    ("from cirbench.backbones.registry import BackboneFactory\nclass B(BackboneFactory):\n    name = 'b'\n    default_lr = 1.0\n",
     "backbone 'b'.* does not implement __call__"),
])
def test_a_bad_plugin_file_is_refused_before_any_work(tmp_path: Path, text: str | None, message: str) -> None:
    path = tmp_path / "bad_plugin.py"
    if text is not None:
        path.write_text(text)
    with pytest.raises(GridError, match=f"--plugin .*bad_plugin.py.*{message}"):
        Grid(GridSpec(methods=["sprc"], noise_rates=[0.5], plugin_files=[path], output=tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_an_empty_plugin_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(GridError, match="--plugin .*empty: a folder with no plugin file"):
        Grid(GridSpec(methods=["sprc"], noise_rates=[0.5], plugin_files=[tmp_path / "empty"], output=tmp_path / "out"))


@pytest.mark.parametrize("option, value, valid", [
    ("dataset", "squaress", "Did you mean 'squares'.*Valid datasets: .*shapes-mini"),
    ("noise_protocol", "word-drop", "Valid noise protocols: .*word_drop"),
    ("backbone", "tiny_small", "Valid backbones: .*tiny-small"),
])
def test_an_unknown_name_lists_the_valid_ones_plugins_included(tmp_path: Path, option: str, value: str, valid: str) -> None:
    with pytest.raises(GridError, match=valid):
        Grid(GridSpec(methods=["sprc"], noise_rates=[0.5], plugin_files=[EXAMPLES], output=tmp_path, **{option: value}))


@pytest.mark.parametrize("name", ["shapes-mini", "squares"])
def test_generated_datasets_conform(name: str, cache_dir: Path) -> None:
    plugins.discover([EXAMPLES / "squares.py"])
    assert dataset_problems(DATASETS.get(name), cache_dir) == []


@pytest.mark.parametrize("name", ["thirds", "caption", "hard", "word_drop"])
def test_noise_protocols_conform(name: str, cache_dir: Path) -> None:
    plugins.discover([EXAMPLES / "word_drop.py"])
    assert noise_problems(NOISE_PROTOCOLS.get(name), micro_dataset(cache_dir)) == []


def test_a_protocol_that_ignores_its_generator_does_not_conform(tmp_path: Path, cache_dir: Path) -> None:
    text = NOISE_PLUGIN.format(cls="Random", name="unseeded").replace("choose_noisy(len(split), rate, rng)",
                                                                       "choose_noisy(len(split), rate, __import__('numpy').random.default_rng())")
    plugins.discover([write(tmp_path, "unseeded.py", text)])
    problems = noise_problems(NOISE_PROTOCOLS.get("unseeded"), micro_dataset(cache_dir))
    assert any("deterministic" in p for p in problems)


@pytest.mark.parametrize("name, weights", [("tiny", "random"), ("tiny-small", None)])
def test_backbones_conform(name: str, weights: str | None, cache_dir: Path) -> None:
    d = plugins.discover([EXAMPLES / "tiny_small.py"])
    assert backbone_problems(BACKBONES.get(name), cache_dir, d.methods.get("sprc"), weights) == []


def test_check_plugin_file_checks_every_kind_it_defines(cache_dir: Path) -> None:
    results = check_plugin_file(EXAMPLES / "word_drop.py", cache_dir)
    assert results == {"noise protocol word_drop": []}
    assert check_plugin_file(EXAMPLES / "nothing_here.py", cache_dir)["--plugin"][0].endswith("no such file")


def test_a_plugin_noise_type_appears_in_every_per_type_table_and_figure(tmp_path: Path, cache_dir: Path) -> None:
    """A grid on the three example plugins at once; the report shows the new noise type."""
    spec = GridSpec(methods=["sprc", "small_loss"], noise_rates=[0.5], dataset="squares", backbone="tiny-small",
                    noise_protocol="word_drop", epochs=1, batch_size=64, output=tmp_path / "results", cache_dir=cache_dir,
                    plugin_files=[EXAMPLES])
    grid = Grid(spec)
    outcomes = [run_cell(grid.resources, cell, lambda info: None, announce=lambda m: None) for cell in grid.cells]
    assert [o.status for o in outcomes] == ["completed", "completed"], [o.error for o in outcomes]
    manifest = outcomes[0].result.tables["purity"]
    assert "paraphrase" in set(manifest.noise_type)
    build_report(spec.output, tmp_path / "report")
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "Paraphrase caught" in markdown and "misses most (at each run's last epoch): 50%: paraphrase" in markdown
    assert list((tmp_path / "report").rglob("detection_by_noise_type.png"))


def _listed(what: str, *args: str, env: dict[str, str] | None = None) -> str:
    """``cirbench list WHAT ARGS`` in a fresh process (plugins register process-wide)."""
    result = subprocess.run([sys.executable, "-m", "cirbench.cli", "list", what, *args], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "200", **(env or {})}, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_examples_copied_outside_the_repository_work_through_plugin_and_an_entry_point(tmp_path: Path) -> None:
    """The three example plugins, copied out of the repository: listed through ``--plugin``,
    and through the entry-point groups of an installed distribution (a dist-info on the path)."""
    outside = tmp_path / "site" / "my_cir_plugins"
    outside.mkdir(parents=True)
    for name in ("squares.py", "word_drop.py", "tiny_small.py"):
        shutil.copy(EXAMPLES / name, outside / name)
    expected = {"datasets": "squares", "noise": "word_drop", "backbones": "tiny-small"}
    for what, name in expected.items():
        listed = _listed(what, "--plugin", str(outside))
        row = next(line for line in listed.splitlines() if f" {name} " in line)
        assert "file" in row and "my_cir_plugins" in listed, listed  # the source, a path outside the repository
    (outside / "__init__.py").write_text("")
    dist = tmp_path / "site" / "my_cir_plugins-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-cir-plugins\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[cirbench.datasets]\nsquares = my_cir_plugins.squares:Squares\n\n"
        "[cirbench.noise]\nword_drop = my_cir_plugins.word_drop:WordDrop\n\n"
        "[cirbench.backbones]\ntiny-small = my_cir_plugins.tiny_small:TinySmall\n")
    env = {"PYTHONPATH": str(tmp_path / "site")}
    for what, name in expected.items():
        listed = _listed(what, env=env)
        row = next(line for line in listed.splitlines() if f" {name} " in line)
        assert "package my-cir-plugins 0.1" in row, listed
