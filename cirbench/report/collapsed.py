"""The report's "Collapsed cells": every run the collapse guard flagged
(:mod:`cirbench.results.collapse`), with its reason, and the rule that flags them."""

from __future__ import annotations

from cirbench.report.load import COLLAPSE_MARK, Setting
from cirbench.report.tables import rate_label

COLLAPSED_TITLE = "Collapsed cells"
COLLAPSE_RULE = (
    "A cell is flagged collapsed when its validation R@10 is below the text_only reference row's (same seed) at its "
    "final epoch or at two epochs in a row, or when its total training loss is constant over an epoch. Its numbers "
    f"stay in the tables, its rows marked {COLLAPSE_MARK}, but a collapse below a model that never looks at the image "
    "is a defect to explain, never a robustness result: a claim's check built on such a cell is inconclusive."
)
NONE_COLLAPSED = "No cell is flagged collapsed."


def collapsed_rows(setting: Setting) -> list[tuple[str, str, str, str]]:
    """(method, noise rate, seed, reason) of every collapsed run of ``setting``."""
    return [(str(r.method), rate_label(float(r.noise_rate)), str(r.seed), str(r.collapse_reason))
            for r in setting.collapsed.itertuples(index=False)]
