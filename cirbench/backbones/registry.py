"""The backbone registry: name -> :class:`BackboneFactory`, which builds a fresh backbone for
one cell. Plugins (:mod:`cirbench.plugins`) add theirs here."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from cirbench.backbones.base import Backbone
from cirbench.backbones.blip2 import Blip2Backbone
from cirbench.backbones.clip import ClipBackbone
from cirbench.backbones.tiny import TinyBackbone
from cirbench.backbones.tiny_pretrain import build_tiny, start_identity
from cirbench.registry import Registry


class BackboneFactory:
    """Builds a backbone; ``seed`` initialises the trainable composer, ``weights`` names
    pretrained weights (a local directory or a tag), ``cache_dir`` holds derived caches.
    The built-in backbones and a backbone plugin (docs/adding-a-backbone.md) subclass it,
    set ``name``, ``description`` and ``default_lr`` and implement ``__call__``."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    default_lr: ClassVar[float]
    """The fine-tune's learning rate when a method's ``lr`` is None (the backbone class's)."""
    default_weights: ClassVar[str | None] = None
    """The weights tag used (and recorded) when --weights is not given."""

    def __call__(self, seed: int, cache_dir: Path, weights: str | None) -> Backbone:
        """A fresh backbone for one cell."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement __call__")


class TinyFactory(BackboneFactory):
    """The CPU default."""

    name = "tiny"
    default_weights = "cir"

    description = ("small CNN tower + 2-layer Q-Former-style composer; CPU, no download; --weights cir (default: "
                   "composer pre-trained on disjoint synthetic data), stage1, random or pretrained")

    @property
    def default_lr(self) -> float:
        """:attr:`TinyBackbone.default_lr`, read when asked (a run id holds the resolved rate)."""
        return TinyBackbone.default_lr

    def start_identity(self, weights: str | None) -> str:
        """The start of ``weights`` as a run id holds it (:func:`~cirbench.backbones.tiny_pretrain.start_identity`)."""
        return start_identity(weights)

    def __call__(self, seed: int, cache_dir: Path, weights: str | None) -> Backbone:
        return build_tiny(weights, seed, cache_dir)


BACKBONES: Registry[BackboneFactory] = Registry("backbone")
BACKBONES.add("tiny", TinyFactory())


class Blip2Factory(BackboneFactory):
    """BLIP-2 through transformers (pip install 'cirbench[blip2]')."""

    name = "blip2"
    description = "BLIP-2 ITM checkpoint (transformers): frozen ViT + trainable Q-Former; --weights DIR or cached hub id"

    @property
    def default_lr(self) -> float:
        """:attr:`Blip2Backbone.default_lr`, read when asked."""
        return Blip2Backbone.default_lr

    def __call__(self, seed: int, cache_dir: Path, weights: str | None) -> Backbone:
        return Blip2Backbone.from_pretrained(weights)


class ClipFactory(BackboneFactory):
    """open_clip towers + a trainable composer (pip install 'cirbench[clip]')."""

    name = "clip"
    description = "open_clip frozen towers + trainable Q-Former-style composer; --weights ARCH:TAG, ARCH:FILE or DIR"

    @property
    def default_lr(self) -> float:
        """:attr:`ClipBackbone.default_lr`, read when asked."""
        return ClipBackbone.default_lr

    def __call__(self, seed: int, cache_dir: Path, weights: str | None) -> Backbone:
        return ClipBackbone.from_weights(weights, seed=seed)


BACKBONES.add("blip2", Blip2Factory())
BACKBONES.add("clip", ClipFactory())
