"""An example backbone plugin written from docs/adding-a-backbone.md alone: ``plain``.

No built-in backbone under it. The frozen tower cuts a 32x32 image into 16 patches of 8x8
and embeds each with a fixed random linear map (seeded 0, the same for every cell); the
composer is one PyTorch ``TransformerEncoderLayer`` over the query tokens, the text tokens
and the image tokens together, initialised from the cell's seed. It implements
``word_embeddings``, so every method (``tme`` included) runs on it. Run it with
``cirbench run --plugin docs/examples/plain.py --backbone plain --methods sprc,tme --epochs 1``.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from cirbench.backbones.base import Backbone, ComposerOutput, TextBatch, weights_digest

PAD, CLS, VOCAB, MAX_TOKENS = 0, 1, 2048, 24
PATCH, TOWER_WIDTH = 8, 48
LR = 1e-3


class PlainBackbone(Backbone):
    """The ``plain`` model (see the module docstring)."""

    name = "plain"
    description = "example plugin: a frozen random patch embedding + a 1-layer transformer composer (docs/adding-a-backbone.md)"
    default_lr = LR

    @classmethod
    def build(cls, seed: int, cache_dir: Path, weights: str | None) -> "PlainBackbone":
        """A fresh ``plain`` backbone, its composer initialised from ``seed``; it takes no ``--weights``."""
        if weights:
            raise ValueError(f"{cls.name} takes no --weights (got {weights!r}): it starts from scratch")
        return cls(seed)

    def __init__(self, seed: int, hidden_size: int = 64, embed_dim: int = 64, num_query_tokens: int = 4) -> None:
        super().__init__()
        self.hidden_size, self.embed_dim, self.num_query_tokens = hidden_size, embed_dim, num_query_tokens
        self.image_shape = (3, 32, 32)
        with torch.random.fork_rng():
            torch.manual_seed(0)  # the tower: the same for every seed (the cells share its token cache)
            self.tower = nn.Linear(3 * PATCH * PATCH, TOWER_WIDTH)
            torch.manual_seed(seed)
            self.query_tokens = nn.Parameter(torch.randn(1, num_query_tokens, hidden_size) * 0.02)
            self.word_embed = nn.Embedding(VOCAB, hidden_size, padding_idx=PAD)
            self.text_pos = nn.Parameter(torch.randn(1, MAX_TOKENS, hidden_size) * 0.02)
            self.image_in = nn.Linear(TOWER_WIDTH, hidden_size)
            self.layer = nn.TransformerEncoderLayer(hidden_size, 4, 2 * hidden_size, dropout=0.0, batch_first=True)
            self.norm = nn.LayerNorm(hidden_size)
            self.text_proj = nn.Linear(hidden_size, embed_dim)
            self.vision_proj = nn.Linear(hidden_size, embed_dim)
        self.tower.requires_grad_(False)

    def tower_key(self) -> str:
        return f"plain-{weights_digest(self.tower, f'patch{PATCH} scaled /255 centred'):08x}"

    def preprocess(self, images: list[np.ndarray]) -> torch.Tensor:
        pixels = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255.0
        if tuple(pixels.shape[-2:]) != self.image_shape[1:]:
            pixels = F.interpolate(pixels, size=self.image_shape[1:], mode="bilinear", antialias=True)
        return pixels - 0.5

    def encode_image_tokens(self, pixels: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            patches = F.unfold(pixels, PATCH, stride=PATCH).transpose(1, 2)  # (B, 16, 3 * 8 * 8)
            return F.layer_norm(self.tower(patches), (TOWER_WIDTH,))

    def tokenize(self, texts: list[str]) -> TextBatch:
        rows = [[CLS] + [2 + zlib.crc32(w.encode()) % (VOCAB - 2) for w in re.findall(r"[a-z0-9]+", t.lower())]
                for t in texts]
        rows = [row[:MAX_TOKENS] for row in rows]
        ids = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = torch.tensor(row)
        return TextBatch(ids, ids != PAD)

    def word_embeddings(self, text: TextBatch) -> torch.Tensor:
        return self.word_embed(text.ids)

    def compose(self, image_tokens: torch.Tensor | None, text: TextBatch | None,
                queries: torch.Tensor | None = None) -> ComposerOutput:
        batch = len(text) if image_tokens is None else image_tokens.shape[0]
        q = self.expand_queries(batch, queries)
        parts, padding = [q], [torch.zeros(q.shape[:2], dtype=torch.bool, device=q.device)]
        if text is not None:
            parts.append(self.word_embed(text.ids) + self.text_pos[:, :text.ids.shape[1]])
            padding.append(~text.mask)
        if image_tokens is not None:
            image = self.image_in(image_tokens)
            parts.append(image)
            padding.append(torch.zeros(image.shape[:2], dtype=torch.bool, device=q.device))
        x = self.norm(self.layer(torch.cat(parts, 1), src_key_padding_mask=torch.cat(padding, 1)))
        n_queries, n_text = q.shape[1], 0 if text is None else text.ids.shape[1]
        return ComposerOutput(query=x[:, :n_queries], text=x[:, n_queries:n_queries + n_text] if text is not None else None)
