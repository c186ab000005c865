"""What a researcher expects of a package: a licence and a citation file that agree with
``pyproject.toml``, ``cirbench --version``, and help texts that wrap at 80 columns without
cutting a word (rich ellipsises a word wider than its column)."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import click
import pytest
import typer
from typer.testing import CliRunner

import cirbench
from cirbench.cli import app
from cirbench.cli.options import WEIGHTS_HELP

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _commands(command: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The argument path of every command and group under ``command``."""
    found = [path]
    for name, sub in getattr(command, "commands", {}).items():
        found += _commands(sub, (*path, name))
    return found


def test_the_licence_and_the_citation_agree_with_the_package() -> None:
    assert PROJECT["license"] == "MIT"
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "Copyright (c) 2026 the cirbench authors" in licence
    citation = (ROOT / "CITATION.cff").read_text()
    assert re.search(r"^cff-version: 1\.2\.0$", citation, re.M) and re.search(r"^license: MIT$", citation, re.M)
    assert re.search(r"^version: (\S+)$", citation, re.M)[1] == PROJECT["version"] == cirbench.__version__
    assert re.search(r'^  - name: "The cirbench developers"$', citation, re.M)  # an entity, not a placeholder person
    assert re.search(r'^date-released: "\d{4}-\d{2}-\d{2}"$', citation, re.M) and "the cirbench authors" not in citation


def test_version_prints_the_installed_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"cirbench {version('cirbench')}"
    assert version("cirbench") == PROJECT["version"]


@pytest.mark.parametrize("path", _commands(typer.main.get_command(app)), ids=lambda p: " ".join(p) or "cirbench")
def test_help_is_not_cut_at_80_columns(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert result.exit_code == 0, result.output
    assert max(map(len, result.output.splitlines())) <= 80
    assert "…" not in result.output, f"a word is cut in `cirbench {' '.join(path)} --help`:\n{result.output}"


def test_the_ablate_example_and_the_weights_choices_are_shown_whole() -> None:
    text = " ".join(CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "80"}).output.replace("│", " ").split())
    assert "E.g. --ablate conesep adds conesep:no_gfq, conesep:no_nbl, conesep:no_btu and conesep:no_rcl" in text
    from cirbench.backbones import blip2, clip
    from cirbench.backbones.tiny_pretrain import DEFAULT_TINY_WEIGHTS, TINY_WEIGHTS

    assert f"tiny: {DEFAULT_TINY_WEIGHTS} (the default" in WEIGHTS_HELP
    assert all(tag in WEIGHTS_HELP for tag in TINY_WEIGHTS)
    assert f"(default: {blip2.DEFAULT_WEIGHTS})" in WEIGHTS_HELP and f"(default: {clip.DEFAULT_WEIGHTS})" in WEIGHTS_HELP
    assert " ".join(WEIGHTS_HELP.split()[:6]) in text
