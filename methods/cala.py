"""CaLa (Jiang et al., SIGIR 2024): two associations of a triplet besides the query-target
match, each learned through a module used in training only. A traditional CIR method: no
noise handling of its own.

What the release (``Chiangsonw/CaLa``, ``src/blip_fine_tune.py`` with ``--encoder-arch
blip2 --cir-frame sum``, ``src/hinge_based_cross_attention_blip2.py``,
``src/twin_attention_compositor_blip2.py``) does, and what this plugin does (``docs/cala.md``
says which part is the paper's and every reading):

- **Query-target matching**: the composed query against the target at logit scale 100.
- **Hinge-based cross-attention** (HCA, the paper's text-bridged image alignment): with the
  reference's multimodal tokens ``R``, the text's tokens ``C`` and the target's tokens
  ``T``, ``A = softmax((q(R) k(C)^T / sqrt(d)) (k(C) k'(T)^T / sqrt(d)))`` (the text is the
  hinge between the two images, its key map shared by both products), dropout 0.1, and the
  pseudo-target ``A v(T)`` at the first position; ``reasoning = 10 * pseudo_target @ r^T``
  with ``r`` the reference's first multimodal token, unnormalised.
- **Twin-attention compositor** (TAC, the paper's complementary text reasoning): two
  one-head attentions, each applied four times with shared weights, the reference's image
  tokens querying the target's and the target's querying the reference's; the mean of the
  two first positions is the visual gap ``v``; ``aligning = 10 * text @ v^T`` with ``text``
  the text's first token, unnormalised.
- **Loss**: ``hca_weight * CE(reasoning) + (1 - hca_weight) * CE(tac_weight * aligning +
  (1 - tac_weight) * matching)``, the release's weights 0.1 and 0.45 (its README's command).

Mapped onto cirbench's composer (the release's BLIP-2 Q-Former): ``R`` is the query
positions of the composer's joint pass (the release's ``multimodal_embeds``), ``C`` its
text-only pass (``text_embeds``), ``T`` and the reference's image tokens its image-only
passes (``image_embeds``), all hidden states as released. The composed query is the
backbone's composed feature and the target its per-token target features, as for every
hosted method (the release sums the first multimodal token and the text's first token and
matches them with the target's first token: ``query = "release"``); inference is that query
alone, as released. HCA's padded text keys are zeroed (the release lets the padding up to the
batch's longest text in: ``hca_text = "release"``). ``--set cala.readings=release`` turns both
on; the parity harness (``benchmarks/parity/cala.py``) checks them against the release.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from cirbench.backbones.base import TextBatch, max_token_similarity
from cirbench.settings.config import late_field
from cirbench.method import Batch, Method, MethodConfig, StepOutput
from cirbench.method.search import Distribution, LogUniform, Uniform


Query = Literal["composed", "release"]
HCAText = Literal["masked", "release"]


@dataclass
class CaLaConfig(MethodConfig):
    """CaLa's released settings (README's training command and ``blip_fine_tune.py``) and
    the release's readings as switches: ``query`` (``composed``: the backbone's composed
    feature against its per-token target features, as every hosted method; ``release``: the
    normalised sum of the joint pass's first query output and the text's first token against
    the target's first query output, normalised, hidden states unprojected, in training and
    at retrieval) and ``hca_text`` (``masked``: HCA's padded text keys zeroed; ``release``:
    the text's tokens up to the batch's longest text, padding included, as the release's
    tokenizer pads them). ``release_readings`` turns both on."""

    search_space: ClassVar[dict[str, Distribution]] = {
        **MethodConfig.search_space, "tac_weight": Uniform(0.2, 0.7), "matching_scale": LogUniform(10.0, 100.0),
        "association_scale": LogUniform(3.0, 30.0),
    }
    release_readings: ClassVar[dict[str, object]] = {"query": "release", "hca_text": "release"}

    tac_weight: float = 0.45
    hca_weight: float = 0.1
    matching_scale: float = 100.0
    association_scale: float = 10.0
    tac_repeats: int = 4
    hca_dropout: float = 0.1
    query: Query = late_field("composed")
    hca_text: HCAText = late_field("masked")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("tac_weight", "hca_weight"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"cala: {name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("matching_scale", "association_scale", "tac_repeats"):
            if getattr(self, name) <= 0:
                raise ValueError(f"cala: {name} must be > 0, got {getattr(self, name)}")
        if not 0.0 <= self.hca_dropout < 1.0:
            raise ValueError(f"cala: hca_dropout must be in [0, 1), got {self.hca_dropout}")
        for name, allowed in (("query", ("composed", "release")), ("hca_text", ("masked", "release"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"cala: {name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")


def batch_longest(tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The text's tokens (B, L, H) up to the batch's longest text, padding included, and a
    mask of ones: the release's tokenizer pads to the batch's longest text, and every one of
    those positions enters HCA."""
    length = int(mask.bool().any(0).nonzero().max()) + 1
    return tokens[:, :length], torch.ones_like(mask[:, :length])


