"""INTENT (Chen et al., AAAI 2026): a visual intervention in the Fourier domain for
invariant composition, and a bi-objective discriminative loss. How each part maps to the
release (``ZivChen-Ty/INTENT``: ``lavis/models/blip2_models/blip2_cir.py``,
``train_INTENT.py``), the release's defects and the switches: ``docs/intent.md``.

- **Visual Invariant Composition** (warm-up only): the intervened reference image keeps
  the reference's Fourier phase and takes the amplitude ``(1 - lambda) |F(ref)| + lambda
  |F(target)|`` with ``lambda ~ U(0, mix_alpha)`` drawn per sample (:func:`amplitude_mix`,
  over the centred ``mix_ratio`` share of the spectrum; 1 = all of it, as released). Its
  pixels come from the harness (:attr:`TrainingContext.pixels`, the batch's own reference
  and target images) and its tokens from the frozen tower
  (:attr:`TrainingContext.encode_pixels`), so it works with the token cache and with
  ``--features online``. ``L_caco = 1 - mean`` linear CKA (:func:`linear_cka`) between the
  token Gram matrices of the intervened and the original fused queries, both through an
  extra head ``text_proj_cau``.
- **Bi-Objective Discriminative Learning**: with ``P = softmax(S / temperature)``,
  ``r_ii = (P_ii + 1 - max_{j != i} P_ij) / 2`` and ``r_ij = (P_ij + 1 - P_ii) / 2``;
  ``L_odl`` = cross-entropy of ``loss_T * clamp(r)`` against the diagonal, ``loss_T``
  learnable from ``loss_scale`` (:func:`credibility`).
- ``L_stu`` = RCL (fixed temperature). Loss ``L_stu + odl_weight L_odl + caco_weight
  L_caco`` for the first ``warmup_epochs``, then ``L_stu + odl_weight L_odl``. Inference
  is the plain composed query.

INTENT has no partition. Each step reports ``1 - r_ii`` (one minus the diagonal's
credibility) as a per-sample noise score, which the method does not use: it is recorded,
as ``sprc``'s loss is, to measure how well INTENT's own discrimination marks noise.

Release defects not copied (``docs/intent.md``): the training script imports modules the
repository lacks (``test_BLIP2``, ``data_utils``), so it does not run as shipped; the
FFT mix clamps to [0, 1] images that were already normalised, which sets every value
below the channel mean to 0 and every value above about one standard deviation over it to
1 (``mix_clamp = true`` reproduces it; here the mix stays in the tower's input space,
unclamped); the "info-discrimination" outputs (``get_infodiscri``) are computed every
step and never used (not computed here); ``L_odl`` re-normalises the target tokens over
the token axis, a shape slip (``odl_token_norm = true`` reproduces it). RCL clamps ``1 - p``
at 1e-6 where the release clamps ``p`` to ``[1e-7, 1 - 1e-7]`` (``rcl_clamp =
"probability"``); the warm-up is the release's share of the run where the release fixes 2
epochs (``warmup_epochs = 2``). ``--set intent.readings=release`` turns every release reading
on; the parity harness (``benchmarks/parity/intent.py``) checks them against the release.
"""

from __future__ import annotations

from typing import ClassVar

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cirbench.backbones.base import max_token_similarity
from cirbench.settings.config import late_field
from cirbench.method.losses import RCLGuard, robust_contrastive
from cirbench.method import Batch, Method, MethodConfig, StepOutput
from cirbench.method.search import Distribution, LogUniform

RELEASE_WARMUP_SHARE = 2 / 20
"""The release's warm-up: 2 of its 20 epochs (``--warm_up 2``)."""
RELEASE_WARMUP_EPOCHS = 2
"""``--warm_up``'s default: the release's warm-up in epochs, whatever the run's length."""
RCLClamp = RCLGuard


