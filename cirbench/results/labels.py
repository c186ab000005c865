"""The labels a results folder's rows carry, named once for the engine that writes them and
the report that reads them: the reference rows' method names, a sweep trial's label and the
kept-set cells' kinds and labels."""

from __future__ import annotations

import re

ZERO_SHOT_ROW = "zero_shot"
"""The reference row of the starting model's composed query (``cirbench.engine.planning.reference``)."""
TEXT_BLIND_ROW = "text_blind"
"""The reference row of the reference image alone."""
TEXT_ONLY_ROW = "text_only"
"""The reference row of the text alone: the bar of the collapse guard (:mod:`cirbench.results.collapse`)."""

TRIAL_LABEL = re.compile(r"(?P<method>[^:]+):trial(?P<trial>\d+)")
"""A sweep row's label, ``<method>:trial<k>`` (:func:`trial_label`)."""


def rate_label(rate: float) -> str:
    """A noise rate as the papers print it, in every report, plan and log line: ``0.5`` -> ``50%``,
    ``0.125`` -> ``12.5%``."""
    return f"{rate * 100:g}%"


def trial_label(method: str, trial: int) -> str:
    """The grid label of ``method``'s trial ``trial``: the method's own name for trial 0 (the
    defaults: the same cell as a grid run's), ``<method>:trial<k>`` for the others."""
    return f"{method}:trial{trial}" if trial else method

FRONTIER = "frontier"
"""A kept-set cell of the purity frontier: every clean triplet plus a seeded share of the noisy ones."""
NOISE_TYPE = "noise_type"
"""A kept-set cell of one noise type: every clean triplet plus that type's noisy ones only."""
REPLAY = "replay"
"""A kept-set cell that replays a run's recorded kept set, epoch by epoch."""
KEPT_SETS: dict[str, str] = {
    FRONTIER: "every clean triplet plus a seeded uniform share of the noisy ones, at a set purity",
    NOISE_TYPE: "every clean triplet plus the noisy triplets of one noise type only",
    REPLAY: "a run's recorded kept set, epoch by epoch",
}
"""The kinds of kept-set cell (the ``runs`` table's ``kept_set`` column; ``""`` for every other
cell): the baseline trained as the perfect filter trains, on a kept set of known composition.
They are reference cells, never ranked and never read by a claim (docs/kept-sets.md)."""


def frontier_label(purity: float) -> str:
    """The grid label of the frontier cell at ``purity``: ``frontier:p0.8``."""
    return f"{FRONTIER}:p{purity:g}"


def noise_type_label(noise_type: str) -> str:
    """The grid label of the noise-type cell of ``noise_type``: ``noise_type:caption``."""
    return f"{NOISE_TYPE}:{noise_type}"


def replay_label(method: str) -> str:
    """The grid label of the replay of ``method``'s runs: ``replay:tme``."""
    return f"{REPLAY}:{method}"
