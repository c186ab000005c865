"""What a noise protocol sees and proposes: the :class:`NoiseContext` it may use, the
:class:`Proposal` it returns, the :class:`NoiseProtocol` interface and the draw of the
samples to corrupt. :mod:`cirbench.data.noise.injection` turns a proposal into a manifest; the
protocols (there and in :mod:`cirbench.data.noise.hard`) import only this module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from cirbench.data.base import CIRDataset, TripletSplit
from cirbench.registry import Contract


@dataclass
class NoiseContext:
    """What a protocol may use besides the split: the dataset, and (lazily) one pooled
    frozen-tower feature per image, for protocols that pick visually close neighbours."""

    dataset: CIRDataset
    image_features: Callable[[], np.ndarray] | None = None


@dataclass
class Proposal:
    """A protocol's output: per sample, the new reference/target image index, the index of
    the sample whose text it now carries, and the kind of corruption attempted (any name:
    the report shows every type a manifest holds). A protocol that writes new texts (a
    paraphrase, a model's caption) gives them in ``texts``, one per sample, which then
    replaces the texts ``text_source`` points to."""

    reference: np.ndarray
    text_source: np.ndarray
    target: np.ndarray
    attempted: np.ndarray  # noise type names, "clean" where untouched
    texts: np.ndarray | None = None


class NoiseProtocol:
    """A way of corrupting a training split, registered by its class (instantiated with no
    arguments for each injection). A subclass sets ``name`` and ``description`` and
    implements ``propose``, which must be deterministic in ``rng``: the built-in protocols
    and a noise plugin (docs/adding-a-noise-protocol.md) alike."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    noise_types: ClassVar[dict[str, str]] = {}
    """Each noise type it records in ``Proposal.attempted`` and what it is, e.g.
    ``{"caption": "caption swapped"}``: the report's wording of its detection figure."""

    def propose(self, split: TripletSplit, rate: float, rng: np.random.Generator, context: NoiseContext) -> Proposal:
        """The proposed corruption of ``split`` at ``rate`` (see :class:`Proposal`)."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement propose")


NOISE_CONTRACT = Contract(NoiseProtocol, "propose", "propose(self, split, rate, rng, context) -> Proposal")
"""A noise protocol plugin: a :class:`NoiseProtocol` subclass with a ``name`` that implements
``propose``; its registry (:data:`cirbench.data.noise.injection.NOISE_PROTOCOLS`) holds the class."""


def untouched(split: TripletSplit) -> Proposal:
    """A proposal that leaves every sample as it is (a protocol then corrupts the chosen ones)."""
    n = len(split)
    return Proposal(
        reference=split.reference.copy(),
        text_source=np.arange(n),
        target=split.target.copy(),
        attempted=np.full(n, "clean", dtype=object),
    )


def choose_noisy(n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """``int(rate * n)`` distinct sample positions, uniformly at random, in draw order."""
    return rng.choice(n, size=int(rate * n), replace=False)
