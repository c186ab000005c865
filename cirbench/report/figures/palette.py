"""One colour per method across every figure of a report, from Paul Tol's qualitative schemes
(bright, vibrant, high- and medium-contrast; made to be told apart with the common
colour-vision deficiencies, the few that come near each other there also by marker): the
hosted methods' colours are data (``palette.toml`` beside this module), a plugin method takes
a colour no other method of the figure has (:func:`method_styles`); the perfect filter black
and dashed, the reference rows in greys with line styles of their own
(:data:`REFERENCE_STYLES`, the rows of :mod:`cirbench.report.analysis.rankings.references`). The
colours that are not methods' never take a method's: truly clean and truly noisy samples
(:data:`CLEAN_COLOUR`, :data:`NOISY_COLOUR`) and the answers of the claims' rule
(:func:`answer_colour`, worded and coloured in one place,
:data:`~cirbench.report.analysis.rankings.leaderboard.ANSWERS`)."""

from __future__ import annotations

import itertools
import tomllib
from functools import cache
from pathlib import Path
from typing import Iterator

from matplotlib.colors import hsv_to_rgb, to_hex

from cirbench.report.analysis.rankings.leaderboard import ANSWERS, UNSEPARATED, VERSUS
from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.rankings.references import BOUND, bound_label
from cirbench.results.labels import TEXT_BLIND_ROW, TEXT_ONLY_ROW, ZERO_SHOT_ROW

TOL: dict[str, str] = {
    "bright blue": "#4477AA", "vibrant orange": "#EE7733", "vibrant cyan": "#33BBEE", "vibrant red": "#CC3311",
    "bright purple": "#AA3377", "high-contrast blue": "#004488", "medium-contrast light yellow": "#EECC66",
    "bright red": "#EE6677", "medium-contrast dark red": "#994455", "vibrant teal": "#009988",
    "vibrant magenta": "#EE3377", "high-contrast yellow": "#DDAA33", "medium-contrast light blue": "#6699CC",
    "medium-contrast dark yellow": "#997700",
}
"""The methods' colours, by scheme and Tol's name: the first nine chosen among those schemes'
colours so that no two come close (CIE L*a*b* distance at least 24 with normal vision, 16
with deutan and protan vision simulated), none an answer's, a sample's or a grey; then spares."""
PALETTE_FILE = Path(__file__).with_name("palette.toml")
"""The hosted methods' colours, by :data:`TOL` name: the same in every setting and report."""
ORACLE_STYLE: dict = {"color": "black", "linestyle": "--", "marker": "s"}
CLEAN_COLOUR, CLEAN_NAME = "#DDCC77", "sand"
NOISY_COLOUR, NOISY_NAME = "#332288", "indigo"
"""Truly clean and truly noisy samples (Paul Tol's sand and indigo): no method's colour, no answer's."""
RESERVED: frozenset[str] = frozenset(c.lower() for c in (CLEAN_COLOUR, NOISY_COLOUR, *(a.colour for a in ANSWERS.values())))
"""Colours no method takes: the samples' and the answers'."""
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "p", "<", ">")
"""Each method's marker, in the order of :data:`PALETTE_FILE`'s methods then the plugins', so
lines that lie on top of each other are still told apart."""
REFERENCE_STYLES: dict[str, dict] = {
    ZERO_SHOT_ROW: {"color": "0.45", "linestyle": "-", "linewidth": 1.2},
    TEXT_BLIND_ROW: {"color": "0.55", "linestyle": ":", "linewidth": 1.6},
    TEXT_ONLY_ROW: {"color": "0.3", "linestyle": (0, (3, 1, 1, 1, 1, 1)), "linewidth": 1.3},
    BOUND: {"color": "0.15", "linestyle": "-.", "linewidth": 1.0},
}
"""How each reference line is drawn: in a grey of its own (no method's colour), each with a line style of
its own (the order the rows are listed in is
:data:`~cirbench.report.analysis.rankings.references.REFERENCE_ORDER`)."""
OTHER_STYLE: dict = {"color": "0.65", "linestyle": (0, (1, 3)), "linewidth": 1.2}
"""How a reference row the styles above do not name is drawn."""


@cache
def hosted_colours(path: Path = PALETTE_FILE) -> dict[str, str]:
    """Method -> colour (hex) of the palette file ``path``; a :class:`ValueError` naming the
    file for a colour that is not a :data:`TOL` name, or for one colour given twice."""
    with open(path, "rb") as handle:
        named = tomllib.load(handle).get("colour", {})
    unknown = sorted(f"{m} = {c!r}" for m, c in named.items() if c not in TOL)
    if unknown:
        raise ValueError(f"{path}: not a colour of Tol's schemes ({', '.join(TOL)}): {', '.join(unknown)}")
    twice = sorted({c for c in named.values() if list(named.values()).count(c) > 1})
    if twice:
        raise ValueError(f"{path}: one colour for two methods: {', '.join(twice)}")
    return {method: TOL[colour] for method, colour in named.items()}


def spare_colours(taken: set[str]) -> Iterator[str]:
    """Colours for the methods :data:`PALETTE_FILE` does not name, none of them in ``taken``
    (hex, any case) or :data:`RESERVED`: Tol's colours no hosted method owns, then those of the
    hosted methods, then hues spread around the wheel (golden-ratio steps), without end."""
    hosted = set(hosted_colours().values())
    named = sorted(TOL.values(), key=lambda c: c in hosted)
    generated = (to_hex(hsv_to_rgb((k * 0.618034 % 1.0, 0.7, 0.75))).upper() for k in itertools.count())
    seen = {c.lower() for c in taken} | RESERVED
    for colour in itertools.chain(named, generated):
        if colour.lower() not in seen:
            seen.add(colour.lower())
            yield colour


def method_styles(setting: Setting) -> dict[str, dict]:
    """A colour, line style and marker per method of ``setting``: a hosted method's own
    colour, a plugin method a colour no other method here has (:func:`spare_colours`), the
    perfect filter black and dashed."""
    hosted = hosted_colours()
    spare = spare_colours({hosted[m] for m in setting.methods if m in hosted})
    styles = {}
    order = list(hosted) + sorted(m for m in setting.methods if m not in hosted)
    for method in setting.methods:
        marker = MARKERS[order.index(method) % len(MARKERS)]
        if method in setting.oracles:
            styles[method] = dict(ORACLE_STYLE)
        else:
            colour = hosted[method] if method in hosted else next(spare)
            styles[method] = {"color": colour, "linestyle": "-", "marker": marker}
    return styles


def answer_colour(verdict: str) -> str:
    """The colour of an answer of the claims' rule (``better``...) or of a claims' verdict
    (``holds``...), as :data:`~cirbench.report.analysis.rankings.leaderboard.ANSWERS` sets it; an unknown one
    (a claim not run) the unseparated answer's grey."""
    return ANSWERS[verdict if verdict in ANSWERS else VERSUS.get(verdict, UNSEPARATED)].colour


def reference_style(setting: Setting, name: str) -> dict:
    """How the reference row (or the bound) ``name`` of ``setting`` is drawn."""
    return REFERENCE_STYLES.get(BOUND if name == bound_label(setting) else name, OTHER_STYLE)
