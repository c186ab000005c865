"""The shape of the code: no import cycle in ``cirbench/``, layers that point one way
(data -> backbones -> methods -> engine -> report -> api -> cli, with ``results/`` beside them),
the report's rooms that point one way too (analysis -> tables, figures -> render), small
functions and modules, and a ``--help`` that imports no torch.

The import graph is read with :mod:`ast` from the source, so it counts every import: at
module level, inside functions and under ``if TYPE_CHECKING``. A function-level import of
a ``cirbench`` module is allowed in the command-line modules only, where it keeps
``cirbench --help`` free of torch (a documented exception); nowhere can one hide a cycle.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cirbench"
CLI = "cirbench.cli"
"""The command-line sub-package: the top layer, and the only place a function imports ``cirbench``."""
LAYERS: list[tuple[str, ...]] = [
    # rank 0: what describes a run (cirbench/settings/) and the registry type, with no cirbench dependency above them
    ("cirbench", "cirbench.settings", "cirbench.registry", "cirbench._moved", "cirbench.config"),
    ("cirbench.data",),
    ("cirbench.backbones",),
    # the plugin contract with the math methods share (cirbench/method/), discovery, and the old paths of that math
    ("cirbench.method", "cirbench.plugins", "cirbench.losses", "cirbench.ot", "cirbench.search"),
    ("cirbench.engine",),
    ("cirbench.report",),
    ("cirbench.api",),
    (CLI,),
]
RESULTS = "cirbench.results"
"""Beside the layers: any layer may use the results store; it uses only rank 0."""


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module of ``cirbench`` that ``name`` (a module, or a name in one) is in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node, node.module)] + [(node, f"{node.module}.{a.name}") for a in node.names]
    return [(node, name) for node, name in found if name.split(".")[0] == "cirbench"]


def _graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        targets = {_resolve(name) for _, name in _imports(ast.parse(path.read_text()))}
        graph[module] = {t for t in targets if t and t != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _layer(module: str) -> float:
    if module == RESULTS or module.startswith(RESULTS + "."):
        return 0.5
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or (p != "cirbench" and module.startswith(p + ".")) for p in prefixes):
            return float(rank)
    raise AssertionError(f"{module} is in no layer of tests/test_architecture.py: add it to LAYERS")


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_cirbench() -> None:
    assert _cycles(_graph()) == []


def test_no_import_behind_type_checking() -> None:
    hidden = [str(path.relative_to(ROOT)) for path in MODULES.values()
              if any(isinstance(n, ast.If) and "TYPE_CHECKING" in ast.dump(n.test) for n in ast.walk(ast.parse(path.read_text())))]
    assert hidden == []


def test_function_level_imports_of_cirbench_only_in_the_cli() -> None:
    lazy = []
    for module, path in MODULES.items():
        for function in ast.walk(ast.parse(path.read_text())):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _in(module, CLI):
                lazy += [f"{module}.{function.name}: {name}" for _, name in _imports(function)]
    assert lazy == []


def test_layers_point_one_way() -> None:
    upward = []
    for module, targets in _graph().items():
        for target in targets:
            below_results = _layer(module) == 0.5 and _layer(target) > 0.5
            if (_layer(target) > _layer(module) and _layer(target) != 0.5) or below_results:
                upward.append(f"{module} -> {target}")
    assert sorted(upward) == []


def test_functions_and_modules_are_small() -> None:
    long_functions, long_modules = [], []
    for module, path in MODULES.items():
        text = path.read_text()
        if text.count("\n") > 500:
            long_modules.append(f"{module}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                long_functions.append(f"{module}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    long_modules += [f"methods/{path.name}: {n} lines" for path in sorted((ROOT / "methods").glob("*.py"))
                     if (n := path.read_text().count("\n")) > 500]
    assert long_functions == [] and long_modules == []
    assert (PACKAGE / "cli" / "main.py").read_text().count("\n") < 300


def test_help_imports_no_torch() -> None:
    code = ("import sys; from typer.testing import CliRunner; from cirbench.cli import app; "
            "assert all(CliRunner().invoke(app, [*c, '--help']).exit_code == 0 for c in (['run'], ['calibrate'], ['start', 'rebuild'], [])); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_benchmarks_import_no_command_line_module() -> None:
    """A benchmark builds its grid as the Python API does (:mod:`cirbench.api`), not through the CLI."""
    found = sorted(f"{path.name}: {name}" for path in (ROOT / "benchmarks").glob("*.py")
                   for _, name in _imports(ast.parse(path.read_text())) if _in(name, CLI))
    assert len(list((ROOT / "benchmarks").glob("*.py"))) > 3 and found == []


def test_the_report_imports_nothing_from_the_engine() -> None:
    """What a report needs of the engine's rules and labels lives in ``cirbench/results/``."""
    found = sorted(f"{module} -> {target}" for module, targets in _graph().items() if module.startswith("cirbench.report")
                   for target in targets if target.startswith("cirbench.engine"))
    assert found == []


