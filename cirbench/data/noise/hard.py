"""The ``hard`` noise protocol: plausible but wrong modification texts (ConeSep, Figure 1).

Each of the ``int(rate * N)`` chosen training triplets gets the text of another triplet
whose reference image is among the ``neighbours`` nearest to its own reference in the
frozen tower's pooled feature space (cosine similarity), chosen uniformly among them. Its
reference and target stay as they were, so the two images are still visually close while
the text describes an edit of a similar-looking image. A donor whose text equals the
sample's own is never chosen, so every chosen sample is truly noisy. Donors may share the
sample's reference image (another edit of the very same picture: the hardest case).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from cirbench.data.base import TripletSplit
from cirbench.data.noise.proposal import NoiseContext, NoiseProtocol, Proposal, choose_noisy, untouched

_CHUNK = 1024


def nearest_donors(
    features: np.ndarray, text_code: np.ndarray, chosen: np.ndarray, neighbours: int, rng: np.random.Generator
) -> np.ndarray:
    """For each sample in ``chosen``, a donor among the ``neighbours`` samples whose
    (L2-normalised) ``features`` are most similar, excluding itself and every sample with
    the same ``text_code``; -1 where no such sample exists. Vectorised per chunk of rows."""
    n = len(features)
    k = max(1, min(neighbours, n - 1))
    pick = rng.integers(0, k, size=len(chosen))
    donors = np.full(len(chosen), -1, dtype=np.int64)
    for start in range(0, len(chosen), _CHUNK):
        rows = chosen[start : start + _CHUNK]
        sim = features[rows] @ features.T
        sim[np.arange(len(rows)), rows] = -np.inf
        sim[text_code[rows][:, None] == text_code[None, :]] = -np.inf
        top = np.sort(np.argpartition(-sim, k - 1, axis=1)[:, :k], axis=1)
        choice = top[np.arange(len(rows)), pick[start : start + len(rows)]]
        valid = np.isfinite(sim[np.arange(len(rows)), choice])
        donors[start : start + len(rows)] = np.where(valid, choice, -1)
    return donors


class HardProtocol(NoiseProtocol):
    """Nearest-neighbour caption swap in the frozen tower's feature space (see the module docstring)."""

    name = "hard"
    description = "hard noise (ConeSep Fig. 1): each chosen triplet gets the text of a triplet with a visually close reference"
    noise_types = {"caption": "caption of a triplet with a visually close reference"}
    neighbours: ClassVar[int] = 10

    def propose(self, split: TripletSplit, rate: float, rng: np.random.Generator, context: NoiseContext) -> Proposal:
        """Chosen samples take a nearest-neighbour donor's text; attempted type ``caption``."""
        n = len(split)
        out = untouched(split)
        chosen = choose_noisy(n, rate, rng)
        if len(chosen) == 0:
            return out
        if context.image_features is None:
            raise ValueError("the 'hard' noise protocol needs the frozen tower's image features (NoiseContext.image_features)")
        pooled = np.asarray(context.image_features(), dtype=np.float32)
        if pooled.ndim != 2 or len(pooled) != len(context.dataset.image_ids):
            raise ValueError(
                f"'hard' noise: image features must be (n_images={len(context.dataset.image_ids)}, dim), got {pooled.shape}"
            )
        features = pooled[split.reference]
        features /= np.maximum(np.linalg.norm(features, axis=1, keepdims=True), 1e-12)
        _, text_code = np.unique(np.asarray(split.texts, dtype=object).astype(str), return_inverse=True)
        donors = nearest_donors(features, text_code.reshape(-1), chosen, self.neighbours, rng)
        ok = donors >= 0
        out.text_source[chosen[ok]] = donors[ok]
        out.attempted[chosen[ok]] = "caption"
        return out
