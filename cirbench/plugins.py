"""Method discovery: built-ins from ``methods/``, a user's files, installed packages.

All three paths end in the same place. Built-in plugins are plain files in the repository's
``methods/`` folder (installed as the ``cirbench_methods`` package) and are loaded by
:func:`load_plugin_file` exactly like a user's ``--plugin path.py`` (or a path listed in
``CIRBENCH_PLUGINS``); installed distributions expose methods through the entry-point
group ``cirbench.methods``. Built-ins win a name collision (the loser is reported); a
plugin that fails to import is reported and fails only when it is selected, except a file
the user named (``plugin_files``: ``--plugin``), which is an error (:attr:`Discovery.errors`,
refused by the grid before any work). A class that does not implement ``training_step``
is never registered (``Method`` is an ``nn.Module``: ``@abstractmethod`` is not enforced).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
import traceback
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from cirbench.method import Method
from cirbench.registry import Registry

METHOD_ENTRY_POINT_GROUP = "cirbench.methods"
PLUGINS_ENV = "CIRBENCH_PLUGINS"


@dataclass
class Discovery:
    """The method registry plus what went wrong while filling it: ``problems`` (warnings)
    and ``errors``, the problems of the files the user named, which stop a run."""

    methods: Registry[type[Method]]
    problems: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def builtin_methods_dir() -> Path:
    """The folder of built-in method files (``methods/`` in a clone, or the installed copy)."""
    spec = importlib.util.find_spec("cirbench_methods")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the built-in methods package 'cirbench_methods' is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def load_plugin_file(path: Path, module_name: str | None = None) -> ModuleType:
    """Import a Python file as a module (reusing it if already imported)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"plugin file not found: {path}")
    if module_name is None:
        digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
        module_name = f"cirbench_user_plugins.{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load plugin file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def methods_in(module: ModuleType) -> list[type[Method]]:
    """The concrete :class:`Method` subclasses defined in ``module`` itself."""
    return [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, Method)
        and obj.__module__ == module.__name__
        and isinstance(getattr(obj, "name", None), str)
    ]


def implements_training_step(cls: type[Method]) -> bool:
    """Whether ``cls`` (or a base class other than :class:`Method`) overrides ``training_step``."""
    return getattr(cls, "training_step", None) is not Method.training_step


def _register(discovery: Discovery, cls: type[Method], source: str, strict: bool = False) -> None:
    if not implements_training_step(cls):
        reason = (f"{source}: class {cls.__qualname__} (method {cls.name!r}) does not implement "
                  "training_step(self, batch, epoch, step) -> StepOutput")
        discovery.methods.add_broken(cls.name, reason)
        discovery.problems.append(reason)
        if strict:
            discovery.errors.append(f"--plugin {reason}")
        return
    if cls.name in discovery.methods:
        winner = discovery.methods.entry(cls.name).source
        discovery.problems.append(f"method {cls.name!r} from {source} ignored: the name is taken by {winner}")
        return
    discovery.methods.add(cls.name, cls, source)


def _short_error(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def import_error(path: Path, exc: BaseException) -> str:
    """One paragraph on why the plugin file ``path`` failed to import: the file and line
    (of a SyntaxError, or the plugin's own line that raised) and the error."""
    if isinstance(exc, SyntaxError):
        where = f"{exc.filename or path}, line {exc.lineno}"
        code = f": {exc.text.strip()!r}" if exc.text else ""
        return f"{where}: {type(exc).__name__}: {exc.msg}{code}"
    resolved = str(Path(path).resolve())
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == resolved]
    where = f"{resolved}, line {frames[-1].lineno}" if frames else resolved
    return f"{where}: {' '.join(_short_error(exc).split())}"


def discover_methods(plugin_files: list[Path] | None = None) -> Discovery:
    """Build the method registry: built-ins, then the user's files, then entry points."""
    discovery = Discovery(Registry("method"))
    for path in sorted(builtin_methods_dir().glob("*.py")):
        if path.name.startswith("_"):
            continue
        try:
            module = load_plugin_file(path, f"cirbench_methods.{path.stem}")
        except Exception as exc:  # a broken plugin must not take the others down
            discovery.methods.add_broken(path.stem, f"{path}: {_short_error(exc)}")
            discovery.problems.append(f"built-in plugin {path.name} failed to load: {_short_error(exc)}")
            continue
        for cls in methods_in(module):
            _register(discovery, cls, f"built-in {path.name}")

    env_files = [Path(p) for p in os.environ.get(PLUGINS_ENV, "").split(os.pathsep) if p]
    named = {Path(p).resolve() for p in plugin_files or []}
    for path in [*env_files, *(plugin_files or [])]:
        strict = Path(path).resolve() in named
        try:
            module = load_plugin_file(path)
        except Exception as exc:
            discovery.methods.add_broken(Path(path).stem, f"{path}: {_short_error(exc)}")
            discovery.problems.append(f"plugin file {path} failed to load: {_short_error(exc)}")
            if strict:
                why = "no such file" if not Path(path).is_file() else f"cannot be imported: {import_error(Path(path), exc)}"
                discovery.errors.append(f"--plugin {path}: {why}")
            continue
        found = methods_in(module)
        if not found:
            discovery.problems.append(f"plugin file {path} defines no Method subclass with a name")
        for cls in found:
            _register(discovery, cls, f"file {Path(path).resolve()}", strict)

    for ep in entry_points(group=METHOD_ENTRY_POINT_GROUP):
        source = f"package {ep.dist.name} {ep.dist.version}" if ep.dist else f"entry point {ep.value}"
        try:
            cls = ep.load()
        except Exception as exc:
            discovery.methods.add_broken(ep.name, f"{source}: {_short_error(exc)}")
            discovery.problems.append(f"entry point {ep.name!r} ({source}) failed to load: {_short_error(exc)}")
            continue
        if not (inspect.isclass(cls) and issubclass(cls, Method)):
            discovery.problems.append(f"entry point {ep.name!r} ({source}) is not a Method subclass")
            continue
        _register(discovery, cls, source)
    return discovery
