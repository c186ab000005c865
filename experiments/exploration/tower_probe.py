"""How much a frozen ``tiny`` tower sees (issue 43): linear probes of each grid cell's
object (colour, shape, size, or empty: the place) from the tower's flattened tokens.

    python experiments/exploration/tower_probe.py datasets/starts/seeing.pt [default]

``default`` is the released start's tower. Scenes are drawn like the benchmark's (2 to 4
objects) with a seed of their own; the probes are fitted on 3,000 and scored on 1,000.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression

from cirbench.backbones.tiny_pretrain import _normalised_pixels
from cirbench.backbones.tiny_start import shipped_backbone
from cirbench.data.datasets.shapes import random_scenes, render_scenes

PARTS = ("colour", "shape", "size")


def probe(tower: torch.nn.Module, n_fit: int = 3000, n_test: int = 1000) -> dict[str, float]:
    """Mean test accuracy over the nine cells of each attribute (empty cells count as a class)
    and of the place (occupied or not)."""
    rng = np.random.default_rng([2026, 43])
    scenes = random_scenes(rng, n_fit + n_test)
    with torch.no_grad():
        features = tower(_normalised_pixels(render_scenes(scenes, rng))).flatten(1).numpy()
    labels = np.full((len(scenes), 9, 3), -1)
    for i, scene in enumerate(scenes):
        for obj in scene:
            labels[i, obj.cell] = (obj.colour, obj.shape, obj.size)
    out: dict[str, list[float]] = {name: [] for name in (*PARTS, "place")}
    for cell in range(9):
        targets = {name: labels[:, cell, j] for j, name in enumerate(PARTS)}
        targets["place"] = (labels[:, cell, 0] >= 0).astype(int)
        for name, y in targets.items():
            model = LogisticRegression(max_iter=300, C=1.0).fit(features[:n_fit], y[:n_fit])
            out[name].append(float(model.score(features[n_fit:], y[n_fit:])))
    return {name: round(float(np.mean(v)), 3) for name, v in out.items()}


def main() -> None:
    for path in sys.argv[1:]:
        if path == "default":
            tower = shipped_backbone().tower
        else:
            from plugin import load_start_file  # the exploration plugin beside this file

            tower = load_start_file(path).tower
        print(json.dumps({"start": path, **probe(tower.eval())}))


if __name__ == "__main__":
    main()
