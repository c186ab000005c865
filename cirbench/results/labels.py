"""The labels a results folder's rows carry, named once for the engine that writes them and
the report that reads them: the reference rows' method names and a sweep trial's label."""

from __future__ import annotations

import re

ZERO_SHOT_ROW = "zero_shot"
"""The reference row of the starting model's composed query (``cirbench.engine.reference``)."""
TEXT_BLIND_ROW = "text_blind"
"""The reference row of the reference image alone."""
TEXT_ONLY_ROW = "text_only"
"""The reference row of the text alone: the bar of the collapse guard (:mod:`cirbench.results.collapse`)."""

TRIAL_LABEL = re.compile(r"(?P<method>[^:]+):trial(?P<trial>\d+)")
"""A sweep row's label, ``<method>:trial<k>`` (:func:`trial_label`)."""


def trial_label(method: str, trial: int) -> str:
    """The grid label of ``method``'s trial ``trial``: the method's own name for trial 0 (the
    defaults: the same cell as a grid run's), ``<method>:trial<k>`` for the others."""
    return f"{method}:trial{trial}" if trial else method
