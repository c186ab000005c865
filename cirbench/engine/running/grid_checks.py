"""``check-plugin``'s static checks on what a grid will use, before any of its cells trains
(:func:`~cirbench.engine.running.runner.preflight` runs them for every command that builds a grid):

- the dataset is loaded once and keeps the rules of :mod:`cirbench.data.datasets.dataset_rules`;
- every method's ``needs`` are optional capabilities its backbone implements
  (:func:`~cirbench.backbones.base.capabilities`; the backbone is built only when a method
  needs one);
- the manifest of every (noise rate, seed) of the grid is built, so that a proposal of the
  wrong length or a noisy sample typed ``clean`` (:mod:`cirbench.data.noise.rules`) stops
  the grid here, not once per cell. A protocol that asks for image features gets the
  frozen tower's, as its cells would (the token cache is built here then).

A breach is a :class:`PluginCheckError` naming the plugin (its kind, name and source), the
sample where there is one, and the rule; nothing has been written under the results folder.
"""

from __future__ import annotations

from functools import cache
from typing import Callable

from cirbench.backbones.base import OPTIONAL_CAPABILITIES, Backbone, capabilities
from cirbench.backbones.registry import BACKBONES
from cirbench.data.base import CIRDataset
from cirbench.data.datasets.check import DatasetProblemsError
from cirbench.data.datasets.dataset_rules import dataset_rule_problems
from cirbench.data.noise.injection import NOISE_PROTOCOLS
from cirbench.data.noise.instance_file import NoiseFileError, noisy_training
from cirbench.data.noise.rules import NoiseProtocolError
from cirbench.data.datasets.registry import DATASETS
from cirbench.engine.running.grid import Grid
from cirbench.engine.cell.resources import pooled_features
from cirbench.engine.planning.spec import base_method
from cirbench.registry import Registry


class PluginCheckError(ValueError):
    """A plugin the grid would use breaks a rule; raised before any cell trains."""


def who(registry: Registry, name: str) -> str:
    """A plugin as an error names it: its kind, name and source, e.g. ``dataset 'squares' (file /x/squares.py)``."""
    return f"{registry.kind} {name!r} ({registry.entry(name).source})"


def checked_dataset(grid: Grid) -> CIRDataset:
    """The grid's dataset, loaded once and checked (a file dataset's own check,
    :class:`~cirbench.data.datasets.check.DatasetProblemsError`, passes through)."""
    name = grid.spec.dataset
    try:
        dataset = grid.resources.dataset()
    except DatasetProblemsError:
        raise
    except (ValueError, TypeError, IndexError) as exc:
        raise PluginCheckError(f"{who(DATASETS, name)} does not load: {exc}") from None
    problems = dataset_rule_problems(dataset)
    if problems:
        raise PluginCheckError(f"{who(DATASETS, name)}: " + "; ".join(problems))
    return dataset


def check_needs(grid: Grid, backbone: Callable[[], Backbone]) -> None:
    """Refuse a method whose ``needs`` name no optional capability, or one its backbone lacks."""
    methods = grid.discovery.methods
    needing = {base_method(label): methods.get(base_method(label)) for label in grid.spec.methods}
    needing = {name: cls for name, cls in needing.items() if cls.needs}
    problems = [f"{who(methods, name)} needs {need!r}, which is no backbone capability (known: "
                f"{', '.join(OPTIONAL_CAPABILITIES)})" for name, cls in needing.items()
                for need in cls.needs if need not in OPTIONAL_CAPABILITIES]
    if needing and not problems:
        offered = capabilities(backbone())
        problems = [f"{who(methods, name)} needs the backbone's {OPTIONAL_CAPABILITIES[need]}, which "
                    f"{who(BACKBONES, grid.spec.backbone)} does not implement (rule: a method runs only on a backbone "
                    "offering what it needs; docs/adding-a-backbone.md#optional-capabilities)"
                    for name, cls in needing.items() for need in cls.needs if need not in offered]
    if problems:
        raise PluginCheckError("; ".join(problems))


def check_manifests(grid: Grid, dataset: CIRDataset, features: Callable[[], object]) -> None:
    """Build (and so check) the manifest of every (noise rate, seed) of the grid."""
    spec = grid.spec
    for rate in spec.noise_rates:
        for seed in spec.seeds:
            try:
                noisy_training(dataset, spec.noise_protocol, rate, seed, spec.noise_file, image_features=features)
            except (NoiseProtocolError, NoiseFileError) as exc:
                raise PluginCheckError(str(exc)) from None
            except Exception as exc:  # a protocol that raises cannot run any cell
                raise PluginCheckError(f"{who(NOISE_PROTOCOLS, spec.noise_protocol)} at rate {rate:g}, seed {seed}: "
                                       f"propose raised {type(exc).__name__}: {exc}") from None


def check_grid(grid: Grid, announce: Callable[[str], None]) -> None:
    """Every check of the module docstring, in order; :class:`PluginCheckError` on the first breach."""
    spec = grid.spec
    backbone = cache(lambda: BACKBONES.get(spec.backbone)(spec.seeds[0], spec.cache_dir, spec.weights))
    dataset = checked_dataset(grid)
    check_needs(grid, backbone)
    check_manifests(grid, dataset, lambda: pooled_features(grid.resources.tokens(backbone(), announce)))
