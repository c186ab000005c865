"""Image-text pre-training of the ``tiny`` composer, the analogue of BLIP-2's stage-1
Q-Former pre-training, run by the harness itself (no download) and cached under the data
root.

Every robust-CIR paper fine-tunes a Q-Former that was already pre-trained to align images
with captions; ``tiny``'s default composer starts from random weights. This gives ``tiny``
the same starting point: the composer (frozen tower kept as it is) is trained with BLIP-2's
image-text contrastive loss on rendered scenes with their captions. The scenes have 1 or 5
objects and the benchmark's have 2 to 4, so no pre-training image or caption is a benchmark
image or caption, and no modification text is ever seen. The image side is the image-only
pass (``target_features``, max over query tokens, as BLIP-2's ITC), the text side the
text-only pass (``composed_feature`` with no image). Select it with ``--weights stage1``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from cirbench.backbones.base import max_token_similarity
from cirbench.results.atomic import atomic_write

COMPOSER_PRETRAIN_VERSION = "1"


def pretrain_tiny_composer(backbone, steps: int = 600, batch_size: int = 128, pool: int = 12000, seed: int = 0) -> dict:
    """Train ``backbone``'s composer (in place) with symmetric image-text InfoNCE on
    synthetic captioned scenes; returns the composer's state (every parameter but the tower's)."""
    from cirbench.backbones.tower_pretrain import pretraining_scenes
    from cirbench.data.shapes import caption_scene, render_scenes

    rng = np.random.default_rng([seed, 11])
    scenes, _ = pretraining_scenes(rng, pool)
    pixels = torch.from_numpy(render_scenes(scenes, rng)).permute(0, 3, 1, 2).float()
    tokens = backbone.encode_image_tokens((pixels / 255.0 - 0.5) / 0.25)
    texts = backbone.tokenize([caption_scene(scene) for scene in scenes])
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        log_temperature = torch.nn.Parameter(torch.tensor(float(np.log(0.07))))
        params = [p for name, p in backbone.named_parameters() if not name.startswith("tower.")] + [log_temperature]
        optimizer = torch.optim.AdamW(params, lr=backbone.default_lr, betas=(0.9, 0.98), weight_decay=0.05)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=backbone.default_lr, total_steps=steps, pct_start=0.1)
        labels = torch.arange(batch_size)
        backbone.train()
        for _ in range(steps):
            index = torch.randint(0, pool, (batch_size,))
            text = backbone.composed_feature(None, texts.select(index))
            sim = max_token_similarity(text, backbone.target_features(tokens[index])) / log_temperature.exp().clamp_min(0.01)
            loss = (F.cross_entropy(sim, labels) + F.cross_entropy(sim.T, labels)) / 2
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
    return {name: value.detach().clone() for name, value in backbone.state_dict().items() if not name.startswith("tower.")}


def load_pretrained_composer(backbone, cache_dir: Path | None, fresh: Callable[[], object]) -> None:
    """Load the pre-trained composer into ``backbone`` from ``<cache_dir>/towers/``, or
    pre-train ``fresh()`` (the same architecture, seed 0) now and cache it there. Every cell
    starts from the same pre-trained composer, whatever its seed, as with a released checkpoint."""
    shape = f"h{backbone.hidden_size}-q{backbone.num_query_tokens}-l{len(backbone.layers)}"
    path = Path(cache_dir or "datasets") / "towers" / f"{backbone.tower_key()}-composer-{shape}-stage1-v{COMPOSER_PRETRAIN_VERSION}.pt"
    if path.exists():
        try:
            backbone.load_state_dict(torch.load(path, weights_only=True), strict=False)
            return
        except (RuntimeError, OSError, EOFError) as exc:
            warnings.warn(f"composer cache {path} is unreadable ({exc}); pre-training again")
    with torch.random.fork_rng():
        state = pretrain_tiny_composer(fresh())
    atomic_write(path, lambda tmp: torch.save(state, tmp))
    backbone.load_state_dict(state, strict=False)
