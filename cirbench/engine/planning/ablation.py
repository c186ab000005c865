"""``cirbench run --ablate <method>``: a method's standard ablation grid as grid rows.

Each named method adds its full row and one row ``<method>:<variant>`` per entry of
:attr:`~cirbench.method.Method.ablations`, whose ``Config`` overrides become that label's
``--set`` scope; the noise rates default to the union of the methods'
:attr:`~cirbench.method.Method.ablation_noise`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from cirbench.engine.planning.spec import GridError, base_method
from cirbench.method import Method
from cirbench.registry import Registry


@dataclass
class AblationGrid:
    """The rows an ``--ablate`` list adds: grid labels in order (each method's full row
    first), the ``--set`` overrides of each variant label, and the papers' noise rates."""

    labels: list[str] = field(default_factory=list)
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    noise_rates: list[float] = field(default_factory=list)


def override_text(value: Any) -> str:
    """A ``Config`` value as ``--set`` writes it: ``False`` -> ``false``, a list as JSON."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    return str(value)


def expand_ablations(names: list[str], methods: Registry[type[Method]]) -> AblationGrid:
    """The :class:`AblationGrid` of the methods ``names`` (registered names, not labels).

    Overrides equal to the ``Config`` default are left out (they change nothing). Raises
    :class:`~cirbench.engine.planning.spec.GridError` for an unknown name, a ``name:variant`` label,
    or a method without ablations.
    """
    grid = AblationGrid()
    rates: set[float] = set()
    for name in names:
        if base_method(name) != name:
            raise GridError(f"--ablate {name}: name a method (e.g. {base_method(name)}), not one of its variants")
        try:
            cls = methods.get(name)
        except KeyError as exc:
            raise GridError(str(exc)) from None
        if not cls.ablations:
            with_ablations = sorted(n for n in methods.names() if methods.get(n).ablations)
            raise GridError(f"--ablate {name}: method {name!r} has no ablations (Method.ablations is empty); "
                            f"methods with ablations: {', '.join(with_ablations) or 'none'}")
        config_defaults = cls.Config()
        grid.labels.append(name)
        for variant, overrides in cls.ablations.items():
            label = f"{name}:{variant}"
            grid.labels.append(label)
            grid.overrides[label] = {
                key: override_text(value) for key, value in overrides.items()
                if not hasattr(config_defaults, key) or getattr(config_defaults, key) != value  # unknown keys fail in the grid, named
            }
        rates.update(float(r) for r in cls.ablation_noise)
    grid.noise_rates = sorted(rates)
    return grid


def merge_rows(
    methods: list[str], overrides: dict[str, dict[str, str]], ablation: AblationGrid
) -> tuple[list[str], dict[str, dict[str, str]]]:
    """``--methods`` followed by the ablation's labels not already listed, and the ablation's
    overrides under the user's ``--set`` (a user's value for a label's key wins)."""
    labels = list(methods) + [label for label in ablation.labels if label not in methods]
    merged = {label: dict(values) for label, values in ablation.overrides.items()}
    for label, values in overrides.items():
        merged.setdefault(label, {}).update(values)
    return labels, merged


def describe_ablation(ablation: AblationGrid) -> str:
    """The rows and noise rates in one line, e.g. ``conesep; conesep:no_btu (unlearning=false); ablation noise 0.2``."""
    parts = []
    for label in ablation.labels:
        values = ablation.overrides.get(label, {})
        parts.append(f"{label} ({', '.join(f'{k}={v}' for k, v in values.items())})" if values else label)
    rates = ",".join(f"{r:g}" for r in ablation.noise_rates)
    return f"{'; '.join(parts)}; ablation noise {rates}"
