"""SSN (Yang et al., AAAI 2024): the semantic shift of a modification text decomposed into
a degradation (from the reference to a visual prototype) and an upgradation (from the
prototype to the target). A traditional CIR method: no noise handling of its own.

What the release (``starxing-yuu/SSN``, ``src/models/ssn.py``) does, and what this plugin
does (``docs/ssn.md`` says which part is the paper's and every reading):

- **Degradation** (release ``text_token_selection_mask``): each text token ``t_i`` gets a
  sigmoid gate ``s_i = sigma(W_t [t_i; g])`` from itself and the reference's global token
  ``g``; ``L+ = s * t`` is the upgradation text, ``L- = (1 - s) * t`` the degradation text.
- **Visual prototype** (``image_token_selection_mask``): each reference token ``r_j`` gets
  ``m_j = sigma(W_v [r_j; pool(L-)])``; the prototype ``I_r^0 = m * r``, the rest ``(1 - m) * r``.
- **Upgradation** (``fusion_layer``, one ``nn.TransformerEncoderLayer`` with 8 heads and a
  feed-forward 4 times its width, and
  ``token_type_embeddings``): the positive fusion of ``[I_r^0; L+]``, the negative fusion of
  ``[(1 - m) r; L-]``; the query is ``normalize(base + 0.01 * output(relu(combiner([pool(fused
  text); fused image token 0]))))``, and a target is ``normalize(base_t + 0.01 * fusion(target
  tokens alone))``.
- **Loss**: the symmetric cross-entropy of the positive queries against the targets at logit
  scale 100 (fixed), plus ``kl_weight * (KL(softmax(100 I) || p_pos) - KL(p_pos || p_neg))``
  with PyTorch's ``KLDivLoss`` default reduction (the mean over all B x B entries), as released.

Mapped onto cirbench's composer (the release's CLIP encoders are fine-tuned with SSN's
modules; here the composer plays them): the text tokens are the composer's text-only pass,
the reference's and a target's tokens its image-only pass (the query positions), ``g`` the
reference's first query position. ``base`` is the backbone's composed feature and ``base_t``
its per-token target features: the release's base is CLIP4Cir's sum of CLIP's two unimodal
embeddings weighed by a learned ``dynamic_scalar``, and cirbench's composer composes the two
in one pass, so there is no pair of embeddings left to weigh (the scalar is not hosted). The
target's residual is added per query token through ``vision_proj`` (the release adds it to
one CLIP embedding), so that retrieval stays the maximum over target tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from cirbench.backbones.base import TextBatch, max_token_similarity
from cirbench.settings.config import late_field
from cirbench.method import Batch, Method, MethodConfig, StepOutput
from cirbench.method.search import Distribution, LogUniform


@dataclass
class SSNConfig(MethodConfig):
    """SSN's released settings (``src/models/ssn.py``); ``kl_weight`` is read by the release
    from an argument its scripts never define (docs/ssn.md), so it is 1 here."""

    search_space: ClassVar[dict[str, Distribution]] = {
        **MethodConfig.search_space, "kl_weight": LogUniform(0.1, 10.0), "logit_scale": LogUniform(10.0, 100.0),
    }
    release_readings: ClassVar[dict[str, object]] = {"fusion_padding_mask": False, "fusion_feedforward": 2048}
    """``starxing-yuu/SSN``'s ``src/models/ssn.py`` (docs/ssn.md): no padding mask in the fusion
    layer, and PyTorch's default feed-forward width (2048) at every hidden size. Its
    ``kl_weight`` is undefined there; the port's 1 stands for it."""

    logit_scale: float = 100.0
    kl_weight: float = 1.0
    residual_scale: float = 0.01
    fusion_heads: int = 8
    fusion_feedforward: int | None = None  # None: 4 x the hidden size, the release's 2048 at its width 512
    fusion_dropout: float = 0.1
    symmetric: bool = True
    fusion_padding_mask: bool = late_field(True)
    """Mask the text's padding in the fusion layer (the release does not: padded positions
    enter its positive and negative fusions)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("logit_scale", "fusion_heads", "fusion_feedforward"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"ssn: {name} must be > 0, got {getattr(self, name)}")
        if self.kl_weight < 0 or self.residual_scale < 0:
            raise ValueError(f"ssn: kl_weight and residual_scale must be >= 0, got {self.kl_weight}, {self.residual_scale}")
        if not 0.0 <= self.fusion_dropout < 1.0:
            raise ValueError(f"ssn: fusion_dropout must be in [0, 1), got {self.fusion_dropout}")


def masked_mean(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``tokens`` (B, T, H) over the positions ``mask`` (B, T) keeps (B, H)."""
    keep = mask.unsqueeze(-1).to(tokens.dtype)
    return (tokens * keep).sum(1) / keep.sum(1).clamp_min(1.0)


def kl_mean(log_input: torch.Tensor, log_target: torch.Tensor) -> torch.Tensor:
    """``nn.KLDivLoss()(log_input, target)`` as the release calls it, ``target * (log target -
    log_input)`` averaged over every entry (not per row), from the target's log-probabilities:
    a probability that underflows to 0 at logit scale 100 would give a NaN gradient."""
    return (log_target.exp() * (log_target - log_input)).mean()


