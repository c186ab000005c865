"""Labels beside points that never cover each other or a point: each label tries offsets
around its point, nearest first, and takes the first whose box (as the renderer draws it)
stays inside the axes and meets no label placed before it and no point's marker."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.text import Annotation
from matplotlib.transforms import Bbox

LABEL_GID = "point-label"
"""The ``gid`` of every label this module places (so a test can find them)."""
RADII: tuple[float, ...] = (5.0, 10.0, 16.0, 24.0, 34.0, 46.0)
"""The distances (points) a label tries from its point, nearest first."""
ANGLES: tuple[float, ...] = (30.0, 150.0, -30.0, -150.0, 90.0, -90.0, 0.0, 180.0)
"""The directions (degrees) tried at each distance: the diagonals first, then above, below and the sides."""
MARKER_PX = 8.0
"""Half the side of the box kept free around each point (pixels)."""


@dataclass
class PointLabel:
    """A label to place beside the point ``xy`` (data coordinates) and how to draw it."""

    text: str
    xy: tuple[float, float]
    style: dict = field(default_factory=dict)


def _area(a: Bbox, b: Bbox) -> float:
    """The area two boxes share (0 when they do not meet)."""
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return width * height if width > 0 and height > 0 else 0.0


def _align(angle: float) -> tuple[str, str]:
    """The alignment that puts the text on the far side of its anchor at ``angle``."""
    cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    ha = "left" if cos > 0.3 else "right" if cos < -0.3 else "center"
    va = "bottom" if sin > 0.3 else "top" if sin < -0.3 else "center"
    return ha, va


def place_labels(ax: Axes, labels: list[PointLabel], points: list[tuple[float, float]],
                 renderer: RendererBase) -> list[Annotation]:
    """Place ``labels`` on ``ax`` (already laid out: its limits and position final), each at the
    first offset whose box is inside the axes and meets no earlier label and no marker of
    ``points`` (data coordinates); where none is free, the offset that overlaps least."""
    frame = ax.get_window_extent(renderer)
    scale = ax.figure.dpi / 72.0
    markers = [Bbox.from_bounds(px - MARKER_PX, py - MARKER_PX, 2 * MARKER_PX, 2 * MARKER_PX)
               for px, py in (ax.transData.transform(p) for p in points)]
    placed: list[Bbox] = []
    out = []
    for label in labels:
        best = None
        for radius in RADII:
            for angle in ANGLES:
                dx, dy = radius * math.cos(math.radians(angle)), radius * math.sin(math.radians(angle))
                ha, va = _align(angle)
                text = ax.annotate(label.text, label.xy, xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                                   gid=LABEL_GID, **label.style)
                box = text.get_window_extent(renderer).padded(1.0 * scale)
                outside = (max(0.0, frame.x0 - box.x0) + max(0.0, box.x1 - frame.x1)
                           + max(0.0, frame.y0 - box.y0) + max(0.0, box.y1 - frame.y1)) * box.height
                cost = outside + sum(_area(box, other) for other in placed + markers)
                if best is None or cost < best[0]:
                    if best is not None:
                        best[1].remove()
                    best = (cost, text, box)
                else:
                    text.remove()
                if cost == 0.0:
                    break
            if best is not None and best[0] == 0.0:
                break
        if best is not None:
            placed.append(best[2])
            out.append(best[1])
    return out
