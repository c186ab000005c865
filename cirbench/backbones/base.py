"""The backbone interface, shaped like the BLIP-2 setup that SPRC, TME and ConeSep use.

A backbone is a frozen image tower (whose patch tokens the harness caches once per image)
plus a trainable Q-Former-style composer: learnable query tokens and text tokens in joint
self-attention, the query positions cross-attending to image tokens, and two projections
(``text_proj`` for the composed query, ``vision_proj`` for target tokens). Every method is
written against this interface only, so it runs unchanged on ``tiny``, ``blip2`` or ``clip``.
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class TextBatch:
    """Tokenised texts: ``ids`` (B, T) and ``mask`` (B, T, True for real tokens).
    Position 0 is the classification token whose output is the composed feature."""

    ids: torch.Tensor
    mask: torch.Tensor

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def select(self, index: torch.Tensor) -> "TextBatch":
        """The texts at ``index`` (a LongTensor of rows)."""
        return TextBatch(self.ids[index], self.mask[index])

    def to(self, device: torch.device | str) -> "TextBatch":
        """This batch on ``device``."""
        return TextBatch(self.ids.to(device), self.mask.to(device))

    @staticmethod
    def cat(parts: list["TextBatch"]) -> "TextBatch":
        """Concatenate batches along the batch dimension, padding to the longest."""
        length = max(p.ids.shape[1] for p in parts)
        ids = torch.cat([F.pad(p.ids, (0, length - p.ids.shape[1])) for p in parts])
        mask = torch.cat([F.pad(p.mask, (0, length - p.mask.shape[1])) for p in parts])
        return TextBatch(ids, mask)


@dataclass
class ComposerOutput:
    """Composer hidden states: ``query`` (B, Q, H) at the query-token positions and
    ``text`` (B, T, H) at the text positions (None for an image-only pass)."""

    query: torch.Tensor
    text: torch.Tensor | None


class Backbone(nn.Module, ABC):
    """Frozen image tower + trainable composer. Subclasses implement the abstract parts;
    the feature helpers below are shared by every backbone.

    A backbone plugin is one such class with a ``name``, a ``description``, a ``default_lr``
    and the classmethod :meth:`build`, which makes a fresh one for a cell
    (docs/adding-a-backbone.md); its registry (:data:`cirbench.backbones.registry.BACKBONES`)
    holds a factory made from the class."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    default_weights: ClassVar[str | None] = None
    """The weights tag used (and recorded) when --weights is not given."""
    hidden_size: int
    embed_dim: int
    num_query_tokens: int
    image_shape: tuple[int, int, int]  # (C, H, W) of the tower's input
    default_lr: float = 1e-5
    """The fine-tune's learning rate when a method's ``lr`` is None."""

    @classmethod
    def build(cls, seed: int, cache_dir: Path, weights: str | None) -> "Backbone":
        """A fresh backbone for one cell: ``seed`` initialises the trainable composer,
        ``weights`` names pretrained weights (a local directory or a tag; None: the default),
        ``cache_dir`` holds derived caches. A backbone plugin implements it."""
        raise NotImplementedError(f"{cls.__qualname__} does not implement build")

    query_tokens: nn.Parameter  # (1, Q, H)
    text_proj: nn.Module
    vision_proj: nn.Module

    @abstractmethod
    def tower_key(self) -> str:
        """Identifies the frozen tower, its weights and preprocessing (feature-cache key)."""

    def start_key(self) -> str:
        """Identifies the weights a fine-tune starts from, so that cells trained from two
        different starts are never compared as one. By default the frozen tower's key (a
        hub checkpoint's name, recorded as ``--weights``, identifies the rest); a backbone
        whose start is pre-trained here adds a digest of that state."""
        return self.tower_key()

    @abstractmethod
    def preprocess(self, images: list[np.ndarray]) -> torch.Tensor:
        """uint8 RGB arrays (H, W, 3) -> the tower's input tensor (B, C, H, W)."""

    @abstractmethod
    def encode_image_tokens(self, pixels: torch.Tensor) -> torch.Tensor:
        """Frozen tower: input tensor (B, C, H, W) -> patch tokens (B, P, D_v). No gradient
        flows into the tower; it may flow back to ``pixels`` callers do not need it."""

    @abstractmethod
    def tokenize(self, texts: list[str]) -> TextBatch:
        """Texts -> token ids with a leading classification token."""

    @abstractmethod
    def compose(
        self,
        image_tokens: torch.Tensor | None,
        text: TextBatch | None,
        queries: torch.Tensor | None = None,
    ) -> ComposerOutput:
        """Run the composer. ``queries`` (B, Q', H) replaces the learnable query tokens
        (a prompt such as SPRC's or ConeSep's negative prompt); ``image_tokens`` None makes
        a text-only pass, ``text`` None an image-only pass."""

    def word_embeddings(self, text: TextBatch) -> torch.Tensor:
        """The composer's input embedding of each text token (B, T, H), before positions and
        context: the static text target that TME's ``lsa`` aligns with."""
        raise NotImplementedError(f"backbone {self.name!r} does not expose its word embeddings")

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The parameters the optimiser updates (the composer; never the frozen tower)."""
        return [p for p in self.parameters() if p.requires_grad]

    def expand_queries(self, batch_size: int, queries: torch.Tensor | None = None) -> torch.Tensor:
        """``queries`` (Q, H), (1, Q, H) or (B, Q, H), or the learnable ones, as (B, Q, H)."""
        q = self.query_tokens if queries is None else queries
        if q.dim() == 2:
            q = q.unsqueeze(0)
        return q.expand(batch_size, -1, -1) if q.shape[0] == 1 else q

    def composed_feature(
        self, image_tokens: torch.Tensor | None, text: TextBatch, queries: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The composed query feature (B, E): ``text_proj`` of the classification-token
        output, L2-normalised (BLIP-2 style)."""
        out = self.compose(image_tokens, text, queries)
        assert out.text is not None
        return F.normalize(self.text_proj(out.text[:, 0]), dim=-1)

    def target_features(self, image_tokens: torch.Tensor) -> torch.Tensor:
        """Per-query-token target features (B, Q, E): ``vision_proj`` of an image-only pass,
        L2-normalised."""
        out = self.compose(image_tokens, None)
        return F.normalize(self.vision_proj(out.query), dim=-1)


