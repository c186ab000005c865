"""A written figure and the helpers every figure module shares: its title, wrapped to the
figure's width, and the PNG with the title, caption and alt text the report prints."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

from matplotlib import rc_context
from matplotlib.figure import Figure

DPI = 110
MAX_WIDTH = 11.0
"""The widest figure, in inches: at :data:`DPI` it is shown at its own size (1,210 px) in a page
1,280 px wide, so its text is not scaled down."""
TEXT_SIZE = 11
"""The smallest text in a figure, in points: 17 px at :data:`DPI`, at least a browser's body text."""
FIGURE_STYLE: dict = {
    "font.size": TEXT_SIZE, "axes.titlesize": TEXT_SIZE + 1, "axes.labelsize": TEXT_SIZE, "xtick.labelsize": TEXT_SIZE,
    "ytick.labelsize": TEXT_SIZE, "legend.fontsize": TEXT_SIZE, "legend.title_fontsize": TEXT_SIZE,
    "figure.titlesize": TEXT_SIZE + 1,
}
"""The report's figure text (matplotlib's settings, applied while a figure is drawn: :data:`styled`)."""
styled = rc_context(FIGURE_STYLE)
"""A decorator (and context manager) that draws a figure in :data:`FIGURE_STYLE`."""


@dataclass(frozen=True)
class FigureFile:
    """A written figure: its path, a short title, a caption saying how to read it, and the
    alt text that says what it shows (for a reader who cannot see it)."""

    path: Path
    title: str
    caption: str
    alt: str = ""


def figure_title(fig: Figure, title: str, width_in: float) -> None:
    """Set ``fig``'s title, wrapped to its width."""
    fig.suptitle("\n".join(textwrap.wrap(title, max(40, int(width_in * 9)))), fontsize=TEXT_SIZE + 1)


def save_figure(fig: Figure, out: Path, name: str, title: str, caption: str, alt: str = "") -> FigureFile:
    """Write ``fig`` as ``out/<name>.png`` and return it with its title, caption and alt text
    (``alt`` empty: the figure's own title, which says what it shows)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    own = fig.get_suptitle().replace("\n", " ")
    fig.savefig(path, dpi=DPI)
    return FigureFile(path, title, caption, alt or own or title)
