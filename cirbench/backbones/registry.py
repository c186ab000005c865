"""The backbone registry: name -> a factory that builds a fresh backbone for one cell.

A backbone plugin is one class: a :class:`~cirbench.backbones.base.Backbone` subclass with a
``name`` and the classmethod ``build`` (docs/adding-a-backbone.md). ``BACKBONES.register``
(the call :mod:`cirbench.plugins` makes for a user's class) turns it into a
:class:`BackboneClass`, the factory the harness calls; the built-ins register the same way.
A :class:`BackboneFactory` subclass, the second class a backbone plugin used to need, still
registers, with a DeprecationWarning."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import ClassVar

from cirbench.backbones.base import Backbone
from cirbench.backbones.blip2 import Blip2Backbone
from cirbench.backbones.clip import ClipBackbone
from cirbench.backbones.tiny import TinyBackbone
from cirbench.backbones.tiny_pretrain import build_tiny, start_identity
from cirbench.registry import Contract, Registry, overrides


class BackboneFactory:
    """Builds a backbone; ``seed`` initialises the trainable composer, ``weights`` names
    pretrained weights (a local directory or a tag), ``cache_dir`` holds derived caches.
    What the registry holds for every backbone; a plugin no longer subclasses it (deprecated:
    give the ``Backbone`` subclass a ``name`` and ``build`` instead)."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    default_lr: ClassVar[float]
    """The fine-tune's learning rate when a method's ``lr`` is None (the backbone class's)."""
    default_weights: ClassVar[str | None] = None
    """The weights tag used (and recorded) when --weights is not given."""

    def __call__(self, seed: int, cache_dir: Path, weights: str | None) -> Backbone:
        """A fresh backbone for one cell."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement __call__")


class BackboneClass(BackboneFactory):
    """The factory of a one-class backbone: its class's ``name``, ``description``,
    ``default_lr``, ``default_weights`` and ``start_identity`` (if it has one), and its
    ``build``."""

    def __init__(self, cls: type[Backbone]) -> None:
        self.cls = cls
        self.name, self.description, self.default_weights = cls.name, cls.description, cls.default_weights
        if overrides(cls, Backbone, "start_identity"):
            self.start_identity = cls.start_identity

    @property
    def default_lr(self) -> float:
        """The class's ``default_lr``, read when asked (a run id holds the resolved rate)."""
        return self.cls.default_lr

    def __call__(self, seed: int, cache_dir: Path, weights: str | None) -> Backbone:
        return self.cls.build(seed, cache_dir, weights)


def _legacy_factory(cls: type[BackboneFactory]) -> BackboneFactory:
    warnings.warn(f"backbone {cls.name!r} ({cls.__module__}.{cls.__qualname__}): a BackboneFactory subclass is deprecated; "
                  "give its Backbone subclass the name, description and default_lr and a build(cls, seed, cache_dir, "
                  "weights) classmethod instead (docs/adding-a-backbone.md)", DeprecationWarning, stacklevel=2)
    return cls()


BACKBONE_CONTRACT = Contract(Backbone, "build", "build(cls, seed, cache_dir, weights) -> Backbone", BackboneClass)
"""A backbone plugin: a :class:`Backbone` subclass with a ``name`` that implements ``build``."""
LEGACY_BACKBONE_CONTRACT = Contract(BackboneFactory, "__call__", "__call__(self, seed, cache_dir, weights) -> Backbone",
                                    _legacy_factory)
"""The former second class, still taken (deprecated)."""


class Tiny(TinyBackbone):
    """The CPU default. Its ``build`` lives here, not on :class:`TinyBackbone`: it loads the
    released start (``tiny_pretrain``), which itself builds ``TinyBackbone``s."""

    description = ("small CNN tower + 2-layer Q-Former-style composer; CPU, no download; --weights cir (default: "
                   "composer pre-trained on disjoint synthetic data), stage1, random or pretrained")
    default_weights = "cir"

    @classmethod
    def build(cls, seed: int, cache_dir: Path, weights: str | None) -> Backbone:
        return build_tiny(weights, seed, cache_dir)

    @staticmethod
    def start_identity(weights: str | None) -> str:
        """The start of ``weights`` as a run id holds it (:func:`~cirbench.backbones.tiny_pretrain.start_identity`)."""
        return start_identity(weights)


BACKBONES: Registry[BackboneFactory] = Registry("backbone", (BACKBONE_CONTRACT, LEGACY_BACKBONE_CONTRACT))
for _builtin in (Tiny, Blip2Backbone, ClipBackbone):  # as a plugin's class is (cirbench.plugins)
    BACKBONES.register(_builtin)