REPORT = "cirbench.report"
REPORT_ROOMS: dict[str, set[str]] = {
    "analysis": set(),
    "tables": {"analysis"},
    "figures": {"analysis"},
    "render": {"analysis", "tables", "figures"},
}
"""The report's rooms and the other rooms each may import: the analysis (results loaded, what
they say computed) none; the tables and the figures, side by side, only the analysis; the
rendering (content in order, written out) all three. No room imports ``cirbench.report``
itself, which imports the rendering."""
REPORT_NAMES = {"build_report", "ReportError", "load_results"}
"""What ``cirbench.report`` itself gives: the report's public names."""


def _room(module: str) -> str | None:
    """The room of a module under ``cirbench/report/`` (None for ``cirbench.report`` itself)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and _in(module, REPORT) else None


def test_every_report_module_is_in_a_room() -> None:
    """Under ``cirbench/report/`` only ``__init__.py`` sits beside the rooms, and every folder is one of them."""
    report = [m for m in MODULES if _in(m, REPORT)]
    assert len(report) > 30 and all(r in report for r in (f"{REPORT}.{room}" for room in REPORT_ROOMS))
    assert sorted(m for m in report if m != REPORT and _room(m) not in REPORT_ROOMS) == []


def test_the_report_rooms_import_one_way() -> None:
    """Analysis -> tables, figures -> render: no room imports one to its right, nor its sibling."""
    crossing = sorted(f"{module} -> {target}" for module, targets in _graph().items() if _room(module) in REPORT_ROOMS
                      for target in targets if _in(target, REPORT) and _room(target) != _room(module)
                      and _room(target) not in REPORT_ROOMS[_room(module)])
    assert crossing == []


def test_only_the_figures_draw() -> None:
    """matplotlib is imported in the figures room alone: the other rooms compute, tabulate or write text."""
    drawing = sorted(module for module, path in MODULES.items() if _in(module, REPORT) and _room(module) != "figures"
                     for node in ast.walk(ast.parse(path.read_text()))
                     for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else
                                  [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                     if name.split(".")[0] == "matplotlib")
    assert drawing == []


@pytest.mark.parametrize("room", sorted(REPORT_ROOMS))
def test_each_room_says_what_it_holds_and_imports_nothing(room: str) -> None:
    """A room's ``__init__.py`` is its docstring alone (no re-exports to build a cycle from),
    and the docstring names the rooms it may import."""
    tree = ast.parse(MODULES[f"{REPORT}.{room}"].read_text())
    docstring = ast.get_docstring(tree) or ""
    assert docstring.startswith(f"The report's {room} room") and len(tree.body) == 1
    assert all(f"``{other}``" in docstring for other in REPORT_ROOMS[room])


def test_the_report_keeps_its_public_names() -> None:
    import cirbench.report

    assert set(cirbench.report.__all__) == REPORT_NAMES and all(hasattr(cirbench.report, n) for n in REPORT_NAMES)


ROOMS: dict[str, dict[str, set[str]]] = {
    "cirbench.engine": {"planning": set(), "cell": {"planning"}, "running": {"planning", "cell"},
                        "tools": {"planning", "cell", "running"}},
    "cirbench.data": {"checks": set(), "noise": set(), "datasets": {"checks"}},
    "cirbench.report.analysis": {"loading": set(), "statistics": {"loading"}, "verdicts": {"loading", "statistics"},
                                 "rankings": {"loading", "statistics", "verdicts"}},
}
"""The rooms of the engine, the data layer and the report's analysis, each with the rooms of
its folder it may import: planning a grid never imports a cell's life, a cell's life never
what runs it; the datasets read files through the checks, the noise layer stands alone; the
analysis loads, then tests, then judges, then ranks."""
FOLDER_ROOTS = {"cirbench.data.base", "cirbench.data.loader", "cirbench.data.proposal", "cirbench.data.registry"}
"""The modules that sit beside a folder's rooms: the data model every data room uses, and three
documented old paths (:mod:`cirbench._moved`)."""
MOVED = {"cirbench.losses": "cirbench.method.losses", "cirbench.ot": "cirbench.method.ot",
         "cirbench.search": "cirbench.method.search", "cirbench.config": "cirbench.settings.config",
         "cirbench.data.loader": "cirbench.data.datasets.loader", "cirbench.data.proposal": "cirbench.data.noise.proposal",
         "cirbench.data.registry": "cirbench.data.datasets.registry"}
"""The documented import paths that moved in issue 78, and their new homes."""


def _folder_room(module: str) -> tuple[str, str] | None:
    """(folder, room) of a module inside a roomed folder, None outside one."""
    for folder in ROOMS:
        if module.startswith(folder + "."):
            return folder, module[len(folder) + 1:].split(".")[0]
    return None


def test_every_module_of_a_roomed_folder_is_in_a_room() -> None:
    inside = [m for m in MODULES if _folder_room(m) and m not in FOLDER_ROOTS]
    assert len(inside) > 60  # the reading finds the folders' modules at all
    assert sorted(m for m in inside if _folder_room(m)[1] not in ROOMS[_folder_room(m)[0]]) == []


def test_the_rooms_import_one_way() -> None:
    """No module imports a room of its folder that its own room may not: planning never
    imports a cell's life, a cell's life never what runs it, and so on."""
    crossing = []
    for module, targets in _graph().items():
        where = _folder_room(module)
        if where is None or module in FOLDER_ROOTS:
            continue
        folder, room = where
        for target in targets:
            there = _folder_room(target)
            if there and there[0] == folder and target not in FOLDER_ROOTS and there[1] != room \
                    and there[1] not in ROOMS[folder][room]:
                crossing.append(f"{module} -> {target}")
    assert sorted(crossing) == []


def test_the_room_check_finds_an_upward_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell's life importing the runner is caught (the check can fail)."""
    graph = _graph()
    graph["cirbench.engine.cell.life"] = graph["cirbench.engine.cell.life"] | {"cirbench.engine.running.runner"}
    monkeypatch.setattr(sys.modules[__name__], "_graph", lambda: graph)
    with pytest.raises(AssertionError):
        test_the_rooms_import_one_way()