class SSN(Method):
    """SSN on the composer; see the module docstring."""

    name = "ssn"
    version = "1"
    paper = "Yang et al., Decomposing Semantic Shifts for Composed Image Retrieval (SSN), AAAI 2024"
    Config = SSNConfig
    ablations = {  # the temperature question of issue 76: ssn at sprc's starting temperature 0.07 (docs/ssn.md)
        "sprc_temperature": {"logit_scale": 1 / 0.07},
    }
    ablation_noise = (0.5, 0.8)

    def __init__(self, backbone, config: SSNConfig, context) -> None:
        super().__init__(backbone, config, context)
        width = backbone.hidden_size
        if width % config.fusion_heads:
            raise ValueError(f"ssn: fusion_heads ({config.fusion_heads}) must divide the backbone's hidden size ({width})")
        self.text_selection = nn.Sequential(nn.Linear(2 * width, 1), nn.Sigmoid())
        self.image_selection = nn.Sequential(nn.Linear(2 * width, 1), nn.Sigmoid())
        self.token_type = nn.Embedding(2, width)  # 0: image tokens, 1: text tokens (release order)
        feedforward = config.fusion_feedforward or 4 * width
        self.fusion = nn.TransformerEncoderLayer(width, config.fusion_heads, feedforward, config.fusion_dropout, batch_first=True)
        self.combiner = nn.Linear(2 * width, 2 * width)
        self.output = nn.Linear(2 * width, backbone.embed_dim)

    # ------------------------------------------------------------------ encoders

    def decomposed(self, reference: torch.Tensor, text: TextBatch) -> dict[str, torch.Tensor]:
        """The degradation/upgradation split of one batch: ``up`` and ``down`` text tokens
        (B, T, H), the ``prototype`` and the ``rest`` of the reference's tokens (B, Q, H)."""
        words = self.backbone.compose(None, text).text
        image = self.backbone.compose(reference, None).query
        g = image[:, :1].expand(-1, words.shape[1], -1)
        s = self.text_selection(torch.cat([words, g], dim=-1))
        down_pool = masked_mean(words * (1 - s), text.mask).unsqueeze(1).expand(-1, image.shape[1], -1)
        m = self.image_selection(torch.cat([image, down_pool], dim=-1))
        return {"up": words * s, "down": words * (1 - s), "prototype": image * m, "rest": image * (1 - m)}

    def fused_residual(self, image: torch.Tensor, words: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The combiner's residual (B, E) of one fusion of ``image`` (B, Q, H) and ``words``
        (B, T, H) tokens (``mask`` marks the real text positions; the fusion sees the padded
        ones too under ``fusion_padding_mask=false``, as released)."""
        q = image.shape[1]
        tokens = torch.cat([image + self.token_type.weight[0], words + self.token_type.weight[1]], dim=1)
        padding = None
        if self.config.fusion_padding_mask:
            padding = torch.cat([mask.new_zeros(mask.shape[0], q, dtype=torch.bool), ~mask.bool()], 1)
        fused = self.fusion(tokens, src_key_padding_mask=padding)
        joint = torch.cat([masked_mean(fused[:, q:], mask), fused[:, 0]], dim=-1)
        return self.output(F.relu(self.combiner(joint)))

    def queries(self, reference: torch.Tensor, text: TextBatch, negative: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The positive composed queries (B, E); with ``negative``, the negative ones too."""
        parts = self.decomposed(reference, text)
        fused = self.backbone.compose(reference, text)
        base = F.normalize(self.backbone.text_proj(fused.text[:, 0]), dim=-1)
        scale = self.config.residual_scale
        positive = F.normalize(base + scale * self.fused_residual(parts["prototype"], parts["up"], text.mask), dim=-1)
        if not negative:
            return positive
        return positive, F.normalize(base + scale * self.fused_residual(parts["rest"], parts["down"], text.mask), dim=-1)

    def encode_queries(self, reference: torch.Tensor, text: TextBatch) -> torch.Tensor:
        """The positive composed query (B, E): the composed feature plus the upgradation's residual."""
        return self.queries(reference, text)  # type: ignore[return-value]

    def encode_targets(self, images: torch.Tensor) -> torch.Tensor:
        """Per-token target features (B, Q, E) plus the fusion of the target's tokens alone."""
        states = self.backbone.compose(images, None).query
        fused = self.fusion(states + self.token_type.weight[0])
        return F.normalize(self.backbone.vision_proj(states) + self.config.residual_scale * self.backbone.vision_proj(fused), dim=-1)

    # ------------------------------------------------------------------ loss

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        """The symmetric cross-entropy of the positive queries and the release's KL term."""
        c = self.config
        positive, negative = self.queries(batch.reference, batch.text, negative=True)
        targets = self.encode_targets(batch.target)
        pos = c.logit_scale * max_token_similarity(positive, targets)
        neg = c.logit_scale * max_token_similarity(negative, targets)
        labels = torch.arange(len(batch), device=pos.device)
        ce = F.cross_entropy(pos, labels)
        if c.symmetric:
            ce = (ce + F.cross_entropy(pos.T, labels)) / 2
        identity = F.log_softmax(c.logit_scale * torch.eye(len(batch), device=pos.device, dtype=pos.dtype), dim=-1)
        log_pos = F.log_softmax(pos, dim=-1)
        kl = kl_mean(log_pos, identity) - kl_mean(F.log_softmax(neg, dim=-1), log_pos)
        loss = ce + c.kl_weight * kl
        return StepOutput(loss, {"contrastive": float(ce.detach()), "kl": float(kl.detach())})
