"""One colour per method across every figure of a report, from the Okabe-Ito palette (safe
for the common colour-vision deficiencies): the hosted methods' colours are data
(``palette.toml`` beside this module), a plugin method takes the next unused colour; the
perfect filter black and dashed, the reference rows in greys with line styles of their own
(:data:`REFERENCE_STYLES`, the rows of :mod:`cirbench.report.analysis.rankings.references`). The
colours that are not methods' never take a method's: truly clean and truly noisy samples
(:data:`CLEAN_COLOUR`, :data:`NOISY_COLOUR`) and the answers of the claims' rule
(:func:`answer_colour`, worded and coloured in one place,
:data:`~cirbench.report.analysis.rankings.leaderboard.ANSWERS`)."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

from cirbench.report.analysis.rankings.leaderboard import ANSWERS, UNSEPARATED, VERSUS
from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.rankings.references import BOUND, bound_label
from cirbench.results.labels import TEXT_BLIND_ROW, TEXT_ONLY_ROW, ZERO_SHOT_ROW

OKABE_ITO: dict[str, str] = {
    "blue": "#0072B2", "orange": "#E69F00", "bluish green": "#009E73", "vermillion": "#D55E00",
    "reddish purple": "#CC79A7", "sky blue": "#56B4E9", "yellow": "#F0E442",
}
PALETTE_FILE = Path(__file__).with_name("palette.toml")
"""The hosted methods' colours, by Okabe-Ito colour name: the same in every setting and report."""
ORACLE_STYLE: dict = {"color": "black", "linestyle": "--", "marker": "s"}
CLEAN_COLOUR, CLEAN_NAME = "#DDCC77", "sand"
NOISY_COLOUR, NOISY_NAME = "#332288", "indigo"
"""Truly clean and truly noisy samples (Paul Tol's sand and indigo): no method's colour, no answer's."""
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "*", "h")
"""Each method's marker, in the order of :data:`PALETTE_FILE`'s methods then the plugins', so
lines that lie on top of each other are still told apart."""
EXTRA_LINESTYLES: tuple[str, ...] = ("-", "-.", (0, (5, 1)))
"""A plugin method's line style: each pass over the palette's colours takes the next one."""
REFERENCE_STYLES: dict[str, dict] = {
    ZERO_SHOT_ROW: {"color": "0.45", "linestyle": "-", "linewidth": 1.2},
    TEXT_BLIND_ROW: {"color": "0.55", "linestyle": ":", "linewidth": 1.6},
    TEXT_ONLY_ROW: {"color": "0.45", "linestyle": (0, (3, 1, 1, 1, 1, 1)), "linewidth": 1.3},
    BOUND: {"color": "0.15", "linestyle": "-.", "linewidth": 1.0},
}
"""How each reference line is drawn: in grey (no method's colour), each with a line style of
its own (the order the rows are listed in is
:data:`~cirbench.report.analysis.rankings.references.REFERENCE_ORDER`)."""
OTHER_STYLE: dict = {"color": "0.65", "linestyle": (0, (1, 3)), "linewidth": 1.2}
"""How a reference row the styles above do not name is drawn."""


@cache
def hosted_colours(path: Path = PALETTE_FILE) -> dict[str, str]:
    """Method -> colour (hex) of the palette file ``path``; a :class:`ValueError` naming the
    file for a colour that is not an Okabe-Ito name."""
    with open(path, "rb") as handle:
        named = tomllib.load(handle).get("colour", {})
    unknown = sorted(f"{m} = {c!r}" for m, c in named.items() if c not in OKABE_ITO)
    if unknown:
        raise ValueError(f"{path}: not an Okabe-Ito colour ({', '.join(OKABE_ITO)}): {', '.join(unknown)}")
    return {method: OKABE_ITO[colour] for method, colour in named.items()}


def method_styles(setting: Setting) -> dict[str, dict]:
    """A colour, line style and marker per method of ``setting``: a hosted method's own
    colour, a plugin method the palette's next unused colour (its line style changing when
    the colours run out), the perfect filter black and dashed."""
    hosted = hosted_colours()
    taken = {hosted[m] for m in setting.methods if m in hosted}
    spare = sorted((c for c in OKABE_ITO.values() if c not in taken), key=lambda c: c in hosted.values())
    spare = spare or list(OKABE_ITO.values())
    styles, extra = {}, 0
    order = list(hosted) + sorted(m for m in setting.methods if m not in hosted)
    for method in setting.methods:
        marker = MARKERS[order.index(method) % len(MARKERS)]
        if method in setting.oracles:
            styles[method] = dict(ORACLE_STYLE)
        elif method in hosted:
            styles[method] = {"color": hosted[method], "linestyle": "-", "marker": marker}
        else:
            linestyle = EXTRA_LINESTYLES[(extra // len(spare)) % len(EXTRA_LINESTYLES)]
            styles[method] = {"color": spare[extra % len(spare)], "linestyle": linestyle, "marker": marker}
            extra += 1
    return styles


def answer_colour(verdict: str) -> str:
    """The colour of an answer of the claims' rule (``better``...) or of a claims' verdict
    (``holds``...), as :data:`~cirbench.report.analysis.rankings.leaderboard.ANSWERS` sets it; an unknown one
    (a claim not run) the unseparated answer's grey."""
    return ANSWERS[verdict if verdict in ANSWERS else VERSUS.get(verdict, UNSEPARATED)].colour


def reference_style(setting: Setting, name: str) -> dict:
    """How the reference row (or the bound) ``name`` of ``setting`` is drawn."""
    return REFERENCE_STYLES.get(BOUND if name == bound_label(setting) else name, OTHER_STYLE)
