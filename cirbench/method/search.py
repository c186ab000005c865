"""Search spaces for an equal tuning budget (``cirbench sweep``, ``docs/selection.md``): each
method's ``Config.search_space`` names the hyperparameters a sweep may vary and the
distribution of each, the way DomainBed's ``hparams_registry`` does. Trial 0 is always the
defaults; trial ``k > 0`` draws every entry from a generator seeded by (sweep seed, method,
trial), so a trial's values never depend on which other methods or trials are run."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class Distribution(Protocol):
    """One hyperparameter's distribution; ``default`` is what the config would use."""

    def draw(self, rng: np.random.Generator, default: float | None) -> float: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class LogUniform:
    """``10 ** U(log10 low, log10 high)``."""

    low: float
    high: float

    def draw(self, rng: np.random.Generator, default: float | None) -> float:
        return float(10 ** rng.uniform(math.log10(self.low), math.log10(self.high)))

    def describe(self) -> str:
        return f"log-uniform [{self.low:g}, {self.high:g}]"


@dataclass(frozen=True)
class Uniform:
    """``U(low, high)``."""

    low: float
    high: float

    def draw(self, rng: np.random.Generator, default: float | None) -> float:
        return float(rng.uniform(self.low, self.high))

    def describe(self) -> str:
        return f"uniform [{self.low:g}, {self.high:g}]"


@dataclass(frozen=True)
class ScaledLogUniform:
    """The default times ``10 ** U(log10 low, log10 high)``: for ``lr``, whose default is the
    backbone's (1e-5 on BLIP-2, 1e-3 on ``tiny``), so that one space serves every backbone."""

    low: float
    high: float

    def draw(self, rng: np.random.Generator, default: float | None) -> float:
        if default is None:
            raise ValueError("a scaled distribution needs a default to scale")
        return float(default * 10 ** rng.uniform(math.log10(self.low), math.log10(self.high)))

    def describe(self) -> str:
        return f"default x log-uniform [{self.low:g}, {self.high:g}]"


LR_SPACE = ScaledLogUniform(1 / 3, 3.0)
"""Every method's ``lr``: a factor of three either way of the backbone's default."""


def trial_values(method: str, config_cls: type, trial: int, defaults: dict[str, float | None], seed: int = 0) -> dict[str, float]:
    """The overrides of ``trial`` for ``method`` (``{}`` for trial 0: the defaults), drawn
    from ``config_cls.search_space``; ``defaults`` holds each entry's default (``lr``: the
    backbone's)."""
    if trial < 0:
        raise ValueError(f"a trial number is >= 0, got {trial}")
    if trial == 0:
        return {}
    rng = np.random.default_rng([int(seed), zlib.crc32(method.encode()), int(trial)])
    return {name: dist.draw(rng, defaults.get(name)) for name, dist in sorted(config_cls.search_space.items())}
