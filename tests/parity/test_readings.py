"""``--set <method>.readings=release``: one setting turns on every switch under which a port
computes what its release computes; ``paper`` is the defaults; explicit entries win."""

from __future__ import annotations

import dataclasses

import pytest

from cirbench.settings.config import ConfigError, build_config, identity_dict, late_field
from cirbench.method import MethodConfig
from cirbench.plugins import discover


METHODS = discover().methods


@dataclasses.dataclass
class _Toy(MethodConfig):
    release_readings = {"variant": "release", "scale": 2.0}
    variant: str = "paper"
    scale: float = 1.0
    switch: bool = late_field(False)


def test_release_readings_turn_every_switch_on_and_explicit_entries_win() -> None:
    assert build_config(_Toy, {"readings": "paper"}, "toy") == _Toy()
    assert build_config(_Toy, {"readings": "release"}, "toy") == _Toy(variant="release", scale=2.0)
    assert build_config(_Toy, {"readings": "release", "scale": "3"}, "toy") == _Toy(variant="release", scale=3.0)


def test_an_unknown_reading_or_a_method_without_release_readings_is_refused() -> None:
    with pytest.raises(ConfigError, match="'both' is not one of paper, release"):
        build_config(_Toy, {"readings": "both"}, "toy")
    with pytest.raises(ConfigError, match="oracle declares no release readings"):
        build_config(MethodConfig, {"readings": "release"}, "oracle")


def test_a_late_field_at_its_default_leaves_the_run_identity_unchanged() -> None:
    assert "switch" not in identity_dict(_Toy()) and identity_dict(_Toy(switch=True))["switch"] is True


@pytest.mark.parametrize("name", ["sprc", "tme", "conesep", "hug", "habit", "intent", "ssn", "cala"])
def test_every_hosted_methods_release_readings_are_fields_of_its_config(name: str) -> None:
    config_cls = METHODS.get(name).Config
    fields = {f.name for f in dataclasses.fields(config_cls)}
    assert set(config_cls.release_readings) <= fields
    if config_cls.release_readings:
        config = build_config(config_cls, {"readings": "release"}, name)
        assert all(getattr(config, k) == v for k, v in config_cls.release_readings.items())
