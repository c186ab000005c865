"""The backbone registry: name -> factory of a fresh backbone for one cell."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from cirbench.backbones.base import Backbone
from cirbench.registry import Registry


class BackboneFactory(Protocol):
    """Builds a backbone; ``seed`` initialises the trainable composer, ``weights`` names
    pretrained weights (a local directory or a tag), ``cache_dir`` holds derived caches."""

    description: str

    def __call__(self, seed: int, cache_dir: Path, weights: str | None) -> Backbone: ...


class TinyFactory:
    """The CPU default."""

    description = "small CNN tower + 2-layer Q-Former-style composer; CPU, no download"

    def __call__(self, seed: int, cache_dir: Path, weights: str | None) -> Backbone:
        from cirbench.backbones.tiny import TinyBackbone

        return TinyBackbone(tower=weights or "random", cache_dir=cache_dir, seed=seed)


BACKBONES: Registry[BackboneFactory] = Registry("backbone")
BACKBONES.add("tiny", TinyFactory())
