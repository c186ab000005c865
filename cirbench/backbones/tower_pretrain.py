"""A short contrastive pre-training of the ``tiny`` image tower on synthetic image-caption
pairs, run by the harness itself (no download) and cached under the data root.

The pairs are rendered scenes with 1 or 5 objects, so they are disjoint from the ``shapes``
benchmark by construction (its scenes have 2 to 4). The caption side is a small encoder of
the caption's objects (each object's colour, shape, size and cell embedded and summed), the
image side is the tower's 16 patch tokens flattened through one linear layer; both are
trained with a symmetric InfoNCE loss, then only the tower is kept and frozen.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from cirbench.results.atomic import atomic_write

PRETRAIN_VERSION = "1"
PRETRAIN_OBJECT_COUNTS = (1, 5)


class ObjectCaptionEncoder(nn.Module):
    """Embeds a caption given as its objects: (B, K, 4) indices with -1 for padding."""

    def __init__(self, dim: int = 128) -> None:
        super().__init__()
        from cirbench.data.shapes import SHAPES_COLOURS, SHAPES_SHAPES, SHAPES_SIZES

        self.parts = nn.ModuleList(
            nn.Embedding(n, dim) for n in (len(SHAPES_COLOURS), len(SHAPES_SHAPES), len(SHAPES_SIZES), 9)
        )
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))

    def forward(self, objects: torch.Tensor) -> torch.Tensor:
        present = (objects[..., 0] >= 0).float().unsqueeze(-1)
        idx = objects.clamp_min(0)
        per_object = self.mlp(sum(emb(idx[..., i]) for i, emb in enumerate(self.parts)))
        return F.normalize((per_object * present).sum(1), dim=-1)


def pretraining_scenes(rng: np.random.Generator, n: int) -> tuple[list, torch.Tensor]:
    """``n`` scenes of 1 or 5 objects (the benchmark has 2 to 4) and their objects as (n, 5, 4)
    indices (colour, shape, size, cell), -1 where a scene has fewer objects."""
    from cirbench.data.shapes import SHAPES_COLOURS, SHAPES_SHAPES, ShapeObject

    kinds = len(SHAPES_COLOURS) * len(SHAPES_SHAPES)
    scenes, rows = [], np.full((n, max(PRETRAIN_OBJECT_COUNTS), 4), -1, dtype=np.int64)
    for i in range(n):
        k = int(rng.choice(PRETRAIN_OBJECT_COUNTS))
        cells = np.sort(rng.choice(9, size=k, replace=False))
        pairs = rng.choice(kinds, size=k, replace=False)
        sizes = rng.integers(0, 2, size=k)
        scene = tuple(
            ShapeObject(int(p // len(SHAPES_SHAPES)), int(p % len(SHAPES_SHAPES)), int(z), int(c))
            for p, z, c in zip(pairs, sizes, cells)
        )
        scenes.append(scene)
        rows[i, :k] = [[o.colour, o.shape, o.size, o.cell] for o in scene]
    return scenes, torch.from_numpy(rows)


def pretrain_tiny_tower(steps: int = 300, batch_size: int = 256, pool: int = 12000, seed: int = 0):
    """Train a fresh :class:`~cirbench.backbones.tiny.TinyTower` contrastively; returns it."""
    from cirbench.backbones.tiny import TinyTower
    from cirbench.data.shapes import render_scenes

    rng = np.random.default_rng([seed, 7])
    scenes, objects = pretraining_scenes(rng, pool)
    pixels = torch.from_numpy(render_scenes(scenes, rng)).permute(0, 3, 1, 2).float()
    pixels = (pixels / 255.0 - 0.5) / 0.25
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        tower, text = TinyTower(), ObjectCaptionEncoder()
        head = nn.Linear(16 * 64, 128)
        log_scale = nn.Parameter(torch.tensor(np.log(1 / 0.07), dtype=torch.float32))
        params = [*tower.parameters(), *text.parameters(), *head.parameters(), log_scale]
        optimizer = torch.optim.AdamW(params, lr=2e-3, weight_decay=0.01)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=2e-3, total_steps=steps, pct_start=0.1)
        labels = torch.arange(batch_size)
        for _ in range(steps):
            index = torch.randint(0, pool, (batch_size,))
            image = F.normalize(head(tower(pixels[index]).flatten(1)), dim=-1)
            logits = log_scale.exp().clamp(max=100) * image @ text(objects[index]).T
            loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
    return tower.eval()


def pretrained_tiny_tower(cache_dir: Path | None):
    """The pre-trained tower, from ``<cache_dir>/towers/`` or trained now and cached there."""
    from cirbench.backbones.tiny import TinyTower

    path = Path(cache_dir or "datasets") / "towers" / f"tiny-tower-pretrained-v{PRETRAIN_VERSION}.pt"
    tower = TinyTower()
    if path.exists():
        try:
            tower.load_state_dict(torch.load(path, weights_only=True))
            return tower.eval()
        except (RuntimeError, OSError, EOFError) as exc:
            warnings.warn(f"tower cache {path} is unreadable ({exc}); pre-training again")
    tower = pretrain_tiny_tower()
    atomic_write(path, lambda tmp: torch.save(tower.state_dict(), tmp))
    return tower
