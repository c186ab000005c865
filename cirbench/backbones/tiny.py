"""The ``tiny`` CPU backbone: a small frozen CNN tower and a 2-layer Q-Former-style composer.

The tower turns a 32x32 image into a 4x4 grid of 64-d patch tokens, layer-normalised
(without the normalisation the composer does not learn from cached tokens). Its weights
are a seeded random initialisation unless given. This module holds the architecture only;
the pre-trainings (of the composer, the default start, and of the tower) and the
``--weights`` tags live in :mod:`cirbench.backbones.tiny_pretrain`.

Text uses a hashing word tokenizer (no vocabulary file): a word's id is a CRC32 of the
word modulo the vocabulary size, so any dataset's text works with no download.
"""

from __future__ import annotations

import re
import zlib

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from cirbench.backbones.base import Backbone, ComposerOutput, TextBatch

PAD, CLS = 0, 1
_WORD = re.compile(r"[a-z0-9]+")


class HashingTokenizer:
    """Lower-cased words -> ids in [2, vocab_size) by CRC32; id 1 is the classification token."""

    def __init__(self, vocab_size: int = 4096, max_length: int = 32) -> None:
        self.vocab_size = vocab_size
        self.max_length = max_length

    def word_ids(self, text: str) -> list[int]:
        """The ids of ``text``'s words (without the classification token)."""
        return [2 + zlib.crc32(w.encode()) % (self.vocab_size - 2) for w in _WORD.findall(text.lower())]

    def __call__(self, texts: list[str]) -> TextBatch:
        rows = [[CLS] + self.word_ids(t)[: self.max_length - 1] for t in texts]
        length = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), length, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
        return TextBatch(ids, ids != PAD)


class TinyTower(nn.Module):
    """Four strided convolutions: (B, 3, 32, 32) -> (B, 16, 64) layer-normalised tokens."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.GELU(),
            nn.Conv2d(32, width, 3, stride=2, padding=1), nn.GELU(),
            nn.Conv2d(width, width, 3, stride=2, padding=1), nn.GELU(),
            nn.Conv2d(width, width, 3, stride=2, padding=1),
        )

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        tokens = self.net(pixels).flatten(2).transpose(1, 2)
        return F.layer_norm(tokens, tokens.shape[-1:])


class ComposerLayer(nn.Module):
    """Pre-norm block: joint self-attention over [queries; text], cross-attention from the
    query positions only to the image tokens (as in BLIP-2's Q-Former), then an MLP."""

    def __init__(self, hidden: int, heads: int, mlp_ratio: int = 2) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden)
        self.self_attn = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.norm_cross = nn.LayerNorm(hidden)
        self.cross_attn = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(
            nn.Linear(hidden, mlp_ratio * hidden), nn.GELU(), nn.Linear(mlp_ratio * hidden, hidden)
        )

    def forward(
        self, x: torch.Tensor, padding: torch.Tensor | None, num_queries: int, image: torch.Tensor | None
    ) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, key_padding_mask=padding, need_weights=False)[0]
        if image is not None:
            q = self.norm_cross(x[:, :num_queries])
            crossed = self.cross_attn(q, image, image, need_weights=False)[0]
            x = torch.cat([x[:, :num_queries] + crossed, x[:, num_queries:]], dim=1)
        return x + self.mlp(self.norm2(x))


