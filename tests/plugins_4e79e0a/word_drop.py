"""An example noise protocol plugin: ``word_drop``, a deterministic "paraphrase" that writes
new texts instead of moving existing ones.

Each chosen triplet keeps its images, and its modification text loses one word (the
protocol's ``rng`` picks which), so "make it blue" may become "make blue" or "it blue". The
manifest records each such sample as ``paraphrase`` (and its new text); a text of a single
word is left as it is, and that sample stays clean. Run it with
``cirbench run --plugin docs/examples/word_drop.py --noise-protocol word_drop --noise 0.5``.
"""

from __future__ import annotations

import numpy as np

from cirbench.data.base import TripletSplit
from cirbench.data.proposal import NoiseContext, NoiseProtocol, Proposal, choose_noisy, untouched


def drop_word(text: str, rng: np.random.Generator) -> str:
    """``text`` without one of its words, chosen by ``rng`` (a one-word text unchanged)."""
    words = text.split()
    if len(words) < 2:
        return text
    del words[int(rng.integers(len(words)))]
    return " ".join(words)


class WordDrop(NoiseProtocol):
    """Drops one word of each chosen triplet's text (see the module docstring)."""

    name = "word_drop"
    description = "example plugin: each chosen triplet's text loses one word, a new text (docs/adding-a-noise-protocol.md)"

    def propose(self, split: TripletSplit, rate: float, rng: np.random.Generator, context: NoiseContext) -> Proposal:
        """The chosen samples get their own text less one word; attempted type ``paraphrase``."""
        out = untouched(split)
        texts = np.asarray(split.texts, dtype=object).copy()
        for i in choose_noisy(len(split), rate, rng):
            texts[i] = drop_word(split.texts[i], rng)
            out.attempted[i] = "paraphrase"
        out.texts = texts
        return out