@pytest.mark.parametrize("room", [f"{folder}.{room}" for folder, rooms in ROOMS.items() for room in rooms])
def test_each_room_says_what_it_holds_and_may_import(room: str) -> None:
    """A room's ``__init__.py`` is its docstring alone, naming the rooms it may import."""
    tree = ast.parse(MODULES[room].read_text())
    folder, name = room.rsplit(".", 1)
    docstring = ast.get_docstring(tree) or ""
    assert len(tree.body) == 1 and f"{name} room" in docstring
    assert all(f"``{other}``" in docstring for other in ROOMS[folder][name])


def test_no_folder_holds_more_than_about_a_dozen_modules() -> None:
    folders: dict[Path, int] = {}
    for path in MODULES.values():
        if path.name != "__init__.py":
            folders[path.parent] = folders.get(path.parent, 0) + 1
    assert len(folders) > 15 and sorted(f"{p.relative_to(ROOT)}: {n}" for p, n in folders.items() if n > 13) == []


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_moved_documented_path_still_imports_with_a_warning(old: str) -> None:
    code = (f"import warnings, importlib; warnings.simplefilter('always'); "
            f"caught = warnings.catch_warnings(record=True); seen = caught.__enter__(); "
            f"old = importlib.import_module({old!r}); new = importlib.import_module({MOVED[old]!r}); "
            f"print(old is new, any(issubclass(w.category, DeprecationWarning) and {MOVED[old]!r} in str(w.message) for w in seen))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]


def test_every_package_is_installed() -> None:
    """pyproject.toml lists every package of ``cirbench/`` (a missing one imports in a checkout
    and fails in a wheel)."""
    listed = set(re.findall(r'"(cirbench[\w.]*)"', (ROOT / "pyproject.toml").read_text().split("[tool.setuptools]")[1]
                            .split("]")[0]))
    packages = {m for m, path in MODULES.items() if path.name == "__init__.py"}
    assert packages and sorted(packages - listed) == []


@pytest.mark.parametrize("module", ["cirbench.engine.planning.spec", "cirbench.engine.planning.kept_plan"])
def test_the_plan_imports_no_torch(module: str) -> None:
    """The spec, its run ids and labels, and the kept-set cells' plan are plain Python: torch
    comes only with what they name."""
    tree = ast.parse(MODULES[module].read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert {"torch", "numpy"} & names == set()


ROOT_LAYERS = (0, 3)
"""The layers whose modules may sit at the package root: the shared helpers and the plugin
contract (with discovery and saved weights); every other layer is a folder."""


def test_the_folders_show_the_layers() -> None:
    """A module at the root of ``cirbench/`` is a shared helper or the plugin contract."""
    roots = [m for m, path in MODULES.items() if path.parent == PACKAGE and m != "cirbench"]
    assert len(roots) > 5  # the reading finds the root's modules at all
    assert sorted(m for m in roots if _layer(m) not in ROOT_LAYERS) == []


def test_no_private_name_is_imported_from_another_module() -> None:
    """What another module needs is public; a leading underscore stays in its module."""
    private = [f"{module}: {node.module}.{alias.name}" for module, path in MODULES.items()
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cirbench")
               for alias in node.names if alias.name.startswith("_")]
    assert private == []
