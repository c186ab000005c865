"""An experiment as one file: a TOML study that lists the grids of a study (``run``,
``calibrate``, ``sweep``; an ablation is a ``run`` with ``ablate``), each with its options,
the results folder they share and where the report goes. ``cirbench study FILE`` runs the
grids in order, resumably (finished cells are skipped), then builds the report.

```toml
[study]
output = "results"          # the results folder every grid writes to
report = "reports"          # where the report goes ("" for none)
readme = "README.md"        # optional: a file whose generated results block the report rewrites

[defaults]                  # options every grid takes unless it sets its own
seeds = [0, 1, 2]

[[grid]]
kind = "run"
methods = ["sprc", "tme"]
noise = [0, 0.5, 0.8]
frontier = true             # optional: the kept-set cells of --frontier, --noise-types, --replay
noise_types = true          # (docs/kept-sets.md)
replay = ["tme"]

[[grid]]
kind = "sweep"              # the same trials for every method, picked on the held-out split
methods = ["sprc", "tme"]
noise = [0.5, 0.8]
trials = 6
seeds = [0]                 # the seed whose held-out split picks each method's trial
tuned_seeds = [0, 1, 2]     # optional: then each pick re-run on these seeds (the tuned leaderboard)
```

A sweep with ``tuned_seeds`` is planned in two steps: its trials, then, once they are done,
each method's picked trial at each rate on ``tuned_seeds`` (:mod:`cirbench.api.tuned`).

This module reads and checks the file only (no torch, no engine): a bad file is a
:class:`StudyError` naming the file, the entry and what is wrong, before any work.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STUDY_KEYS: dict[str, str] = {"output": "str", "report": "str", "readme": "str", "cache_dir": "str", "jobs": "int",
                              "description": "str"}
COMMON: dict[str, str] = {
    "seeds": "ints", "dataset": "str", "data_root": "str", "dataset_options": "table", "backbone": "str", "weights": "str",
    "noise_protocol": "str", "epochs": "int", "batch_size": "int", "holdout": "number", "plugins": "strs", "device": "str",
    "precision": "str",
}
KINDS: dict[str, dict[str, str]] = {
    "run": {**COMMON, "methods": "strs", "noise": "numbers", "ablate": "strs", "set": "strs", "frontier": "bool",
            "frontier_purity": "numbers", "noise_types": "bool", "replay": "strs"},
    "sweep": {**COMMON, "methods": "strs", "noise": "numbers", "trials": "int", "tuned_seeds": "ints"},
    "calibrate": dict(COMMON),
}
REQUIRED: dict[str, tuple[str, ...]] = {"run": (), "sweep": ("methods",), "calibrate": ()}
RANGES: dict[str, tuple[str, Any]] = {
    "seeds": ("every seed >= 0", lambda v: all(x >= 0 for x in v)), "noise": ("every rate in [0, 1)", lambda v: all(0 <= x < 1 for x in v)),
    "tuned_seeds": ("every seed >= 0, each once", lambda v: all(x >= 0 for x in v) and len(set(v)) == len(v)),
    "epochs": (">= 1", lambda v: v >= 1), "batch_size": (">= 2", lambda v: v >= 2), "trials": (">= 1", lambda v: v >= 1),
    "holdout": ("in [0, 1)", lambda v: 0 <= v < 1), "jobs": (">= 0", lambda v: v >= 0),
    "frontier_purity": ("every purity in (0, 1)", lambda v: all(0 < x < 1 for x in v)),
}
"""The values an option may take beyond its type (the grids check the names: methods, datasets, ...)."""
TYPE_NAMES = {"str": "a string", "bool": "true or false", "int": "an integer", "number": "a number",
              "strs": "a list of strings", "ints": "a list of integers", "numbers": "a list of numbers", "table": "a table of key = \"value\""}


class StudyError(ValueError):
    """A study file that cannot run: unreadable TOML, an unknown key or grid kind, a bad value."""


@dataclass
class StudyGrid:
    """One grid of a study: its ``kind`` and its options (the study's defaults merged in),
    ``where`` naming it in messages (``grid 2 (sweep)``)."""

    kind: str
    options: dict[str, Any]
    where: str


@dataclass
class Study:
    """A parsed study file (see the module docstring)."""

    path: Path
    output: Path
    report: Path | None
    cache_dir: Path = Path("datasets")
    jobs: int = 0
    grids: list[StudyGrid] = field(default_factory=list)
    readme: Path | None = None


def _is(value: Any, kind: str) -> bool:
    """Whether ``value`` is of the option type ``kind`` (see :data:`TYPE_NAMES`)."""
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    checks = {
        "str": lambda v: isinstance(v, str), "bool": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": number, "strs": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "ints": lambda v: isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v),
        "numbers": lambda v: isinstance(v, list) and all(number(x) for x in v),
        "table": lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
    }
    return checks[kind](value)


def _checked(path: Path, where: str, options: dict[str, Any], allowed: dict[str, str]) -> dict[str, Any]:
    """``options`` once every key is allowed and every value of its type (StudyError otherwise)."""
    for key, value in options.items():
        if key not in allowed:
            raise StudyError(f"{path}: {where}: unknown key {key!r}; valid keys: {', '.join(sorted(allowed))}")
        if not _is(value, allowed[key]):
            raise StudyError(f"{path}: {where}: {key} must be {TYPE_NAMES[allowed[key]]}, got {value!r}")
        if key in RANGES and not RANGES[key][1](value):
            raise StudyError(f"{path}: {where}: {key} must be {RANGES[key][0]}, got {value!r}")
    return options


def _grid(path: Path, index: int, entry: Any, defaults: dict[str, Any]) -> StudyGrid:
    """The ``index``-th ``[[grid]]`` entry, checked, with the defaults its kind takes merged in."""
    where = f"grid {index + 1}"
    if not isinstance(entry, dict):
        raise StudyError(f"{path}: {where}: a grid must be a table ([[grid]])")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise StudyError(f"{path}: {where}: unknown grid kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    where = f"grid {index + 1} ({kind})"
    options = _checked(path, where, {k: v for k, v in entry.items() if k != "kind"}, KINDS[kind])
    missing = [key for key in REQUIRED[kind] if key not in options]
    if missing:
        raise StudyError(f"{path}: {where}: {', '.join(missing)} is required")
    if kind == "run" and "methods" not in options and "ablate" not in options:
        raise StudyError(f"{path}: {where}: give methods, ablate or both")
    inherited = {k: v for k, v in defaults.items() if k in KINDS[kind]}
    merged = {**inherited, **options}
    if "tuned_seeds" in merged and len(merged.get("seeds", [0])) != 1:
        raise StudyError(f"{path}: {where}: tuned_seeds re-runs the trial each method's sweep picked on one seed's "
                         f"held-out split: give the sweep one seed (seeds = [0]), not {merged['seeds']!r}")
    return StudyGrid(kind, merged, where)


def load_study(path: Path | str) -> Study:
    """Read and check the study file ``path`` (see the module docstring); StudyError on a bad one."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise StudyError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise StudyError(f"{path}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"study", "defaults", "grid"})
    if unknown:
        raise StudyError(f"{path}: unknown key {unknown[0]!r}; valid keys: study, defaults, grid")
    head = _checked(path, "[study]", data.get("study", {}), STUDY_KEYS)
    defaults = _checked(path, "[defaults]", data.get("defaults", {}), {k: v for kind in KINDS.values() for k, v in kind.items()})
    entries = data.get("grid", [])
    if not isinstance(entries, list) or not entries:
        raise StudyError(f"{path}: no grid: add at least one [[grid]] entry with a kind ({', '.join(KINDS)})")
    report = head.get("report", "reports")
    return Study(
        path, Path(head.get("output", "results")), Path(report) if report else None, Path(head.get("cache_dir", "datasets")),
        int(head.get("jobs", 0)), [_grid(path, i, entry, defaults) for i, entry in enumerate(entries)],
        Path(head["readme"]) if head.get("readme") else None,
    )
