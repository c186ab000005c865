"""The report's lists of flagged cells, each after the rule that flags them: "Collapsed cells"
(:mod:`cirbench.results.collapse`) and "Kept sets below chance"
(:mod:`cirbench.results.chance`), every flagged run with its reason."""

from __future__ import annotations

from dataclasses import dataclass

from cirbench.report.analysis.loading.load import BELOW_CHANCE_MARK, COLLAPSE_MARK, Setting
from cirbench.report.analysis.loading.numbers import rate_label
from cirbench.results.chance import KEPT_SET_ALPHA

COLLAPSED_TITLE = "Collapsed cells"
COLLAPSE_RULE = (
    "A cell is flagged collapsed when its validation R@10 is below the text_only reference row's (same seed) at its "
    "final epoch or at two epochs in a row, or when its total training loss is constant over an epoch. Its numbers "
    f"stay in the tables, its rows marked {COLLAPSE_MARK}, but a collapse below a model that never looks at the image "
    "is a defect to explain, never a robustness result: a claim's check built on such a cell is undecided."
)
NONE_COLLAPSED = "No cell is flagged collapsed."
BELOW_CHANCE_TITLE = "Kept sets below chance"
BELOW_CHANCE_RULE = (
    "A cell is flagged when its kept set at the final epoch (the one the purity table shows) is less clean than a "
    "random subset of the same size would be: chance is the training set's clean share, and a random subset holds "
    f"so few clean samples with probability below {KEPT_SET_ALPHA:g} (one-sided hypergeometric test). Its rows are "
    f"marked {BELOW_CHANCE_MARK} in the purity table. A flag, not a failure: the claims read the cell as any other "
    "(the claim that kept sets are cleaner than chance counts such a seed as not holding)."
)
NONE_BELOW_CHANCE = "No kept set is flagged below chance."


@dataclass(frozen=True)
class FlagList:
    """One list of flagged cells: its title, the rule, the line when none is flagged, and
    the (method, noise rate, seed, reason) of every flagged run."""

    title: str
    rule: str
    none: str
    rows: list[tuple[str, str, str, str]]


def _rows(setting: Setting, column: str, reason: str) -> list[tuple[str, str, str, str]]:
    """(method, noise rate, seed, reason) of every run of ``setting`` flagged ``column``."""
    return [(str(r.method), rate_label(float(r.noise_rate)), str(r.seed), str(getattr(r, reason)))
            for r in setting.flagged(column).itertuples(index=False)]


def flag_lists(setting: Setting) -> list[FlagList]:
    """The setting's lists of flagged cells, in the order the report shows them."""
    return [FlagList(COLLAPSED_TITLE, COLLAPSE_RULE, NONE_COLLAPSED, _rows(setting, "collapsed", "collapse_reason")),
            FlagList(BELOW_CHANCE_TITLE, BELOW_CHANCE_RULE, NONE_BELOW_CHANCE,
                     _rows(setting, "below_chance", "below_chance_reason"))]
