"""One colour per method (issue 79): every hosted method, the perfect filter and the reference
rows each in a colour of their own, a plugin method in one that no other method of its figure
has, however many there are, and never an answer's or a sample's colour."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from matplotlib.colors import to_hex

from cirbench.plugins import builtin_methods_dir
from cirbench.report.analysis.loading.load import Setting
from cirbench.report.analysis.rankings.leaderboard import ANSWERS
from cirbench.report.figures.palette import (
    CLEAN_COLOUR, NOISY_COLOUR, REFERENCE_STYLES, hosted_colours, method_styles,
)

FILTER = "oracle"
"""The hosted perfect filter: drawn black and dashed, never from the palette file."""
NOT_METHODS = {to_hex(c) for c in (CLEAN_COLOUR, NOISY_COLOUR, *(a.colour for a in ANSWERS.values()))}


def _setting(methods: list[str], oracles: tuple[str, ...] = ()) -> Setting:
    runs = pd.DataFrame({"method": methods, "is_oracle": [m in oracles for m in methods]})
    empty = pd.DataFrame()
    return Setting("toy", "tiny", "thirds", runs, empty, empty, empty, empty)


def _colours(setting: Setting) -> list[str]:
    return [to_hex(style["color"]) for style in method_styles(setting).values()]


def test_every_hosted_method_is_in_the_palette_file() -> None:
    hosted = {p.stem for p in builtin_methods_dir().glob("*.py") if not p.name.startswith("_")}
    assert {"sprc", "tme", "conesep", "hug", "habit", "intent", "ssn", "cala"} <= hosted
    assert set(hosted_colours()) == hosted - {FILTER}


def test_hosted_methods_the_filter_and_the_references_never_share_a_colour() -> None:
    methods = [*hosted_colours(), FILTER]
    colours = _colours(_setting(methods, oracles=(FILTER,)))
    references = [to_hex(style["color"]) for style in REFERENCE_STYLES.values()]
    everything = colours + references
    assert len(colours) == len(methods) and len(set(everything)) == len(everything), everything
    assert not set(colours) & NOT_METHODS


@pytest.mark.parametrize("plugins", [1, 5, 20])
def test_a_plugin_gets_a_colour_no_other_method_of_its_figure_has(plugins: int) -> None:
    """Beside every hosted method and the filter, and beside two hosted methods only."""
    mine = [f"mine{k:02d}" for k in range(plugins)]
    for hosted in (list(hosted_colours()), ["sprc", "ssn"]):
        setting = _setting([*hosted, FILTER, *mine], oracles=(FILTER,))
        colours = _colours(setting)
        assert len(set(colours)) == len(colours), colours
        assert not set(colours) & NOT_METHODS
        assert all(method_styles(setting)[m]["color"] == hosted_colours()[m] for m in hosted)


@pytest.mark.parametrize("body, error", [
    ('a = "bright blue"\nb = "bright blue"\n', "one colour for two methods"),
    ('a = "yellow"\n', "not a colour of Tol's schemes"),
])
def test_the_palette_file_refuses_an_unknown_or_a_shared_colour(tmp_path: Path, body: str, error: str) -> None:
    path = tmp_path / "palette.toml"
    path.write_text("[colour]\n" + body, encoding="utf-8")
    with pytest.raises(ValueError, match=error):
        hosted_colours(path)
