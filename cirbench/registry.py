"""A small name -> object registry with helpful errors, shared by methods, datasets,
backbones and noise protocols."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Generic, Iterator, TypeVar

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


class Registry(Generic[T]):
    """Maps names to objects of one kind. A duplicate name raises unless ``replace``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}
        self._broken: dict[str, str] = {}

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

