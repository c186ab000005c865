"""The calibration grid of a setting: the ordinary baseline (``sprc``) and the perfect
filter (``oracle``) at the calibration noise rates, with the reference rows, and every
hosted method (each built-in method without a role) on clean data only. The checks read
from its results are :mod:`cirbench.report.analysis.verdicts.calibration`'s; ``docs/benchmark.md`` gives
each target's source and why a hosted method's clean cell may enter and no noisy one may."""

from __future__ import annotations

from dataclasses import replace

from cirbench.settings.defaults import CALIBRATION_METHODS, CALIBRATION_RATES, HOSTED_RATE
from cirbench.engine.running.grid import Grid
from cirbench.engine.planning.spec import GridSpec
from cirbench.method import method_role
from cirbench.plugins import Discovery, discover


def hosted_methods(discovery: Discovery) -> list[str]:
    """The hosted methods: every built-in method that declares no role (not the baseline,
    not the perfect filter), by name; a user's plugin is never one."""
    registry = discovery.methods
    return [name for name in registry.names()
            if registry.entry(name).source.startswith("built-in") and not method_role(registry.entry(name).obj)]


class CalibrationGrid(Grid):
    """The calibration grid: the calibration methods at every calibration rate and the
    hosted methods at :data:`~cirbench.settings.defaults.HOSTED_RATE` only."""

    def _build_cells(self):
        hosted = set(self.spec.methods) - set(CALIBRATION_METHODS)
        return [c for c in super()._build_cells() if c.key.method not in hosted or c.key.noise_rate == HOSTED_RATE]


def calibration_grid(spec: GridSpec, discovery: Discovery | None = None, hosted: bool = True) -> Grid:
    """The calibration grid of ``spec``'s setting: ``sprc`` at 0, 50 and 80% noise and
    ``oracle`` at 50 and 80% (at 0% it is ``sprc``: the grid skips it) and, with ``hosted``,
    every hosted method at 0%, for every seed of ``spec`` (with ``discovery``'s plugins when given)."""
    discovery = discovery or discover(spec.plugin_files)
    methods = list(CALIBRATION_METHODS) + (hosted_methods(discovery) if hosted else [])
    return CalibrationGrid(replace(spec, methods=methods, noise_rates=list(CALIBRATION_RATES), overrides={}), discovery)
