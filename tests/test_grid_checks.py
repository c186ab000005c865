"""``check-plugin``'s static checks in every grid (:mod:`cirbench.engine.running.grid_checks`):
through ``cirbench run``, a noise protocol that mislabels its samples, one whose proposal is
a sample short, a dataset that breaks its rules and a backbone lacking what a method needs
are each refused before any cell trains, naming the plugin and the rule, with nothing
written under ``--output``; a backbone written from docs/adding-a-backbone.md alone runs
``sprc`` and ``tme``."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cirbench.backbones.base import capabilities
from cirbench.backbones.registry import BACKBONES
from cirbench.cli import app
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.engine.running.runner import preflight
from cirbench.plugins import discover
from cirbench.results.store import ResultsStore

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
runner = CliRunner()

NOISE = textwrap.dedent('''
    import numpy as np
    from cirbench.data.noise.proposal import NoiseProtocol, choose_noisy, untouched

    class Broken(NoiseProtocol):
        name = "{name}"
        description = "a broken test protocol"

        def propose(self, split, rate, rng, context):
            out = untouched(split)
            chosen = choose_noisy(len(split), rate, rng)
            out.text_source[chosen] = np.roll(chosen, 1)
            {breakage}
            return out
''')
MISLABEL = "pass  # the texts move, attempted stays 'clean'"
SHORT = "out.attempted[chosen] = 'caption'; out.target = out.target[:-1]"

DATASET = textwrap.dedent('''
    from dataclasses import replace
    import numpy as np
    from cirbench.data.datasets.loader import DatasetLoader
    from cirbench.data.datasets.registry import DATASETS

    class Broken(DatasetLoader):
        name = "{name}"
        description = "shapes-mini with a broken validation side"

        def __call__(self, cache_dir, data_root, options=None, allow_missing=False):
            data = DATASETS.get("shapes-mini")(cache_dir, data_root)
            n = len(data.image_ids)
            return {breakage}
''')
VAL_PAST_IMAGES = "replace(data, val=replace(data.val, target=data.val.target + n))"
GALLERY_PAST_IMAGES = "replace(data, gallery={g: np.append(v, n) for g, v in data.gallery.items()})"

NO_WORDS = textwrap.dedent(f'''
    from cirbench.backbones.base import Backbone
    from cirbench.plugins import load_plugin_file

    plain = load_plugin_file({str(EXAMPLES / "plain.py")!r})

    class Wordless(plain.PlainBackbone):
        name = "wordless"
        description = "plain without word_embeddings"
        word_embeddings = Backbone.word_embeddings  # the base's: not implemented
''')


def nothing_under(output: Path) -> bool:
    """Whether ``output`` holds nothing (the grid's write probe may leave it, empty)."""
    return not output.exists() or not any(output.rglob("*"))


def _run(tmp_path: Path, cache_dir: Path, plugin: str, *args: str) -> tuple[int, str]:
    path = tmp_path / "plugin.py"
    path.write_text(plugin)
    result = runner.invoke(app, ["run", "--plugin", str(path), "--noise", "0,0.5", "--seeds", "0,1", "--epochs", "1",
                                 "--batch-size", "64", "--cache-dir", str(cache_dir), "--output", str(tmp_path / "out"),
                                 *args])
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize("name, breakage, rate, rule", [
    ("mislabels", MISLABEL, "0.5", r"sample '[^']+' changed \(text\) but its noise type is 'clean' \(and \d+ more\) "
                                   r"\(rule: a noisy sample's type names its corruption"),
    ("one_short", SHORT, "0", r"Proposal.target has 599 values for 600 samples \(rule: one per sample\)"),
])
def test_a_protocol_breaking_a_rule_is_refused_before_any_cell(tmp_path: Path, cache_dir: Path, name: str, breakage: str,
                                                               rate: str, rule: str) -> None:
    code, text = _run(tmp_path, cache_dir, NOISE.format(name=name, breakage=breakage), "--dataset", "shapes-mini",
                      "--methods", "sprc", "--noise-protocol", name)
    assert code == 2 and "Traceback" not in text, text
    assert f"noise protocol '{name}' (file {tmp_path / 'plugin.py'}) at rate {rate}, seed 0: " in text
    assert re.search(rule, text), text
    assert nothing_under(tmp_path / "out")


@pytest.mark.parametrize("name, breakage, rule", [
    ("val_past", VAL_PAST_IMAGES, "does not load: .*sample '[^']+' has an out-of-range target image index"),
    ("gallery_past", GALLERY_PAST_IMAGES, r"gallery 'all' holds an image index out of range \(rule: in \[0, \d+\)\)"),
])
def test_a_dataset_breaking_a_rule_is_refused_once_before_any_cell(tmp_path: Path, cache_dir: Path, name: str,
                                                                   breakage: str, rule: str) -> None:
    code, text = _run(tmp_path, cache_dir, DATASET.format(name=name, breakage=breakage), "--dataset", name,
                      "--methods", "sprc,oracle")
    assert code == 2 and "Traceback" not in text, text
    assert f"dataset '{name}' (file {tmp_path / 'plugin.py'})" in text and text.count("error:") == 1
    assert re.search(rule, text), text
    assert nothing_under(tmp_path / "out")


def test_a_backbone_lacking_what_a_method_needs_is_refused_naming_both(tmp_path: Path, cache_dir: Path) -> None:
    code, text = _run(tmp_path, cache_dir, NO_WORDS, "--dataset", "shapes-mini", "--backbone", "wordless",
                      "--methods", "sprc,tme")
    assert code == 2 and "Traceback" not in text, text
    assert ("method 'tme' (built-in tme.py) needs the backbone's word_embeddings(text: TextBatch) -> Tensor (B, T, "
            f"hidden_size), which backbone 'wordless' (file {tmp_path / 'plugin.py'}) does not implement (rule:") in text
    assert "sprc" not in text  # sprc needs nothing
    assert nothing_under(tmp_path / "out")


def test_a_backbone_offers_the_capabilities_its_class_implements(tmp_path: Path) -> None:
    (tmp_path / "plugin.py").write_text(NO_WORDS)
    discover([tmp_path / "plugin.py", EXAMPLES / "plain.py"])
    built = {name: BACKBONES.get(name)(0, tmp_path, None) for name in ("plain", "wordless")}
    assert capabilities(built["plain"]) == {"word_embeddings"} and capabilities(built["wordless"]) == set()
    assert capabilities(BACKBONES.get("tiny")(0, tmp_path, "random")) == {"word_embeddings"}


def test_the_hard_protocol_gets_the_towers_features_in_the_preflight(tmp_path: Path, cache_dir: Path) -> None:
    """A protocol that asks for image features is checked with the frozen tower's, as its cells are."""
    grid = Grid(GridSpec(methods=["sprc"], noise_rates=[0.0, 0.5], seeds=[0, 1], dataset="shapes-mini",
                         noise_protocol="hard", output=tmp_path / "out", cache_dir=cache_dir))
    assert preflight(grid, announce=lambda m: None) is None
    assert grid.resources._tokens and nothing_under(tmp_path / "out")


def test_a_backbone_written_from_the_page_alone_runs_sprc_and_tme(tmp_path: Path, cache_dir: Path) -> None:
    result = runner.invoke(app, ["run", "--plugin", str(EXAMPLES / "plain.py"), "--backbone", "plain", "--methods",
                                 "sprc,tme", "--noise", "0.5", "--epochs", "1", "--batch-size", "64", "--dataset",
                                 "shapes-mini", "--cache-dir", str(cache_dir), "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    runs = ResultsStore(tmp_path / "out").read("runs")
    trained = runs[~runs.is_reference]
    assert sorted(zip(trained.method, trained.status)) == [("sprc", "completed"), ("tme", "completed")]


STUDY = """
[study]
output = "{output}"
cache_dir = "{cache_dir}"
report = ""

[[grid]]
kind = "run"
dataset = "shapes-mini"
noise_protocol = "{protocol}"
methods = ["sprc"]
noise = [0.5]
"""


@pytest.mark.parametrize("command", ["calibrate", "study"])
def test_calibrate_and_study_take_plugin_and_check_their_grids(tmp_path: Path, cache_dir: Path, command: str) -> None:
    """A protocol defined by ``--plugin`` alone is found, and its mislabelled samples refused before any cell."""
    name = f"mislabels_{command}"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(NOISE.format(name=name, breakage=MISLABEL))
    out = tmp_path / "out"
    if command == "calibrate":
        args = ["calibrate", "--dataset", "shapes-mini", "--noise-protocol", name, "--output", str(out)]
    else:
        (tmp_path / "study.toml").write_text(STUDY.format(output=out, cache_dir=cache_dir, protocol=name))
        args = ["study", str(tmp_path / "study.toml")]
    if command == "calibrate":
        args += ["--cache-dir", str(cache_dir)]
    result = runner.invoke(app, [*args, "--plugin", str(plugin)])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and f"noise protocol '{name}' (file {plugin})" in text and "(rule:" in text, text
    assert nothing_under(out)


def test_report_takes_plugin(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "--results", str(tmp_path), "--plugin", str(tmp_path / "missing.py")])
    assert result.exit_code == 2 and "missing.py: no such file" in " ".join(result.output.split())


def test_check_plugin_says_what_it_checked_and_what_a_backbone_lacks(tmp_path: Path, cache_dir: Path) -> None:
    (tmp_path / "plugin.py").write_text(NO_WORDS.replace('name = "wordless"', 'name = "wordless_checked"'))
    result = runner.invoke(app, ["check-plugin", str(tmp_path / "plugin.py"), "--cache-dir", str(cache_dir)])
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and "backbone wordless_checked: conforms" in text, text
    assert "checked: built twice from one seed alike" in text and "lacks word_embeddings: tme refused on it" in text
