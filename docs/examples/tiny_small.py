"""An example backbone plugin: ``tiny-small``, a narrower ``tiny`` trained from scratch.

The same frozen random CNN tower as ``tiny`` (so it shares ``tiny``'s token cache), with a
1-layer composer of width 64 and 4 query tokens, initialised from the cell's seed and not
pre-trained: a quick start for trying a method. Run it with
``cirbench run --plugin docs/examples/tiny_small.py --backbone tiny-small --epochs 1``.
"""

from __future__ import annotations

from pathlib import Path

from cirbench.backbones.tiny import TinyBackbone


class TinySmall(TinyBackbone):
    """The narrow ``tiny`` (see the module docstring); it takes no ``--weights``."""

    name = "tiny-small"
    description = "example plugin: tiny's tower with a 1-layer, width-64 composer from scratch (docs/adding-a-backbone.md)"
    default_lr = 1e-3

    @classmethod
    def build(cls, seed: int, cache_dir: Path, weights: str | None) -> TinyBackbone:
        """A fresh narrow backbone; the composer is initialised from ``seed``."""
        if weights:
            raise ValueError(f"tiny-small takes no --weights (got {weights!r}): it starts from scratch")
        return TinyBackbone(hidden_size=64, embed_dim=64, num_query_tokens=4, num_layers=1, num_heads=4, seed=seed)