class TinyBackbone(Backbone):
    """The default CPU backbone (see the module docstring)."""

    name = "tiny"
    default_lr = 1e-3  # the fine-tune's rate (release 4, docs/benchmark.md); the pre-trainings set their own

    def __init__(
        self,
        hidden_size: int = 128,
        embed_dim: int = 128,
        num_query_tokens: int = 8,
        num_layers: int = 2,
        num_heads: int = 4,
        tower: str = "random",
        tower_state: dict | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.hidden_size, self.embed_dim, self.num_query_tokens = hidden_size, embed_dim, num_query_tokens
        self.image_shape = (3, 32, 32)
        self.tokenizer = HashingTokenizer()
        self.tower_kind = tower
        self.tower = self._frozen_tower(tower_state)
        self.pretrained_start = ""  # "<tag>-<crc32>" of a pre-trained composer state loaded into it (build_tiny)
        self.start_origin = ""  # where that state came from, for messages (the released file, a cache)

        with torch.random.fork_rng():
            torch.manual_seed(seed)
            num_patches, tower_width = 16, 64
            self.image_in = nn.Sequential(nn.Linear(tower_width, hidden_size), nn.LayerNorm(hidden_size))
            self.image_pos = nn.Parameter(torch.randn(1, num_patches, hidden_size) * 0.02)
            self.query_tokens = nn.Parameter(torch.randn(1, num_query_tokens, hidden_size) * 0.02)
            self.word_embed = nn.Embedding(self.tokenizer.vocab_size, hidden_size, padding_idx=PAD)
            nn.init.normal_(self.word_embed.weight, std=0.02)
            self.text_pos = nn.Parameter(torch.randn(1, self.tokenizer.max_length, hidden_size) * 0.02)
            self.layers = nn.ModuleList(ComposerLayer(hidden_size, num_heads) for _ in range(num_layers))
            self.final_norm = nn.LayerNorm(hidden_size)
            self.text_proj = nn.Linear(hidden_size, embed_dim)
            self.vision_proj = nn.Linear(hidden_size, embed_dim)

    @staticmethod
    def _frozen_tower(state: dict | None) -> TinyTower:
        with torch.random.fork_rng():
            torch.manual_seed(1234)
            tower = TinyTower()
        if state is not None:
            tower.load_state_dict(state)
        tower.requires_grad_(False)
        return tower.eval()

    def tower_key(self) -> str:
        digest = zlib.crc32(b"".join(p.detach().numpy().tobytes() for p in self.tower.parameters()))
        return f"tiny-{self.tower_kind}-{digest:08x}"

    def start_key(self) -> str:
        return self.tower_key() + (f"+{self.pretrained_start}" if self.pretrained_start else "")

    def train(self, mode: bool = True) -> "TinyBackbone":
        super().train(mode)
        self.tower.eval()
        return self

    def preprocess(self, images: list[np.ndarray]) -> torch.Tensor:
        pixels = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255.0
        if pixels.shape[-2:] != self.image_shape[1:]:
            pixels = F.interpolate(pixels, size=self.image_shape[1:], mode="bilinear", antialias=True)
        return (pixels - 0.5) / 0.25

    def encode_image_tokens(self, pixels: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.tower(pixels)

    def tokenize(self, texts: list[str]) -> TextBatch:
        return self.tokenizer(texts)

    def word_embeddings(self, text: TextBatch) -> torch.Tensor:
        return self.word_embed(text.ids)

    def compose(
        self,
        image_tokens: torch.Tensor | None,
        text: TextBatch | None,
        queries: torch.Tensor | None = None,
    ) -> ComposerOutput:
        batch = (image_tokens if image_tokens is not None else text.ids).shape[0]  # type: ignore[union-attr]
        q = self.expand_queries(batch, queries)
        num_queries = q.shape[1]
        parts, padding = [q], None
        if text is not None:
            length = text.ids.shape[1]
            parts.append(self.word_embed(text.ids) + self.text_pos[:, :length])
            padding = torch.cat([torch.zeros(batch, num_queries, dtype=torch.bool, device=q.device), ~text.mask], 1)
        x = torch.cat(parts, dim=1)
        image = None if image_tokens is None else self.image_in(image_tokens) + self.image_pos
        for layer in self.layers:
            x = layer(x, padding, num_queries, image)
        x = self.final_norm(x)
        return ComposerOutput(query=x[:, :num_queries], text=x[:, num_queries:] if text is not None else None)