class HingeCrossAttention(nn.Module):
    """HCA: the target's tokens read by the reference's through the text (see the module docstring)."""

    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.query_reference = nn.Linear(width, width)
        self.key_text = nn.Linear(width, width)
        self.key_target = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.dropout = nn.Dropout(dropout)

    def forward(self, reference: torch.Tensor, text: torch.Tensor, text_mask: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The pseudo-target (B, H) from ``reference`` (B, R, H), ``text`` (B, T, H; padding
        dropped by ``text_mask``) and ``target`` (B, Q, H)."""
        scale = math.sqrt(reference.shape[-1])
        keys = self.key_text(text) * text_mask.unsqueeze(-1).to(text.dtype)
        to_text = self.query_reference(reference) @ keys.transpose(1, 2) / scale
        to_target = keys @ self.key_target(target).transpose(1, 2) / scale
        attention = self.dropout(F.softmax(to_text @ to_target, dim=-1))
        return (attention @ self.value(target))[:, 0]


class TwinAttentionCompositor(nn.Module):
    """TAC: the visual gap of two images, each attending to the other (see the module docstring)."""

    def __init__(self, width: int, repeats: int) -> None:
        super().__init__()
        self.reference_queries = nn.MultiheadAttention(width, 1, batch_first=True)
        self.target_queries = nn.MultiheadAttention(width, 1, batch_first=True)
        self.repeats = repeats

    @staticmethod
    def _repeat(attention: nn.MultiheadAttention, query: torch.Tensor, other: torch.Tensor, repeats: int) -> torch.Tensor:
        out = attention(query, other, other, need_weights=False)[0]
        for _ in range(repeats - 1):
            out = attention(query, out, out, need_weights=False)[0]
        return out[:, 0]

    def forward(self, reference: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The visual gap (B, H) of ``reference`` and ``target`` image tokens (B, Q, H)."""
        forward = self._repeat(self.reference_queries, reference, target, self.repeats)
        backward = self._repeat(self.target_queries, target, reference, self.repeats)
        return (forward + backward) / 2


class CaLa(Method):
    """CaLa on the composer; see the module docstring."""

    name = "cala"
    version = "1"
    paper = "Jiang et al., CaLa: Complementary Association Learning for Augmenting Composed Image Retrieval, SIGIR 2024"
    Config = CaLaConfig

    def __init__(self, backbone, config: CaLaConfig, context) -> None:
        super().__init__(backbone, config, context)
        self.hca = HingeCrossAttention(backbone.hidden_size, config.hca_dropout)
        self.tac = TwinAttentionCompositor(backbone.hidden_size, config.tac_repeats)

    def encode_queries(self, reference: torch.Tensor, text: TextBatch) -> torch.Tensor:
        """The composed feature, or with ``query = release`` the release's query (B, H)."""
        if self.config.query == "composed":
            return super().encode_queries(reference, text)
        return release_query(self.backbone.compose(reference, text).query, self.backbone.compose(None, text).text)

    def encode_targets(self, images: torch.Tensor) -> torch.Tensor:
        """Per-token target features, or with ``query = release`` the target's first query
        output (B, 1, H), normalised."""
        if self.config.query == "composed":
            return super().encode_targets(images)
        return F.normalize(self.backbone.compose(images, None).query[:, :1], dim=-1)

    def logits(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The three logit matrices (B, B): ``matching`` (at ``matching_scale``), TAC's
        ``aligning`` and HCA's ``reasoning`` (at ``association_scale``)."""
        c = self.config
        joint = self.backbone.compose(batch.reference, batch.text)
        if c.query == "composed":
            composed = F.normalize(self.backbone.text_proj(joint.text[:, 0]), dim=-1)
        target_tokens = self.backbone.compose(batch.target, None).query
        if c.query == "composed":
            targets = F.normalize(self.backbone.vision_proj(target_tokens), dim=-1)
        text_tokens = self.backbone.compose(None, batch.text).text
        reference_tokens = self.backbone.compose(batch.reference, None).query
        if c.query == "release":
            composed = release_query(joint.query, text_tokens)
            targets = F.normalize(target_tokens[:, :1], dim=-1)

        matching = c.matching_scale * max_token_similarity(composed, targets)
        gap = self.tac(reference_tokens, target_tokens)
        aligning = c.association_scale * text_tokens[:, 0] @ gap.T
        hca_text, hca_mask = text_tokens, batch.text.mask
        if c.hca_text == "release":
            hca_text, hca_mask = batch_longest(text_tokens, batch.text.mask)
        pseudo_target = self.hca(joint.query, hca_text, hca_mask, target_tokens)
        reasoning = c.association_scale * pseudo_target @ joint.query[:, 0].T
        return {"matching": matching, "aligning": aligning, "reasoning": reasoning}

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        """The release's blended loss: matching with TAC's logits, then HCA's."""
        c = self.config
        logits = self.logits(batch)
        matching = logits["matching"]
        labels = torch.arange(len(batch), device=matching.device)
        contrastive = F.cross_entropy(c.tac_weight * logits["aligning"] + (1 - c.tac_weight) * matching, labels)
        reasoning = F.cross_entropy(logits["reasoning"], labels)
        loss = c.hca_weight * reasoning + (1 - c.hca_weight) * contrastive
        components = {"contrastive": contrastive, "reasoning": reasoning, "matching": F.cross_entropy(matching, labels)}
        return StepOutput(loss, {k: float(v.detach()) for k, v in components.items()})


def release_query(joint_query: torch.Tensor, text_tokens: torch.Tensor) -> torch.Tensor:
    """The release's composed query (B, H): ``normalize(joint[:, 0] + text[:, 0])``, the joint
    pass's first query output and the text's first token, unprojected hidden states."""
    return F.normalize(joint_query[:, 0] + text_tokens[:, 0], dim=-1)
