"""A written figure and the helpers every figure module shares: its title, wrapped to the
figure's width, and the PNG with the title, caption and alt text the report prints."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

DPI = 110


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
    fig.suptitle("\n".join(textwrap.wrap(title, max(40, int(width_in * 11)))), fontsize=11)


def save_figure(fig: Figure, out: Path, name: str, title: str, caption: str, alt: str = "") -> FigureFile:
    """Write ``fig`` as ``out/<name>.png`` and return it with its title, caption and alt text
    (``alt`` empty: the figure's own title, which says what it shows)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    own = fig.get_suptitle().replace("\n", " ")
    fig.savefig(path, dpi=DPI)
    return FigureFile(path, title, caption, alt or own or title)
