"""Typed hyperparameter overrides: ``--set conesep.omega=0.4`` -> ``Config(omega=0.4)``."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, Callable, Mapping, TypeVar, Union

C = TypeVar("C")


class ConfigError(ValueError):
    """A ``--set`` entry that names no field or whose value does not fit the field's type."""


def key_value(entry: str) -> tuple[str, str] | None:
    """``"key=value"`` -> ``("key", "value")``, both stripped; None without ``=`` or a key.
    Every ``key=value`` option (``--set``, ``--dataset-option``, ``--scheduler-option``) reads so."""
    key, eq, value = entry.partition("=")
    return (key.strip(), value.strip()) if eq and key.strip() else None


def parse_key_values(entries: list[str], example: str) -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``; a malformed entry raises ConfigError
    naming it and an ``example`` entry."""
    out: dict[str, str] = {}
    for entry in entries:
        pair = key_value(entry)
        if pair is None:
            raise ConfigError(f"{entry!r}: expected key=value, e.g. {example}")
        out[pair[0]] = pair[1]
    return out


def parse_overrides(entries: list[str]) -> dict[str, dict[str, str]]:
    """``["sprc.lr=1e-3", "conesep.ot=false"]`` -> ``{"sprc": {"lr": "1e-3"}, "conesep": {"ot": "false"}}``."""
    out: dict[str, dict[str, str]] = {}
    for entry in entries:
        name, value = key_value(entry) or ("", "")
        scope, dot, key = name.partition(".")
        if not dot or not scope or not key:
            raise ConfigError(f"--set {entry!r}: expected <method>.<key>=<value>, e.g. conesep.omega=0.4")
        out.setdefault(scope, {})[key.strip()] = value
    return out


def _convert(text: str, kind: Any, where: str) -> Any:
    origin = typing.get_origin(kind)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(kind) if a is not type(None)]
        if text.lower() in ("none", "null") and len(options) < len(typing.get_args(kind)):
            return None
        errors = []
        for option in options:
            try:
                return _convert(text, option, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError("; ".join(errors))
    if kind is bool:
        lowered = text.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: {text!r} is not a boolean (use true/false)")
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            raise ConfigError(f"{where}: {text!r} is not a valid {kind.__name__}") from None
    if kind is str:
        return text
    if origin is typing.Literal:
        allowed = typing.get_args(kind)
        if text not in allowed:
            raise ConfigError(f"{where}: {text!r} is not one of {', '.join(map(str, allowed))}")
        return text
    if origin in (tuple, list):
        try:
            return origin(json.loads(text))
        except (json.JSONDecodeError, TypeError):
            raise ConfigError(f"{where}: {text!r} is not a JSON list") from None
    raise ConfigError(f"{where}: cannot set a field of type {kind!r} from the command line")


def typed_values(cls: type, texts: Mapping[str, str], where: Callable[[str], str],
                 unknown: Callable[[str, list[str]], str]) -> dict[str, Any]:
    """``texts`` (field name -> text) converted to the declared types of the dataclass
    ``cls``'s fields, for ``cls(**values)``. ConfigError names the entry (``where(key)``), or
    for a key that is no field ``unknown(key, field names)``."""
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    values = {}
    for key, text in texts.items():
        if key not in fields:
            raise ConfigError(unknown(key, fields))
        values[key] = _convert(str(text), hints[key], where(key))
    return values


READINGS = "readings"
"""The one ``--set`` key that is no field: ``<method>.readings=release`` turns on every switch of
the method's ``release_readings`` (its authors' code where the port follows the paper),
``readings=paper`` is the defaults. Explicit ``--set`` entries of the same scope win over it."""


def reading_values(cls: type, reading: str, scope: str) -> dict[str, Any]:
    """The field values that ``--set {scope}.readings={reading}`` stands for: none for
    ``paper``, the config class's ``release_readings`` for ``release``."""
    if reading == "paper":
        return {}
    if reading != "release":
        raise ConfigError(f"--set {scope}.{READINGS}: {reading!r} is not one of paper, release")
    release = dict(getattr(cls, "release_readings", {}) or {})
    if not release:
        raise ConfigError(f"--set {scope}.{READINGS}=release: {scope} declares no release readings")
    return release


def build_config(cls: type[C], overrides: dict[str, str], scope: str) -> C:
    """An instance of the dataclass ``cls`` with ``overrides`` applied, each value converted
    to its field's declared type (``readings`` first expanded, :data:`READINGS`). Unknown keys
    raise with the list of valid ones, a value the config's own checks refuse with the
    ``--set`` entries given."""
    overrides = dict(overrides)
    readings = reading_values(cls, str(overrides.pop(READINGS, "paper")), scope)
    values = {**readings, **typed_values(
        cls, overrides, lambda key: f"--set {scope}.{key}",
        lambda key, fields: f"--set {scope}.{key}: unknown key; valid keys for {scope}: {', '.join(sorted([*fields, READINGS]))}",
    )}
    try:
        return cls(**values)
    except ValueError as exc:  # the config's own range checks
        given = ", ".join(f"{scope}.{key}={overrides[key]}" for key in values)
        named = str(exc).startswith(f"{scope.split(':')[0]}:")
        raise ConfigError(("" if named else f"{scope}: ") + str(exc) + (f" (--set {given})" if given else "")) from None


def config_to_dict(config: Any) -> dict[str, Any]:
    """A JSON-friendly dict of a config dataclass."""
    return dataclasses.asdict(config)


LATE_FIELD = "late"


def late_field(default: Any) -> Any:
    """A config field added after run ids were published (a switch to a release's reading,
    say): a run id leaves it out while it holds ``default`` (:func:`identity_dict`), so the
    ids of the cells that do not use it stay as they were."""
    return dataclasses.field(default=default, metadata={LATE_FIELD: True})


def identity_dict(config: Any) -> dict[str, Any]:
    """:func:`config_to_dict` less the :func:`late_field` fields that hold their default:
    what a run id is made from."""
    out = config_to_dict(config)
    for f in dataclasses.fields(config):
        if f.metadata.get(LATE_FIELD) and out.get(f.name) == f.default:
            del out[f.name]
    return out