OPTIONAL_CAPABILITIES: dict[str, str] = {
    "word_embeddings": "word_embeddings(text: TextBatch) -> Tensor (B, T, hidden_size)",
}
"""What a backbone may offer beyond the required interface, each with its signature: a
method declares the ones it needs (``Method.needs``); a backbone offers one when its class
implements (overrides) it."""


def capabilities(backbone: Backbone) -> set[str]:
    """The :data:`OPTIONAL_CAPABILITIES` ``backbone``'s class implements."""
    return {name for name in OPTIONAL_CAPABILITIES if getattr(type(backbone), name, None) is not getattr(Backbone, name)}


def max_token_similarity(queries: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """BLIP-2 retrieval similarity: queries (N, E) against targets (M, Q, E) -> (N, M), the
    maximum over target tokens of the dot product. One matrix product, no Python loops."""
    return torch.einsum("ne,mqe->nmq", queries, targets).amax(dim=-1)


def _crc_tensors(named: Iterable[tuple[str, torch.Tensor]], digest: int) -> int:
    for name, tensor in named:
        digest = zlib.crc32(name.encode(), digest)
        digest = zlib.crc32(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes(), digest)
    return digest


def state_digest(state: dict[str, torch.Tensor], digest: int = 0) -> int:
    """CRC32 of a state dict (names and raw bytes, in name order)."""
    return _crc_tensors(sorted(state.items()), digest)


def weights_digest(module: nn.Module, preprocessing: str) -> int:
    """CRC32 of a frozen tower's preprocessing description and every tensor of its state
    (names and raw bytes): the stable part of a ``tower_key``."""
    return _crc_tensors(module.state_dict().items(), zlib.crc32(preprocessing.encode()))