@dataclass
class INTENTConfig(MethodConfig):
    """INTENT's released settings (``train_INTENT.py``, ``blip2_cir.py``) and switches.

    ``temperature`` (RCL's and ``L_odl``'s softmax, fixed 0.07), ``odl_weight`` (``--mu``),
    ``caco_weight`` (``--alpha``), ``loss_scale`` (``loss_T``'s start), ``prob_eps`` (the
    clamp of ``r``), ``warmup_epochs`` (``--warm_up``; None = the release's share of the
    run, 2 of 20 epochs, rounded up: 1 of cirbench's 10), ``mix_alpha`` and ``mix_ratio``
    (``colorful_spectrum_mix``'s ``alpha`` and ``ratio``). Module switches: ``caco``
    (Visual Invariant Composition: off, no intervened pass) and ``odl`` (Bi-Objective
    Discriminative Learning). Release readings: ``mix_clamp`` (clamp the mixed image, in
    the tower's normalised input space, to [0, 1]) and ``odl_token_norm`` (L2-normalise the
    target tokens over the token axis before ``L_odl``) and ``rcl_clamp`` (``one_minus``:
    cirbench's RCL, ``1 - p`` clamped at 1e-6; ``probability``: the release's, ``p`` clamped
    to ``[1e-7, 1 - 1e-7]``). ``release_readings`` turns the three on, with ``warmup_epochs
    = 2`` (the release's ``--warm_up``, in epochs, whatever the run's length).
    """

    search_space: ClassVar[dict[str, Distribution]] = {
        **MethodConfig.search_space, "odl_weight": LogUniform(0.2, 1.0), "caco_weight": LogUniform(0.3, 3.0),
        "temperature": LogUniform(0.01, 0.1),
    }
    release_readings: ClassVar[dict[str, object]] = {
        "mix_clamp": True, "odl_token_norm": True, "rcl_clamp": "probability", "warmup_epochs": RELEASE_WARMUP_EPOCHS,
    }

    temperature: float = 0.07
    odl_weight: float = 0.5
    caco_weight: float = 1.0
    loss_scale: float = 10.0
    prob_eps: float = 1e-7
    warmup_epochs: int | None = None
    mix_alpha: float = 1.0
    mix_ratio: float = 1.0
    caco: bool = True
    odl: bool = True
    mix_clamp: bool = False
    odl_token_norm: bool = False
    rcl_clamp: RCLClamp = late_field("one_minus")

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = {
            "temperature": self.temperature > 0, "odl_weight": self.odl_weight >= 0, "caco_weight": self.caco_weight >= 0,
            "loss_scale": math.isfinite(self.loss_scale) and self.loss_scale > 0, "prob_eps": 0 <= self.prob_eps < 0.5,
            "warmup_epochs": self.warmup_epochs is None or self.warmup_epochs >= 0,
            "mix_alpha": 0 <= self.mix_alpha <= 1, "mix_ratio": 0 < self.mix_ratio <= 1,
        }
        bad = [f"{name}={getattr(self, name)!r}" for name, ok in checks.items() if not ok]
        if self.rcl_clamp not in ("one_minus", "probability"):
            bad.append(f"rcl_clamp={self.rcl_clamp!r} (one of one_minus, probability)")
        if bad:
            raise ValueError(f"intent: invalid value for {', '.join(bad)}")


# ----------------------------------------------------------------------------- the intervention


def spectrum_window(height: int, width: int, ratio: float, device: torch.device) -> torch.Tensor:
    """(H, W) bool, in unshifted FFT order: the centred ``ratio`` share of the shifted
    spectrum that the release mixes (``h_crop = int(H sqrt(ratio))``, likewise for W)."""
    h_crop, w_crop = int(height * math.sqrt(ratio)), int(width * math.sqrt(ratio))
    h_start, w_start = height // 2 - h_crop // 2, width // 2 - w_crop // 2
    window = torch.zeros(height, width, dtype=torch.bool, device=device)
    window[h_start:h_start + h_crop, w_start:w_start + w_crop] = True
    return torch.fft.ifftshift(window, dim=(-2, -1))


