"""Claims as data: the claims the report checks, read from TOML files (the format is in
``docs/report.md``, "Adding a claim"). The shipped papers' claims are ``claims.toml`` beside
this module; a results folder's ``claims.toml``, a plugin file's ``<stem>.claims.toml``
beside it and the files in ``CIRBENCH_CLAIMS`` add their own, after them.

A claim names methods by their cirbench labels; ``{baseline}`` and ``{perfect_filter}``
stand for the methods of those roles in the results (:mod:`cirbench.results.roles`). A bad
file is a :class:`ClaimFileError` naming the file, the entry and what is wrong."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from cirbench.report.analysis.statistics.significance import DEFAULT_MARGIN
from cirbench.results.roles import ROLES

SHIPPED = Path(__file__).with_name("claims.toml")
CLAIMS_FILE = "claims.toml"
"""A results folder's own claims (a study's): ``<results>/claims.toml``."""
PLUGIN_CLAIMS_SUFFIX = ".claims.toml"
"""A plugin file ``x.py``'s claims: ``x.claims.toml`` beside it."""
CLAIMS_ENV = "CIRBENCH_CLAIMS"
"""Further claims files, separated like ``PATH``."""
ROLE_NAMES = {f"{{{role}}}" for role in ROLES}
ALL, NOISY = "all", "noisy"

_COMMON = {"kind": "str", "methods": "strs", "label": "str"}
CHECK_KEYS: dict[str, dict[str, str]] = {
    "recall": {**_COMMON, "against": "strs", "rates": "rates", "threshold": "number", "widening": "bool"},
    "sample": {**_COMMON, "against": "strs", "rates": "rates", "metric": "metric", "noise_type": "str", "offset": "number",
               "scores": "pairs"},
    "ladder": {**_COMMON, "threshold": "number"},
    "kept_set": {**_COMMON, "rates": "numbers"},
}
"""Each check kind and the keys it takes: ``recall`` (the headline recall of each method
against each of ``against``), ``sample`` (purity or AUROC of the per-sample view),
``ladder`` (each method against the one before it), ``kept_set`` (the kept set against
chance, per seed)."""
REQUIRED: dict[str, tuple[str, ...]] = {"recall": ("methods", "against"), "sample": ("methods", "metric"),
                                        "ladder": ("methods",), "kept_set": ("methods", "rates")}
METRICS = {"purity": "purity", "auroc": "AUROC"}


class ClaimFileError(ValueError):
    """A claims file the report cannot read: bad TOML, an unknown key or kind, a bad value."""


@dataclass(frozen=True)
class CheckSpec:
    """One check of a claim as its file declares it (see :data:`CHECK_KEYS`). ``rates``: a
    list, ``all`` (every rate both cells ran) or ``noisy`` (those above 0%)."""

    kind: str
    methods: tuple[str, ...]
    against: tuple[str, ...] = ()
    rates: tuple[float, ...] | str = ALL
    threshold: float = 0.0
    widening: bool = False
    label: str = ""
    metric: str = ""
    noise_type: str | None = None
    offset: float = 0.0
    scores: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ClaimSpec:
    """One claim: its text, its source in the papers, its checks and the file it came from."""

    text: str
    source: str
    checks: tuple[CheckSpec, ...]
    origin: str = ""
    short: str = ""
    """A title of a few words, for the forest plot's group labels."""
    margin: float = DEFAULT_MARGIN
    """The equivalence margin of its comparisons, in their own units (fractions: 0.01 is one
    point), declared before any result is read (:func:`~cirbench.report.analysis.statistics.significance.answer`)."""
    cells: CellsSpec | None = None
    """The cells its checks read, to set side by side (``[claim.cells]``), or None."""


