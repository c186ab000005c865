"""One colour per method across every figure of a report, from the Okabe-Ito palette (safe
for the common colour-vision deficiencies); the perfect filter black and dashed, the
reference rows in greys with line styles of their own (:mod:`cirbench.report.references`)."""

from __future__ import annotations

from cirbench.report.load import Setting

OKABE_ITO: dict[str, str] = {
    "blue": "#0072B2", "orange": "#E69F00", "bluish green": "#009E73", "vermillion": "#D55E00",
    "reddish purple": "#CC79A7", "sky blue": "#56B4E9", "yellow": "#F0E442",
}
HOSTED_COLOURS: dict[str, str] = {
    "sprc": OKABE_ITO["blue"], "tme": OKABE_ITO["orange"], "conesep": OKABE_ITO["bluish green"],
    "hug": OKABE_ITO["vermillion"], "habit": OKABE_ITO["reddish purple"], "intent": OKABE_ITO["sky blue"],
}
"""The hosted methods' colours, the same in every setting and report."""
ORACLE_STYLE: dict = {"color": "black", "linestyle": "--", "marker": "s"}
EXTRA_LINESTYLES: tuple[str, ...] = ("-", "-.", (0, (5, 1)))
"""A plugin method's line style: each pass over the palette's colours takes the next one."""


def method_styles(setting: Setting) -> dict[str, dict]:
    """A colour, line style and marker per method of ``setting``: a hosted method's own
    colour, a plugin method the palette's next unused colour (its line style changing when
    the colours run out), the perfect filter black and dashed."""
    taken = {HOSTED_COLOURS[m] for m in setting.methods if m in HOSTED_COLOURS}
    spare = sorted((c for c in OKABE_ITO.values() if c not in taken), key=lambda c: c in HOSTED_COLOURS.values())
    spare = spare or list(OKABE_ITO.values())
    styles, extra = {}, 0
    for method in setting.methods:
        if method in setting.oracles:
            styles[method] = dict(ORACLE_STYLE)
        elif method in HOSTED_COLOURS:
            styles[method] = {"color": HOSTED_COLOURS[method], "linestyle": "-", "marker": "o"}
        else:
            linestyle = EXTRA_LINESTYLES[(extra // len(spare)) % len(EXTRA_LINESTYLES)]
            styles[method] = {"color": spare[extra % len(spare)], "linestyle": linestyle, "marker": "^"}
            extra += 1
    return styles
