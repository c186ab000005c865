"""The calibration grid of a setting: the ordinary baseline (``sprc``) and the perfect
filter (``oracle``) at the calibration noise rates, with the reference rows. The checks
read from its results are :mod:`cirbench.report.calibration`'s; ``docs/benchmark.md``
gives each target's source."""

from __future__ import annotations

from dataclasses import replace

from cirbench.defaults import CALIBRATION_METHODS, CALIBRATION_RATES
from cirbench.engine.grid import Grid
from cirbench.engine.spec import GridSpec
from cirbench.plugins import Discovery


def calibration_grid(spec: GridSpec, discovery: Discovery | None = None) -> Grid:
    """The calibration grid of ``spec``'s setting: ``sprc`` at 0, 50 and 80% noise and
    ``oracle`` at 50 and 80% (at 0% it is ``sprc``: the grid skips it), for every seed of
    ``spec`` (with ``discovery``'s plugins when given)."""
    return Grid(replace(spec, methods=list(CALIBRATION_METHODS), noise_rates=list(CALIBRATION_RATES), overrides={}), discovery)
