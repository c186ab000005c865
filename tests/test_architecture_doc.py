"""``docs/architecture.md`` matches the code: every path it names exists (a path with a
folder from the repository root or from ``cirbench/``, a bare module name somewhere under
``cirbench/`` or ``methods/``, a linked page beside it), every ``path: name`` names something
that file defines, and its table of the four plugin kinds names each kind's real base class,
contract and registry."""

from __future__ import annotations

import re
from pathlib import Path

import cirbench.plugins as plugins

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
TEXT = re.sub(r"```.*?```", "", DOC.read_text(encoding="utf-8"), flags=re.S)  # spans only, no fenced blocks
FILE = re.compile(r"^[\w./-]+\.(py|md|toml|pt)$|^[\w.-]+(/[\w.-]+)*/$")


def _exists(path: str) -> bool:
    if "/" in path.rstrip("/"):
        return (ROOT / path).exists() or (ROOT / "cirbench" / path).exists()
    if path.endswith("/"):
        return any(p.is_dir() for p in ROOT.rglob(path.rstrip("/")) if ".venv" not in p.parts)
    return any((ROOT / top).rglob(path) for top in ("cirbench", "methods"))


def test_every_path_it_names_exists() -> None:
    spans = re.findall(r"`([^`]+)`", TEXT)
    paths = {s.split(":")[0].strip() for s in spans if FILE.match(s.split(":")[0].strip())}
    assert len(paths) > 40  # the reading finds the doc's paths at all
    assert sorted(p for p in paths if not _exists(p)) == []
    links = re.findall(r"\]\(([\w.-]+\.md)(?:#[\w-]+)?\)", TEXT)
    assert links and sorted(link for link in links if not (DOC.parent / link).exists()) == []


def test_every_path_and_name_is_defined_there() -> None:
    pairs = re.findall(r"`([\w./-]+\.py): ([\w.]+)`", TEXT) + re.findall(r"`(\w+)` \(`([\w.-]+/[\w./-]+\.py)`\)", TEXT)
    pairs = [(a, b) if a.endswith(".py") else (b, a) for a, b in pairs]
    assert len(pairs) > 20
    missing = []
    for path, name in pairs:
        file = ROOT / path if (ROOT / path).exists() else ROOT / "cirbench" / path
        last = name.split(".")[-1]
        if not re.search(rf"^\s*(def|class) {last}\b|^\s*{last}\b[^=\n]*=", file.read_text(encoding="utf-8"), re.M):
            missing.append(f"{path}: {name}")
    assert missing == []


def test_the_table_of_kinds_is_the_code() -> None:
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:6]]
            for line in TEXT.splitlines() if line.startswith("| base class") or line.startswith("| registry")}
    bases = [re.match(r"`(\w+)`", cell).group(1) for cell in rows["base class"]]
    assert bases == [kind.base.__name__ for kind in plugins.KINDS]
    assert [re.match(r"`([\w.]+)`", cell).group(1) for cell in rows["registry"]] == [
        "Discovery.methods", "DATASETS", "NOISE_PROTOCOLS", "BACKBONES"]
    assert [kind.group for kind in plugins.KINDS] == re.findall(r"`(cirbench\.\w+)`", next(
        line for line in TEXT.splitlines() if line.startswith("| entry-point group")))