def amplitude_mix(reference: torch.Tensor, target: torch.Tensor, lam: torch.Tensor, ratio: float = 1.0,
                  clamp: bool = False) -> torch.Tensor:
    """The intervened reference (B, C, H, W): the reference's Fourier phase with the
    amplitude ``(1 - lam_b) |F(reference)| + lam_b |F(target)|`` inside the window (the
    reference's own outside it), back through the inverse FFT (real part); ``clamp``
    clips the result to [0, 1] as the release does."""
    dtype = torch.promote_types(reference.dtype, torch.float32)  # float32, or float64 kept
    ref_fft, tgt_fft = torch.fft.fft2(reference.to(dtype)), torch.fft.fft2(target.to(dtype))
    amplitude = ref_fft.abs()
    weight = lam.to(amplitude).view(-1, 1, 1, 1)
    mixed = (1.0 - weight) * amplitude + weight * tgt_fft.abs()
    if ratio < 1.0:
        mixed = torch.where(spectrum_window(*reference.shape[-2:], ratio, reference.device), mixed, amplitude)
    out = torch.fft.ifft2(torch.polar(mixed, ref_fft.angle())).real
    return out.clamp(0.0, 1.0) if clamp else out


def linear_cka(x: torch.Tensor, y: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Linear CKA (B,) between the token Gram matrices of ``x`` and ``y`` (B, N, E): with
    ``K = x x^T`` and ``L = y y^T`` centred, ``<K, L>_F / sqrt(<K, K>_F <L, L>_F)``."""
    def centred_gram(z: torch.Tensor) -> torch.Tensor:
        gram = z @ z.transpose(-2, -1)
        return gram - gram.mean(-1, keepdim=True) - gram.mean(-2, keepdim=True) + gram.mean((-2, -1), keepdim=True)

    k, l_ = centred_gram(x), centred_gram(y)
    numerator = (k * l_).sum((-2, -1))
    return numerator / (torch.sqrt((k * k).sum((-2, -1)) * (l_ * l_).sum((-2, -1))) + eps)


# ----------------------------------------------------------------------------- the discrimination


def rcl_loss(sim: torch.Tensor, temperature: float, clamp: RCLClamp = "one_minus") -> torch.Tensor:
    """``L_stu``, RCL: ``one_minus`` is :func:`cirbench.method.losses.robust_contrastive` (``1 - p``
    clamped at 1e-6); ``probability`` clamps ``p`` to ``[1e-7, 1 - 1e-7]`` first, as the
    release's ``robust_infoNCE`` does (a saturated off-diagonal entry costs ``-log 1e-7``)."""
    return robust_contrastive(sim, temperature, guard=clamp)


def credibility(sim: torch.Tensor, temperature: float) -> torch.Tensor:
    """``r`` (B, B) from the similarity matrix: ``P = softmax(sim / temperature)``,
    ``r_ii = (P_ii + 1 - max_{j != i} P_ij) / 2``, ``r_ij = (P_ij + 1 - P_ii) / 2``."""
    p = F.softmax(sim / temperature, dim=1)
    eye = torch.eye(sim.shape[0], dtype=torch.bool, device=sim.device)
    top_negative = p.masked_fill(eye, float("-inf")).amax(dim=1, keepdim=True)
    necessity = torch.where(eye, 1.0 - top_negative, 1.0 - p.diagonal().unsqueeze(1))
    return (p + necessity) / 2.0


def odl_loss(r: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """``L_odl``: cross-entropy of ``scale * clamp(r, eps, 1 - eps)`` against the diagonal."""
    labels = torch.arange(r.shape[0], device=r.device)
    return F.cross_entropy(r.clamp(eps, 1.0 - eps) * scale, labels)


# ----------------------------------------------------------------------------- the method


def warmup_length(warmup_epochs: int | None, epochs: int) -> int:
    """The epochs with ``L_caco``: ``warmup_epochs``, or where None the release's share of the
    run (2 of 20 epochs), rounded up."""
    return math.ceil(RELEASE_WARMUP_SHARE * epochs - 1e-9) if warmup_epochs is None else warmup_epochs


class INTENT(Method):
    """INTENT; see the module docstring."""

    name = "intent"
    version = "1"
    paper = ("Chen et al., INTENT: Invariance and Discrimination-aware Noise Mitigation for Robust Composed Image "
             "Retrieval, AAAI 2026")
    Config = INTENTConfig
    scores_noise = True  # 1 - r_ii, recorded, not used (see the module docstring)
    ablations = {  # one module off each; docs/intent.md
        "no_vic": {"caco": False},
        "no_bdl": {"odl": False},
    }
    ablation_noise = (0.2,)  # ConeSep Sec. 4: ablations "following the previous work [40, 6, 17]" at 0.2; [6] is INTENT

    def __init__(self, backbone, config: INTENTConfig, context) -> None:
        super().__init__(backbone, config, context)
        self.text_proj_cau = nn.Linear(backbone.hidden_size, backbone.embed_dim)
        self.loss_T = nn.Parameter(torch.tensor(float(config.loss_scale)))
        self.warmup = warmup_length(config.warmup_epochs, context.epochs)
        self.generator = torch.Generator()
        self.generator.manual_seed(int(context.seed) + 7919)

    def intervened_tokens(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Frozen-tower tokens of the batch's intervened references (B, P, D) and the
        per-sample lambdas (B,)."""
        pixels, encode = self.context.pixels, self.context.encode_pixels
        if pixels is None or encode is None:
            raise RuntimeError("intent: the training context gives no pixels (TrainingContext.pixels / encode_pixels); "
                               "the intervention needs the batch's images, or run with --set intent.caco=false")
        reference, target = pixels(batch.index, "reference"), pixels(batch.index, "target")
        lam = self.draw_lambdas(len(batch))
        mixed = amplitude_mix(reference, target, lam, self.config.mix_ratio, self.config.mix_clamp)
        return encode(mixed), lam

    def draw_lambdas(self, size: int) -> torch.Tensor:
        """``lambda ~ U(0, mix_alpha)`` (size,), one per sample, from the method's generator."""
        return torch.rand(size, generator=self.generator) * self.config.mix_alpha

    def odl_similarity(self, composed: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``L_odl``'s similarity: the retrieval similarity, or with ``odl_token_norm`` the
        release's, whose target tokens are re-normalised over the token axis."""
        if self.config.odl_token_norm:
            targets = F.normalize(targets, dim=1)
        return max_token_similarity(composed, targets)

    def caco_loss(self, batch: Batch, fused_query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``L_caco`` of the batch and its lambdas."""
        tokens, lam = self.intervened_tokens(batch)
        intervened = self.backbone.compose(tokens.to(batch.reference.dtype), batch.text).query
        x = F.normalize(self.text_proj_cau(intervened), dim=-1)
        y = F.normalize(self.text_proj_cau(fused_query), dim=-1)
        return 1.0 - linear_cka(x, y).mean(), lam

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        """``L_stu + odl_weight L_odl`` (+ ``caco_weight L_caco`` in the warm-up)."""
        c = self.config
        fused = self.backbone.compose(batch.reference, batch.text)
        composed = F.normalize(self.backbone.text_proj(fused.text[:, 0]), dim=-1)
        targets = self.backbone.target_features(batch.target)
        sim = max_token_similarity(composed, targets)
        r = credibility(self.odl_similarity(composed, targets), c.temperature)
        parts = {"stu": rcl_loss(sim, c.temperature, c.rcl_clamp)}
        loss = parts["stu"]
        if c.odl:
            parts["odl"] = odl_loss(r, self.loss_T, c.prob_eps)
            loss = loss + c.odl_weight * parts["odl"]
        components: dict[str, float] = {}
        if epoch < self.warmup and c.caco:
            parts["caco"], lam = self.caco_loss(batch, fused.query)
            loss = loss + c.caco_weight * parts["caco"]
            components["lambda_mean"] = float(lam.mean())
        components.update({k: float(v.detach()) for k, v in parts.items()})
        components["loss_T"] = float(self.loss_T.detach())
        return StepOutput(loss, components, noise_score=1.0 - r.diagonal().detach())