@dataclass(frozen=True)
class CellsSpec:
    """A claim's cells side by side (``[claim.cells]``): ``columns`` name what each column
    holds, each of ``rows`` is a row's name and then one cell label per column; the report
    shows each cell's headline at every noise rate run (:mod:`cirbench.report.tables.claim_cells`)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Published:
    """The published tables' rows the room to win reads (the shipped file's ``[published]``)."""

    baseline: str
    baseline_row: str
    robust: tuple[str, ...]
    floor: str


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_TYPES = {
    "str": lambda v: isinstance(v, str), "bool": lambda v: isinstance(v, bool), "number": _number,
    "numbers": lambda v: isinstance(v, list) and all(map(_number, v)),
    "strs": lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) and x for x in v),
    "rates": lambda v: (isinstance(v, str) and v in (ALL, NOISY)) or (isinstance(v, list) and bool(v) and all(map(_number, v))),
    "metric": lambda v: isinstance(v, str) and v in METRICS,
    "pairs": lambda v: isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
                                                   for p in v),
}


def _typed(value: Any, kind: str) -> bool:
    return bool(_TYPES[kind](value))


_WANTED = {"str": "a string", "bool": "true or false", "number": "a number", "numbers": "a list of numbers",
           "strs": "a non-empty list of names", "rates": f"a list of noise rates, {ALL!r} or {NOISY!r}",
           "metric": f"one of {', '.join(METRICS)}", "pairs": "a list of [score_name, wording] pairs"}


def _check_spec(raw: Any, where: str) -> CheckSpec:
    if not isinstance(raw, dict):
        raise ClaimFileError(f"{where}: a check is a table ([[claim.check]])")
    kind = raw.get("kind")
    if kind not in CHECK_KEYS:
        raise ClaimFileError(f"{where}: kind {kind!r} is not one of {', '.join(CHECK_KEYS)}")
    keys = CHECK_KEYS[kind]
    for key, value in raw.items():
        if key not in keys:
            raise ClaimFileError(f"{where}: unknown key {key!r} for a {kind} check (keys: {', '.join(keys)})")
        if not _typed(value, keys[key]):
            raise ClaimFileError(f"{where}: {key} = {value!r} must be {_WANTED[keys[key]]}")
    missing = [key for key in REQUIRED[kind] if key not in raw]
    if missing:
        raise ClaimFileError(f"{where}: a {kind} check needs {', '.join(missing)}")
    names = [*raw["methods"], *raw.get("against", [])]
    bad = [n for n in names if "{" in n and n not in ROLE_NAMES]
    if bad:
        raise ClaimFileError(f"{where}: {bad[0]!r} is not a role (roles: {', '.join(sorted(ROLE_NAMES))})")
    if raw.get("widening") and not (isinstance(raw.get("rates"), list) and len(raw["rates"]) == 2):
        raise ClaimFileError(f"{where}: widening compares the gaps at two rates: give rates = [low, high]")
    if kind == "ladder" and len(raw["methods"]) < 2:
        raise ClaimFileError(f"{where}: a ladder needs two or more methods, in order")
    rates = raw.get("rates", ALL)
    return CheckSpec(
        kind, tuple(raw["methods"]), tuple(raw.get("against", ())), tuple(map(float, rates)) if isinstance(rates, list) else rates,
        float(raw.get("threshold", 0.0)), bool(raw.get("widening", False)), raw.get("label", ""), raw.get("metric", ""),
        raw.get("noise_type"), float(raw.get("offset", 0.0)), tuple(tuple(p) for p in raw.get("scores", ())),
    )


def _cells_spec(raw: Any, where: str) -> CellsSpec:
    """A claim's ``[claim.cells]`` table, checked: ``columns`` (names) and ``rows`` (each a
    row's name, then a cell label per column; a role as ``{baseline}``)."""
    if not isinstance(raw, dict) or set(raw) != {"columns", "rows"}:
        raise ClaimFileError(f"{where}: a table with columns = [names] and rows = [[row name, cell per column], ...]")
    columns, rows = raw["columns"], raw["rows"]
    if not _typed(columns, "strs"):
        raise ClaimFileError(f"{where}: columns = {columns!r} must be {_WANTED['strs']}")
    if not isinstance(rows, list) or not rows or not all(_typed(r, "strs") and len(r) == len(columns) + 1 for r in rows):
        raise ClaimFileError(f"{where}: rows = {rows!r} must be a list of [row name, then one cell label per column "
                             f"({len(columns)})]")
    bad = [n for row in rows for n in row[1:] if "{" in n and n not in ROLE_NAMES]
    if bad:
        raise ClaimFileError(f"{where}: {bad[0]!r} is not a role (roles: {', '.join(sorted(ROLE_NAMES))})")
    return CellsSpec(tuple(columns), tuple(tuple(r) for r in rows))


