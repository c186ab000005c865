"""Plugin discovery: methods, datasets, noise protocols and backbones, from built-in files, a
user's files and folders, and installed packages.

All paths end in the same place. Built-in methods are plain files in the repository's
``methods/`` folder (installed as the ``cirbench_methods`` package) and are loaded by
:func:`load_plugin_file` exactly like a user's ``--plugin path.py`` (or ``--plugin folder/``:
every ``*.py`` in it; or a path listed in ``CIRBENCH_PLUGINS``). A plugin file may define a
plugin of any of the four kinds (:data:`KINDS`): a class with a ``name`` subclassing
:class:`~cirbench.method.Method`, :class:`~cirbench.data.datasets.loader.DatasetLoader`,
:class:`~cirbench.data.noise.proposal.NoiseProtocol` or :class:`~cirbench.backbones.base.Backbone`
(with a ``build`` classmethod; a ``BackboneFactory`` subclass, the former second class, still
registers, with a DeprecationWarning). Installed distributions expose
them through the entry-point groups ``cirbench.methods``, ``cirbench.datasets``,
``cirbench.noise`` and ``cirbench.backbones``.

Every class is registered by its registry's :meth:`~cirbench.registry.Registry.register`,
the call the built-in datasets, noise protocols and backbones make when their registry
module is imported. Methods go into the :class:`Discovery`'s own registry (rebuilt per call,
so that a run sees exactly the method files it names); datasets, noise protocols and
backbones into the harness's registries (``DATASETS``, ``NOISE_PROTOCOLS``, ``BACKBONES``),
where every module that resolves a name finds them. Built-ins win a name collision (the
loser is reported); a plugin that fails to import is reported and fails only when it is
selected, except a file the user named (``plugin_files``: ``--plugin``), which is an error
(:attr:`Discovery.errors`, refused by the grid before any work): a file or folder that is
missing, does not import, or defines no usable plugin, or a plugin whose name another
plugin (a built-in, one of ``CIRBENCH_PLUGINS``, an entry point or another named file)
has too. A class that does not implement its
kind's required method (``training_step``, ``__call__``, ``propose``) is never registered
(``Method`` is an ``nn.Module``: ``@abstractmethod`` is not enforced).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

from cirbench.backbones.registry import BACKBONES
from cirbench.data.noise.injection import NOISE_PROTOCOLS
from cirbench.data.datasets.registry import DATASETS
from cirbench.method import METHOD_CONTRACT, Method, method_role
from cirbench.registry import Contract, PluginError, Registry, overrides
from cirbench.results.roles import ROLES

METHOD_ENTRY_POINT_GROUP = "cirbench.methods"
PLUGINS_ENV = "CIRBENCH_PLUGINS"


@dataclass(frozen=True)
class Kind:
    """One kind of plugin: its name, its entry-point group and its contracts (the classes it
    takes: :class:`~cirbench.registry.Contract`, those of its registry)."""

    name: str
    group: str
    contracts: tuple[Contract, ...]

    @property
    def base(self) -> type:
        """The base class a plugin of this kind subclasses (the first contract's)."""
        return self.contracts[0].base

    @property
    def required(self) -> str:
        """The method a plugin of this kind implements (the first contract's)."""
        return self.contracts[0].required

    @property
    def signature(self) -> str:
        """How that method is called (the first contract's)."""
        return self.contracts[0].signature


KINDS: tuple[Kind, ...] = (
    Kind("method", METHOD_ENTRY_POINT_GROUP, (METHOD_CONTRACT,)),
    Kind("dataset", "cirbench.datasets", DATASETS.contracts),
    Kind("noise protocol", "cirbench.noise", NOISE_PROTOCOLS.contracts),
    Kind("backbone", "cirbench.backbones", BACKBONES.contracts),
)
KIND_NAMES: str = ", ".join(f"{kind.base.__name__} ({kind.name})" for kind in KINDS)


@dataclass
class Discovery:
    """The method registry plus what went wrong while filling it: ``problems`` (warnings)
    and ``errors``, the problems of the files the user named, which stop a run.
    ``registries`` maps each kind's name to its registry (``methods`` for methods, the
    harness's own for the others); ``found`` lists each plugin registered, as
    (kind, name, source)."""

    methods: Registry[type[Method]]
    problems: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    found: list[tuple[str, str, str]] = field(default_factory=list)
    named: set[tuple[str, str]] = field(default_factory=set)
    """The (kind, name) of every plugin of a file the user named (``plugin_files``): a name
    another plugin takes too is an error, whichever was found first."""

    @property
    def registries(self) -> dict[str, Registry[Any]]:
        """Each kind's registry, by kind name."""
        return {"method": self.methods, "dataset": DATASETS, "noise protocol": NOISE_PROTOCOLS, "backbone": BACKBONES}


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


def plugins_in(module: ModuleType, kind: Kind) -> list[type]:
    """The classes of ``kind`` (subclasses of one of its contracts' bases with a ``name``)
    defined in ``module`` itself. A ``Backbone`` subclass without ``build`` is left out: in a
    two-class backbone it is the model its factory builds, not a plugin."""
    return [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and any(issubclass(obj, c.base) for c in kind.contracts)
        and obj.__module__ == module.__name__
        and isinstance(getattr(obj, "name", None), str)
        and not (kind.name == "backbone" and _is_model(obj, kind))
    ]


def _is_model(cls: type, kind: Kind) -> bool:
    """Whether ``cls`` is a backbone model without ``build`` (the product of a two-class backbone's factory)."""
    first = kind.contracts[0]
    return issubclass(cls, first.base) and not overrides(cls, first.base, first.required)


def methods_in(module: ModuleType) -> list[type[Method]]:
    """The concrete :class:`Method` subclasses defined in ``module`` itself."""
    return plugins_in(module, KINDS[0])


def implements(cls: type, kind: Kind) -> bool:
    """Whether ``cls`` (or a base class other than its contract's base) overrides its required method."""
    contract = next((c for c in kind.contracts if issubclass(cls, c.base)), kind.contracts[0])
    return overrides(cls, contract.base, contract.required)


def implements_training_step(cls: type[Method]) -> bool:
    """Whether ``cls`` (or a base class other than :class:`Method`) overrides ``training_step``."""
    return implements(cls, KINDS[0])


def _broken(discovery: Discovery, registry: Registry[Any], name: str, reason: str, strict: bool) -> None:
    registry.add_broken(name, reason)
    discovery.problems.append(reason)
    if strict:
        discovery.errors.append(f"--plugin {reason}")


def _register(discovery: Discovery, kind: Kind, cls: type, source: str, strict: bool = False) -> None:
    """Register ``cls`` through its registry's :meth:`~cirbench.registry.Registry.register`
    (the call the built-ins make), a broken class and a taken name reported, not raised."""
    registry = discovery.registries[kind.name]
    reason = registry.problem(cls, source)
    if reason is None and kind.name == "method" and method_role(cls) not in ("", *ROLES):
        reason = f"{source}: method {cls.name!r} declares role {method_role(cls)!r}: the roles are {', '.join(ROLES)}"
    if reason:
        _broken(discovery, registry, cls.name, reason, strict)
        return
    if cls.name in registry:
        winner = registry.entry(cls.name).source
        if winner == source:  # the same file found again (a second discovery in this process): no collision
            discovery.found.append((kind.name, cls.name, source))
            discovery.named.update([(kind.name, cls.name)] if strict else [])
        else:
            discovery.problems.append(f"{kind.name} {cls.name!r} from {source} ignored: the name is taken by {winner}")
            if strict:
                discovery.errors.append(name_clash(kind.name, cls.name, source, winner))
            elif (kind.name, cls.name) in discovery.named:
                discovery.errors.append(name_clash(kind.name, cls.name, winner, source))
        return
    try:
        registry.register(cls, source)
    except PluginError as exc:
        _broken(discovery, registry, cls.name, str(exc), strict)
        return
    discovery.found.append((kind.name, cls.name, source))
    discovery.named.update([(kind.name, cls.name)] if strict else [])


def name_clash(kind: str, name: str, named: str, other: str) -> str:
    """The error of two plugins of one ``kind`` and ``name``, one (from ``named``) in a file
    the user named: both sources, and the way out."""
    return (f"--plugin {named.removeprefix('file ')}: {kind} {name!r} has the name of {kind} {name!r} of {other}: "
            "one name, two plugins; give the plugin of your file another `name` (nothing was run)")


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


def plugin_paths(paths: list[Path]) -> list[Path]:
    """The plugin files of ``paths``: a file as it is, a folder as its ``*.py`` files
    (sorted, those starting with ``_`` left out)."""
    files = []
    for path in map(Path, paths):
        files += [f for f in sorted(path.glob("*.py")) if not f.name.startswith("_")] if path.is_dir() else [path]
    return files


def _load_file(discovery: Discovery, path: Path, strict: bool, builtin: bool = False) -> None:
    """Register every plugin ``path`` defines; a file that cannot be imported or (``strict``)
    defines none is an error of the user's ``--plugin``."""
    try:
        module = load_plugin_file(path, f"cirbench_methods.{path.stem}" if builtin else None)
    except Exception as exc:  # a broken plugin must not take the others down
        discovery.methods.add_broken(path.stem, f"{path}: {_short_error(exc)}")
        what = f"built-in plugin {path.name}" if builtin else f"plugin file {path}"
        discovery.problems.append(f"{what} failed to load: {_short_error(exc)}")
        if strict:
            why = "no such file" if not Path(path).is_file() else f"cannot be imported: {import_error(Path(path), exc)}"
            discovery.errors.append(f"--plugin {path}: {why}")
        return
    source = f"built-in {path.name}" if builtin else f"file {Path(path).resolve()}"
    found = [(kind, cls) for kind in KINDS for cls in plugins_in(module, kind)]
    if not found and not builtin:
        reason = f"plugin file {path} defines no plugin: no class with a `name` subclassing {KIND_NAMES}"
        discovery.problems.append(reason)
        if strict:
            discovery.errors.append(f"--plugin {path}: defines no plugin (a class with a `name` subclassing {KIND_NAMES})")
    for kind, cls in found:
        _register(discovery, kind, cls, source, strict)


def _load_entry_points(discovery: Discovery, kind: Kind) -> None:
    for ep in entry_points(group=kind.group):
        source = f"package {ep.dist.name} {ep.dist.version}" if ep.dist else f"entry point {ep.value}"
        try:
            cls = ep.load()
        except Exception as exc:
            discovery.registries[kind.name].add_broken(ep.name, f"{source}: {_short_error(exc)}")
            discovery.problems.append(f"entry point {ep.name!r} ({source}) failed to load: {_short_error(exc)}")
            continue
        if not (inspect.isclass(cls) and any(issubclass(cls, c.base) for c in kind.contracts)
                and isinstance(getattr(cls, "name", None), str)):
            bases = " or ".join(c.base.__name__ for c in kind.contracts)
            discovery.problems.append(f"entry point {ep.name!r} ({source}) is not a {bases} subclass with a name")
            continue
        _register(discovery, kind, cls, source)


def discover(plugin_files: list[Path] | None = None) -> Discovery:
    """Find every plugin: built-in methods, then the user's files and folders (the
    environment's, then ``plugin_files``), then entry points (see the module docstring)."""
    discovery = Discovery(Registry("method", (METHOD_CONTRACT,)))
    for path in sorted(builtin_methods_dir().glob("*.py")):
        if not path.name.startswith("_"):
            _load_file(discovery, path, strict=False, builtin=True)
    env_paths = [Path(p) for p in os.environ.get(PLUGINS_ENV, "").split(os.pathsep) if p]
    for paths, strict in ((env_paths, False), (list(plugin_files or []), True)):
        for path in plugin_paths(paths):
            _load_file(discovery, path, strict)
        for folder in (p for p in map(Path, paths) if p.is_dir() and not any(p.glob("[!_]*.py"))):
            discovery.problems.append(f"plugin folder {folder} holds no plugin file (*.py)")
            if strict:
                discovery.errors.append(f"--plugin {folder}: a folder with no plugin file (*.py) in it")
    for kind in KINDS:
        _load_entry_points(discovery, kind)
    return discovery


def discover_methods(plugin_files: list[Path] | None = None) -> Discovery:
    """Deprecated: :func:`discover` (discovery finds every kind at once, methods included)."""
    warnings.warn("cirbench.plugins.discover_methods is deprecated: use cirbench.plugins.discover", DeprecationWarning,
                  stacklevel=2)
    return discover(plugin_files)
