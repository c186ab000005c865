"""docs/adding-a-method.md is enough to write a method: its two templates (a per-batch and an
epoch-level method) pass ``cirbench check-plugin``, its imports import, and its tables of
``MethodConfig``'s fields and the contract's dataclasses match the code."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cirbench.cli import app
from cirbench.method import Batch, MethodConfig, Partition, StepOutput, TrainingContext

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "adding-a-method.md").read_text()
TEMPLATES = ["template_per_batch.py", "template_epoch.py"]


@pytest.mark.parametrize("name", TEMPLATES)
def test_a_template_passes_check_plugin(name: str, cache_dir: Path) -> None:
    path = ROOT / "docs" / "examples" / name
    assert f"](examples/{name})" in PAGE
    result = CliRunner().invoke(app, ["check-plugin", str(path), "--cache-dir", str(cache_dir)])
    assert result.exit_code == 0 and f"method {path.stem}: conforms" in result.output, result.output


def test_the_pages_imports_import() -> None:
    block = PAGE.split("## The imports", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    exec(compile(block, "docs/adding-a-method.md", "exec"), {})


def test_the_pages_table_of_config_fields_is_methodconfigs() -> None:
    section = PAGE.split("## `MethodConfig`'s fields", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", section, re.M))
    fields = {f.name: f.default for f in dataclasses.fields(MethodConfig)}
    assert set(rows) == set(fields)
    assert {name: None if text == "None" else float(text) for name, text in rows.items()} == fields


@pytest.mark.parametrize("cls", [Partition, TrainingContext, StepOutput, Batch])
def test_the_page_names_every_field_of_the_contract(cls: type) -> None:
    missing = [f.name for f in dataclasses.fields(cls) if f"`{f.name}" not in PAGE]
    assert not missing, f"docs/adding-a-method.md does not name {cls.__name__}'s {missing}"
