"""The one registry type of the four plugin kinds (methods, datasets, noise protocols,
backbones): name -> object, with helpful errors, and the kind's :class:`Contract`, which
:meth:`Registry.register` checks a plugin class against. The built-ins register through the
very call a user's plugin goes through (:mod:`cirbench.plugins` calls it for the classes of
a file, a folder or an entry point)."""

from __future__ import annotations

import difflib
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterator, Sequence, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """Raised for a name that is not registered; the message lists the valid names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass
class Entry(Generic[T]):
    """A registered object and where it came from (a file, a distribution, built-in)."""

    name: str
    obj: T
    source: str


class PluginError(ValueError):
    """A plugin class that breaks its kind's contract or cannot be built (the message names
    its source, class and name, and what is wrong)."""


def _itself(cls: type) -> type:
    return cls


@dataclass(frozen=True)
class Contract:
    """What a plugin class of a kind is: a subclass of ``base`` with a ``name`` that overrides
    ``required`` (called as ``signature``); ``make`` turns the class into what the registry
    holds (the class itself, or an object built with no arguments). ``separator``: a
    character the harness joins the kind's names with (a method's ``:`` of ``name:variant``,
    ``replay:name``), which a name may not hold."""

    base: type
    required: str
    signature: str
    make: Callable[[type], Any] = _itself
    separator: str = ""


def overrides(cls: type, base: type, attribute: str) -> bool:
    """Whether ``cls`` (or a class between it and ``base``) defines ``attribute`` itself."""
    owner = next((k for k in cls.__mro__ if attribute in vars(k)), None)
    return owner is not None and owner is not base and not (isinstance(owner, type) and issubclass(base, owner))


class Registry(Generic[T]):
    """Maps names to objects of one kind. A duplicate name raises. ``contracts``: the plugin
    classes the kind takes (:meth:`register`); the first whose base a class subclasses applies."""

    def __init__(self, kind: str, contracts: Sequence[Contract] = ()) -> None:
        self.kind = kind
        self.contracts = tuple(contracts)
        self._entries: dict[str, Entry[T]] = {}
        self._broken: dict[str, str] = {}

    def contract(self, cls: type) -> Contract | None:
        """The contract ``cls`` falls under (None: not a plugin class of this kind)."""
        return next((c for c in self.contracts if isinstance(cls, type) and issubclass(cls, c.base)), None)

    def problem(self, cls: type, source: str) -> str | None:
        """Why ``cls`` breaks its contract (a reason naming ``source``), or None."""
        contract = self.contract(cls)
        if contract is None:
            bases = " or ".join(c.base.__name__ for c in self.contracts)
            return f"{source}: class {getattr(cls, '__qualname__', cls)!r} is not a {bases} subclass"
        if not isinstance(getattr(cls, "name", None), str):
            return f"{source}: class {cls.__qualname__} ({self.kind}) has no `name`"
        if contract.separator and contract.separator in cls.name:
            suggestion = cls.name.replace(contract.separator, "_")
            return (f"{source}: class {cls.__qualname__} ({self.kind} {cls.name!r}): a {self.kind} name may not hold "
                    f"{contract.separator!r}, the harness's separator of a label's parts (name:variant, replay:name, "
                    f"name:trial<k>); rename it, e.g. {suggestion!r}")
        if not overrides(cls, contract.base, contract.required):
            return f"{source}: class {cls.__qualname__} ({self.kind} {cls.name!r}) does not implement {contract.signature}"
        return None

    def register(self, cls: type, source: str = "built-in") -> T:
        """Check ``cls`` against its contract, build what the registry holds and add it under
        ``cls.name``: the one way a plugin of this kind is registered, a built-in or a user's
        (PluginError if it breaks the contract or cannot be built; ValueError on a taken name)."""
        reason = self.problem(cls, source)
        if reason:
            raise PluginError(reason)
        try:
            obj = self.contract(cls).make(cls)
        except Exception as exc:
            error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            raise PluginError(f"{source}: {self.kind} {cls.name!r} cannot be built with no arguments: {error}") from exc
        self.add(cls.name, obj, source)
        return obj

    def add(self, name: str, obj: T, source: str = "built-in") -> None:
        """Register ``obj`` under ``name``; a second object under one name is an error."""
        if name in self._entries:
            raise ValueError(
                f"{self.kind} {name!r} is already registered (from {self._entries[name].source}); "
                f"cannot register it again from {source}"
            )
        self._entries[name] = Entry(name, obj, source)

    def add_broken(self, name: str, reason: str) -> None:
        """Remember a plugin that failed to load, so selecting it explains why."""
        self._broken[name] = reason

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def names(self) -> list[str]:
        """All registered names, sorted."""
        return sorted(self._entries)

    def entry(self, name: str) -> Entry[T]:
        """The entry for ``name``; an unknown name raises with a suggestion and the full list."""
        if name in self._entries:
            return self._entries[name]
        if name in self._broken:
            raise UnknownNameError(f"{self.kind} {name!r} failed to load: {self._broken[name]}")
        close = difflib.get_close_matches(name, self.names(), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        valid = ", ".join(self.names()) or "(none)"
        raise UnknownNameError(f"unknown {self.kind} {name!r}.{hint} Valid {self.kind}s: {valid}")

    def get(self, name: str) -> T:
        """The object registered under ``name``."""
        return self.entry(name).obj