def _toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise ClaimFileError(f"claims file {path}: cannot be read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ClaimFileError(f"claims file {path}: not valid TOML: {exc}") from exc


def read_claims(path: Path | str) -> list[ClaimSpec]:
    """The claims of one file, in its order (ClaimFileError naming the file and entry)."""
    path = Path(path)
    data = _toml(path)
    unknown = set(data) - {"claim", "published"}
    if unknown:
        raise ClaimFileError(f"claims file {path}: unknown table {sorted(unknown)[0]!r} (tables: [[claim]], [published])")
    claims = []
    for i, raw in enumerate(data.get("claim", []), 1):
        where = f"claims file {path}, claim {i}"
        if not isinstance(raw, dict):
            raise ClaimFileError(f"{where}: a claim is a table ([[claim]])")
        for key in ("text", "source"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise ClaimFileError(f"{where}: {key} must be a non-empty string")
        unknown = set(raw) - {"text", "source", "short", "margin", "check", "cells"}
        if unknown:
            raise ClaimFileError(f"{where} ({raw['text']!r}): unknown key {sorted(unknown)[0]!r} "
                                 "(keys: text, source, short, margin, check, cells)")
        if not isinstance(raw.get("short", ""), str):
            raise ClaimFileError(f"{where} ({raw['text']!r}): short must be a string")
        margin = raw.get("margin", DEFAULT_MARGIN)
        if not _number(margin) or not margin > 0:
            raise ClaimFileError(f"{where} ({raw['text']!r}): margin = {margin!r} must be a number above 0 "
                                 "(a fraction: 0.01 is one point)")
        checks = raw.get("check", [])
        if not isinstance(checks, list) or not checks:
            raise ClaimFileError(f"{where} ({raw['text']!r}): no check ([[claim.check]])")
        specs = tuple(_check_spec(c, f"{where} ({raw['text']!r}), check {j}") for j, c in enumerate(checks, 1))
        cells = _cells_spec(raw["cells"], f"{where} ({raw['text']!r}), cells") if "cells" in raw else None
        claims.append(ClaimSpec(raw["text"], raw["source"], specs, str(path), raw.get("short", ""), float(margin), cells))
    return claims


def read_published(path: Path | str = SHIPPED) -> Published:
    """The ``[published]`` table of ``path`` (the shipped claims file by default)."""
    table = _toml(Path(path)).get("published")
    where = f"claims file {path}, [published]"
    if not isinstance(table, dict):
        raise ClaimFileError(f"{where}: missing")
    for key, kind in (("baseline", "str"), ("baseline_row", "str"), ("robust", "strs"), ("floor", "str")):
        if not _typed(table.get(key), kind):
            raise ClaimFileError(f"{where}: {key} must be {_WANTED[kind]}")
    return Published(table["baseline"], table["baseline_row"], tuple(table["robust"]), table["floor"])


def claim_files(root: Path | None = None, sources: Iterable[str] = ()) -> list[Path]:
    """Every claims file that applies to a results folder ``root`` whose runs came from
    ``sources`` (the ``runs`` table's ``method_source``), each once: the shipped file, the
    folder's own, each plugin file's (``file /path/x.py`` -> ``/path/x.claims.toml``), those
    of ``CIRBENCH_CLAIMS``."""
    files = [SHIPPED]
    if root is not None and (Path(root) / CLAIMS_FILE).is_file():
        files.append(Path(root) / CLAIMS_FILE)
    for source in sorted(set(sources)):
        if source.startswith("file "):
            beside = Path(source[len("file "):]).with_suffix(PLUGIN_CLAIMS_SUFFIX)
            if beside.is_file():
                files.append(beside)
    files += [Path(p) for p in os.environ.get(CLAIMS_ENV, "").split(os.pathsep) if p]
    return list({path.resolve(): path for path in files}.values())


def all_claims(root: Path | None = None, sources: Iterable[str] = ()) -> list[ClaimSpec]:
    """The claims of every file of :func:`claim_files`, in order; a claim (text and source)
    declared twice is checked once."""
    claims = [claim for path in claim_files(root, sources) for claim in read_claims(path)]
    return list({(c.text, c.source): c for c in claims}.values())
