"""Nothing a user wrote breaks (issue 46): the example plugins as ``docs/examples/`` held them
at commit 4e79e0a (one of each kind, kept verbatim in ``tests/plugins_4e79e0a/``), copied out
of the repository, pass ``cirbench check-plugin`` unchanged; the import paths they and the
docs used still work."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

OLD = Path(__file__).resolve().parent / "plugins_4e79e0a"
ROOT = Path(__file__).resolve().parents[1]
FILES = ("squares.py", "small_loss.py", "tiny_small.py", "word_drop.py")


def test_the_kept_files_are_those_of_the_commit() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for name in FILES:
        shown = subprocess.run(["git", "show", f"4e79e0a:docs/examples/{name}"], cwd=ROOT, capture_output=True, text=True)
        if shown.returncode:
            pytest.skip(f"commit 4e79e0a not in this clone: {shown.stderr.strip()}")
        assert (OLD / name).read_text() == shown.stdout, name


def test_the_old_example_plugins_pass_check_plugin_unchanged(tmp_path: Path, cache_dir: Path) -> None:
    outside = tmp_path / "old_plugins"
    shutil.copytree(OLD, outside)
    result = subprocess.run([sys.executable, "-m", "cirbench.cli", "check-plugin", str(outside), "--cache-dir", str(cache_dir)],
                            capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    for line in ("method small_loss: conforms", "dataset squares: conforms", "backbone tiny-small: conforms",
                 "noise protocol word_drop: conforms"):
        assert line in result.stdout, result.stdout


def test_the_documented_import_paths_still_work() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from cirbench.backbones.registry import BACKBONES, BackboneFactory
        from cirbench.data.loader import DatasetLoader
        from cirbench.data.proposal import NoiseContext, NoiseProtocol, Proposal, choose_noisy, untouched
        from cirbench.data.registry import DATASETS, ShapesLoader
        from cirbench.plugins import discover, discover_methods
    assert issubclass(ShapesLoader, DatasetLoader) and isinstance(DATASETS.get("shapes"), ShapesLoader)
    assert "tiny" in BACKBONES and isinstance(BACKBONES.get("tiny"), BackboneFactory)
    assert all(callable(f) for f in (NoiseContext, NoiseProtocol, Proposal, choose_noisy, untouched, discover, discover_methods))


def test_the_old_names_warn_and_still_work(tmp_path: Path) -> None:
    from cirbench.plugins import discover_methods

    with pytest.warns(DeprecationWarning, match="use cirbench.plugins.discover"):
        found = discover_methods()
    assert "sprc" in found.methods
    legacy = tmp_path / "legacy_backbone.py"
    legacy.write_text((OLD / "tiny_small.py").read_text().replace('"tiny-small"', '"tiny-small-legacy"'))
    from cirbench.backbones.registry import BACKBONES
    from cirbench.plugins import discover

    with pytest.warns(DeprecationWarning, match="a BackboneFactory subclass is deprecated"):
        found = discover([legacy])
    assert found.errors == [] and BACKBONES.get("tiny-small-legacy").default_lr == 1e-3
