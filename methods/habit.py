"""HABIT (Li et al., AAAI 2026): mutual-knowledge soft labels and a dual-consistency
progressive learning against the previous epoch. How each part maps to the release
(``Lee-zixu/HABIT``: ``lavis/models/blip2_models/HABIT.py``, ``train.py``), the release's
defects and the switches: ``docs/habit.md``.

Per training step (every similarity is the BLIP-2 max over target tokens, as in ``sprc``):

- **Anchor**: the batch row with the smallest detached RCL row loss (ConeSep's Eq. 4 at
  ``temperature``, every row kept).
- **Mutual Knowledge Estimation** (:func:`soft_labels`): a ``bins``-bin histogram mutual
  information between the flattened (Q x E) fused-query tokens (``text_proj`` of the
  composer's query positions) and target tokens of a pair; with ``a`` the anchor, the
  transition rates ``TR = |MI(f_a,t_a) - MI(f_i,t_i)| / MI(f_a,t_a)``, ``TR_t`` (with
  ``MI(f_a,t_i)``) and ``TR_i`` (with ``MI(f_i,t_a)``) give the soft label
  ``s_i = 1 / (1 + |TR| + |TR_t - TR_i|)``. The histograms of the whole batch are one
  scatter-add (no loop over samples).
- **Dual-consistency Progressive Learning**, once a sample has a previous epoch: DBSCAN
  (scikit-learn, ``dbscan_eps``, ``dbscan_min_samples``) on the batch's current soft labels
  and on the same samples' previous-epoch labels; a sample is masked (kept out of
  ``L_rank``) only if it is an outlier in both. ``L_kl``: KL between the previous epoch's
  and the current similarity rows, each row scaled by ``kl_scale`` times its soft label.
- Loss ``L_rank + soft_weight L_soft + kl_weight L_kl``: ``L_rank`` = RCL summed over the
  kept rows, divided by the batch size (as released); ``L_soft`` = hardest-negative triplet
  loss with per-row margin ``margin (10^(s m) - 1) / 9`` (``m`` the mask); no mask and no KL
  in a sample's first epoch.

The history is keyed by the stable sample index (``Batch.index``): each sample keeps its
soft label, composed feature and target tokens from the step it was last seen, and its
previous-epoch similarity row is rebuilt against the current batch's samples from those
stored features, so the row and its columns belong to the same samples as now. The
release indexes both by batch position under a shuffling loader (``history =
"batch_position"`` reproduces that). The per-sample noise score is ``1 - s``; the mask is
the method's partition.

Release defects not copied (each documented in ``docs/habit.md``): the history by batch
position (``history``); the KL's two similarity arguments swapped relative to their names,
which also pairs each similarity with the other epoch's soft labels (``kl_arguments =
"release"`` reproduces it); the batch size 256 hard-coded in four places (any batch size
works here); ``--eps_for_DBSCAN`` parsed but never used (``dbscan_eps`` is used); the
mutual information as a per-sample CPU loop (vectorised here, same values). RCL clamps
``1 - p`` at 1e-6 where the release clamps ``p`` to ``[1e-7, 1 - 1e-7]`` (``rcl_clamp =
"probability"``). ``--set habit.readings=release`` turns every release reading on; the
parity harness (``benchmarks/parity/habit.py``) checks them against the release, term by term.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.cluster import DBSCAN

from cirbench.backbones.base import max_token_similarity
from cirbench.settings.config import late_field
from cirbench.method.losses import RCLGuard, per_sample_robust_contrastive
from cirbench.method import Batch, Method, MethodConfig, StepOutput
from cirbench.method.search import Distribution, LogUniform

History = Literal["sample", "batch_position"]
KLArguments = Literal["named", "release"]
RCLClamp = RCLGuard
TINY = 1e-12  # guards the transition rates against an anchor with zero mutual information
NEVER = np.iinfo(np.int64).min  # the epoch of a sample never seen: no epoch is one after it


@dataclass
class HABITConfig(MethodConfig):
    """HABIT's released settings (``HABIT.py``, ``train.py``) and switches.

    ``temperature`` (RCL's, fixed), ``bins`` and ``mi_eps`` (the histogram MI), ``margin``
    (the soft triplet loss's), ``soft_weight`` and ``kl_weight`` (the loss weights 0.1 and
    10), ``kl_scale`` (each similarity row times ``kl_scale`` times its soft label),
    ``dbscan_eps`` / ``dbscan_min_samples``, the release's DBSCAN density: ``min_samples``
    counts soft labels in a batch, and the release set 10 at its batch of 256
    (``dbscan_release_batch``), so it is scaled to the points DBSCAN clusters:
    ``max(1, round(10 * n / 256))``, 5 at the harness's batch of 128 (the same share of the
    batch); ``dbscan_release_batch=0`` takes ``dbscan_min_samples`` literally at any batch
    (habit v1). Module switches: ``mke`` (off: every soft label
    is 1), ``soft_loss``, ``mask`` (the DBSCAN mask), ``kl``. Release readings:
    ``history`` (``sample``: keyed by sample index; ``batch_position``: the release's
    lookup) and ``kl_arguments`` (``named``: KL(previous || current) as the function's
    argument names say; ``release``: the swapped call) and ``rcl_clamp`` (``one_minus``:
    cirbench's RCL, ``1 - p`` clamped at 1e-6; ``probability``: the release's, ``p`` clamped to
    ``[1e-7, 1 - 1e-7]`` before ``log(1 - p)``, in ``L_rank`` and the anchor).
    ``release_readings`` turns the three on, with ``dbscan_release_batch = 0`` (the
    release's literal ``min_samples=10`` at any batch; both are 10 at the release's 256).
    """

    search_space: ClassVar[dict[str, Distribution]] = {
        **MethodConfig.search_space, "soft_weight": LogUniform(0.03, 0.3), "kl_weight": LogUniform(3.0, 30.0),
        "temperature": LogUniform(0.01, 0.1),
    }
    release_readings: ClassVar[dict[str, object]] = {
        "history": "batch_position", "kl_arguments": "release", "rcl_clamp": "probability", "dbscan_release_batch": 0,
    }

    temperature: float = 0.07
    bins: int = 10
    mi_eps: float = 1e-10
    margin: float = 0.5
    soft_weight: float = 0.1
    kl_weight: float = 10.0
    kl_scale: float = 10.0
    dbscan_eps: float = 0.01
    dbscan_min_samples: int = 10
    dbscan_release_batch: int = 256
    mke: bool = True
    soft_loss: bool = True
    mask: bool = True
    kl: bool = True
    history: History = "sample"
    kl_arguments: KLArguments = "named"
    rcl_clamp: RCLClamp = late_field("one_minus")

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = {
            "temperature": self.temperature > 0, "bins": self.bins >= 2, "mi_eps": self.mi_eps >= 0,
            "margin": self.margin >= 0, "soft_weight": self.soft_weight >= 0, "kl_weight": self.kl_weight >= 0,
            "kl_scale": self.kl_scale > 0, "dbscan_eps": self.dbscan_eps > 0, "dbscan_min_samples": self.dbscan_min_samples >= 1,
            "dbscan_release_batch": self.dbscan_release_batch >= 0,
        }
        bad = [f"{name}={getattr(self, name)!r}" for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"habit: invalid value for {', '.join(bad)}")
        for name, allowed in (("history", ("sample", "batch_position")), ("kl_arguments", ("named", "release")),
                              ("rcl_clamp", ("one_minus", "probability"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"habit: {name}={getattr(self, name)!r} is not one of {', '.join(allowed)}")


# ----------------------------------------------------------------------------- mutual knowledge


def histogram_bins(x: torch.Tensor, bins: int) -> torch.Tensor:
    """Each value's bin (B, d) among ``bins`` equal-width bins between its row's minimum and
    maximum, as ``np.histogram(row, np.linspace(min, max, bins + 1))`` assigns it (the last
    bin closed); computed in float64 with numpy's linspace arithmetic."""
    x = x.detach().double()
    low, high = x.min(dim=1, keepdim=True).values, x.max(dim=1, keepdim=True).values
    steps = torch.arange(bins + 1, dtype=torch.float64, device=x.device)
    edges = steps * ((high - low) / bins) + low
    edges[:, -1] = high[:, 0]
    return (torch.searchsorted(edges.contiguous(), x.contiguous(), right=True) - 1).clamp(0, bins - 1)


def mutual_information(x_bins: torch.Tensor, y_bins: torch.Tensor, bins: int, eps: float = 1e-10) -> torch.Tensor:
    """The histogram mutual information (B,) of each row pair from their bins (B, d):
    ``sum p_xy log((p_xy + eps) / (p_x p_y + eps))`` with probabilities over the d values
    (the release's ``estimate_mutual_knowledge``); one scatter-add for the whole batch."""
    rows, d = x_bins.shape
    joint = torch.zeros(rows, bins * bins, dtype=torch.float64, device=x_bins.device)
    joint.scatter_add_(1, x_bins * bins + y_bins, torch.ones(x_bins.shape, dtype=torch.float64, device=x_bins.device))
    p_xy = joint.view(rows, bins, bins) / d
    p_x, p_y = p_xy.sum(2, keepdim=True), p_xy.sum(1, keepdim=True)
    return (p_xy * torch.log((p_xy + eps) / (p_x * p_y + eps))).sum(dim=(1, 2))


def soft_labels(fused: torch.Tensor, targets: torch.Tensor, anchor: int, bins: int = 10, eps: float = 1e-10) -> torch.Tensor:
    """HABIT's soft label of every pair (B,) from the fused-query tokens and the target
    tokens (B, Q, E) of the batch and the anchor row: ``1 / (1 + |TR| + |TR_t - TR_i|)``."""
    f_bins, t_bins = histogram_bins(fused.flatten(1), bins), histogram_bins(targets.flatten(1), bins)
    f_anchor, t_anchor = f_bins[anchor].expand_as(f_bins), t_bins[anchor].expand_as(t_bins)
    mi_anchor = mutual_information(f_bins[anchor:anchor + 1], t_bins[anchor:anchor + 1], bins, eps)
    scale = mi_anchor.clamp_min(TINY)
    rate = (mi_anchor - mutual_information(f_bins, t_bins, bins, eps)).abs() / scale
    rate_text = (mi_anchor - mutual_information(f_anchor, t_bins, bins, eps)).abs() / scale
    rate_image = (mi_anchor - mutual_information(f_bins, t_anchor, bins, eps)).abs() / scale
    return (1.0 / (1.0 + rate.abs() + (rate_text - rate_image).abs())).float()


def batch_matched_min_samples(min_samples: int, release_batch: int, points: int) -> int:
    """DBSCAN's ``min_samples`` for ``points`` soft labels that keeps the share of the batch
    ``min_samples`` had at the release's batch of ``release_batch``: ``max(1, round(min_samples
    * points / release_batch))``; ``release_batch=0`` returns ``min_samples`` unchanged."""
    if release_batch == 0:
        return min_samples
    return max(1, round(min_samples * points / release_batch))


def dbscan_outliers(values: np.ndarray, eps: float, min_samples: int) -> np.ndarray:
    """Which of the 1-D ``values`` DBSCAN leaves as noise (label -1)."""
    labels = DBSCAN(eps=eps, min_samples=min_samples).fit_predict(np.asarray(values, dtype=np.float64).reshape(-1, 1))
    return labels == -1


# ----------------------------------------------------------------------------- losses


def rcl_rows(sim: torch.Tensor, temperature: float, clamp: RCLClamp = "one_minus") -> torch.Tensor:
    """Each row's RCL term (B,), ``-sum_{j != i} log(1 - p_ij)``: ``one_minus`` is
    :func:`cirbench.method.losses.per_sample_robust_contrastive` (``1 - p`` clamped at 1e-6);
    ``probability`` clamps ``p`` to ``[1e-7, 1 - 1e-7]`` first, as ``robust_infoNCE`` does
    (a saturated off-diagonal entry then costs ``-log 1e-7``, not ``-log 1e-6``)."""
    return per_sample_robust_contrastive(sim, temperature, guard=clamp)


def soft_margin_loss(sim: torch.Tensor, labels: torch.Tensor, margin: float) -> torch.Tensor:
    """``L_soft``: per row the hardest negative of ``relu(m_i + S_ij - S_ii)`` with
    ``m_i = margin (10^{labels_i} - 1) / 9``, summed and divided by the batch size."""
    size = sim.shape[0]
    row_margin = margin * (torch.pow(10.0, labels) - 1.0) / 9.0
    cost = (row_margin.unsqueeze(1) + sim - sim.diagonal().unsqueeze(1)).clamp_min(0.0)
    cost = cost.masked_fill(torch.eye(size, dtype=torch.bool, device=sim.device), 0.0)
    return cost.max(dim=1).values.sum() / size


def consistency_kl(previous_sim: torch.Tensor, previous_labels: torch.Tensor, current_sim: torch.Tensor,
                   current_labels: torch.Tensor, scale: float, arguments: KLArguments = "named") -> torch.Tensor:
    """``L_kl``: ``KL(P_prev || P_cur)`` averaged over every entry (``nn.KLDivLoss('mean')``,
    as released), ``P = softmax(scale * label_i * S_i)`` row-wise; the previous side is a
    constant. ``release``: the released call, ``KL(softmax(scale * prev_label * S_cur) ||
    softmax(scale * cur_label * S_prev))`` (arguments swapped, labels crossed)."""
    if arguments == "release":
        target = F.softmax(scale * previous_labels.unsqueeze(1) * current_sim, dim=1)
        log_input = F.log_softmax(scale * current_labels.unsqueeze(1) * previous_sim.detach(), dim=1)
    else:
        target = F.softmax(scale * previous_labels.unsqueeze(1) * previous_sim, dim=1).detach()
        log_input = F.log_softmax(scale * current_labels.unsqueeze(1) * current_sim, dim=1)
    return (torch.xlogy(target, target) - target * log_input).mean()  # F.kl_div(..., reduction="mean"), which warns


# ----------------------------------------------------------------------------- the method


class SampleHistory:
    """Per-sample state from the step a sample was last seen, keyed by its index in the
    training split: soft label, composed feature (E) and target tokens (Q, E), and the
    epoch it was written in. Kept on the CPU; a read returns only last epoch's entries."""

    def __init__(self, num_train: int) -> None:
        self.num_train = num_train
        self.epoch = np.full(num_train, NEVER, dtype=np.int64)
        self.label = torch.zeros(num_train)
        self.composed: torch.Tensor | None = None
        self.targets: torch.Tensor | None = None

    def previous(self, index: torch.Tensor, epoch: int) -> np.ndarray:
        """Which samples at ``index`` were last written in ``epoch - 1`` (B,) bool."""
        return self.epoch[index.cpu().numpy()] == epoch - 1

    def read(self, index: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The stored soft labels (B,), composed features (B, E) and target tokens (B, Q, E)."""
        rows = index.cpu()
        return self.label[rows].to(device), self.composed[rows].to(device), self.targets[rows].to(device)

    def write(self, index: torch.Tensor, epoch: int, label: torch.Tensor, composed: torch.Tensor, targets: torch.Tensor) -> None:
        """Store this step's values of the samples at ``index``."""
        rows = index.cpu()
        if self.composed is None:
            self.composed = torch.zeros(self.num_train, *composed.shape[1:])
            self.targets = torch.zeros(self.num_train, *targets.shape[1:])
        self.label[rows] = label.detach().float().cpu()
        self.composed[rows] = composed.detach().float().cpu()
        self.targets[rows] = targets.detach().float().cpu()
        self.epoch[rows.numpy()] = epoch


class HABIT(Method):
    """HABIT; see the module docstring."""

    name = "habit"
    version = "2"
    paper = "Li et al., HABIT: Chrono-Synergia Robust Progressive Learning Framework for Composed Image Retrieval, AAAI 2026"
    Config = HABITConfig
    partitions = True
    ablations = {  # one module (or part of DPL) off each; docs/habit.md
        "no_mke": {"mke": False},
        "no_dpl": {"mask": False, "kl": False},
        "no_mask": {"mask": False},
        "no_kl": {"kl": False},
    }
    ablation_noise = (0.2,)

    def __init__(self, backbone, config: HABITConfig, context) -> None:
        super().__init__(backbone, config, context)
        self.history = SampleHistory(context.num_train)
        self.by_position: dict[int, tuple[int, torch.Tensor, torch.Tensor]] = {}
        """``history = batch_position``: step-in-epoch -> (epoch, soft labels, similarity)."""

    def features(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The composed queries (B, E), the fused-query tokens through ``text_proj`` (B, Q, E)
        and the target tokens (B, Q, E), all L2-normalised."""
        fused = self.backbone.compose(batch.reference, batch.text)
        composed = F.normalize(self.backbone.text_proj(fused.text[:, 0]), dim=-1)
        fused_tokens = F.normalize(self.backbone.text_proj(fused.query), dim=-1)
        return composed, fused_tokens, self.backbone.target_features(batch.target)

    def batch_labels(self, sim: torch.Tensor, fused_tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The soft labels of the batch (all ones with ``mke`` off)."""
        if not self.config.mke:
            return torch.ones(sim.shape[0], device=sim.device)
        anchor = self.anchor(sim)
        return soft_labels(fused_tokens.detach(), targets.detach(), anchor, self.config.bins, self.config.mi_eps)

    def anchor(self, sim: torch.Tensor) -> int:
        """The batch row with the smallest detached RCL row loss (MKE's anchor)."""
        return int(rcl_rows(sim.detach(), self.config.temperature, self.config.rcl_clamp).argmin())

    def past(self, batch: Batch, epoch: int, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """The previous epoch's soft labels (B,), similarity (B, B) and which rows have them
        (B,) bool, or None when no row has a previous epoch."""
        device = batch.reference.device
        if self.config.history == "batch_position":
            stored = self.by_position.get(step - epoch * self.context.steps_per_epoch)
            if stored is None or stored[0] != epoch - 1 or stored[1].shape[0] != len(batch):
                return None
            return stored[1].to(device), stored[2].to(device), torch.ones(len(batch), dtype=torch.bool, device=device)
        has = torch.as_tensor(self.history.previous(batch.index, epoch), device=device)
        if not has.any():
            return None
        label, composed, targets = self.history.read(batch.index, device)
        return label, max_token_similarity(composed, targets), has

    def remember(self, batch: Batch, epoch: int, step: int, label: torch.Tensor, composed: torch.Tensor,
                 targets: torch.Tensor, sim: torch.Tensor) -> None:
        """Store this step's soft labels and what rebuilds its similarity next epoch."""
        if self.config.history == "batch_position":
            self.by_position[step - epoch * self.context.steps_per_epoch] = (epoch, label.detach().cpu(), sim.detach().cpu())
        else:
            self.history.write(batch.index, epoch, label, composed, targets)

    def keep_mask(self, label: torch.Tensor, past_label: torch.Tensor, has_past: torch.Tensor) -> torch.Tensor:
        """The DPL mask (B,) bool: False where a sample with a previous epoch is a DBSCAN
        outlier both now and then."""
        c = self.config
        rows = has_past.cpu().numpy()

        def outliers(values: np.ndarray) -> np.ndarray:
            density = batch_matched_min_samples(c.dbscan_min_samples, c.dbscan_release_batch, len(values))
            return dbscan_outliers(values, c.dbscan_eps, density)

        outlier_now = outliers(label.cpu().numpy())
        outlier_then = np.zeros_like(rows)
        outlier_then[rows] = outliers(past_label.cpu().numpy()[rows])
        return ~torch.as_tensor(outlier_now & outlier_then, device=label.device)

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        """``L_rank + soft_weight L_soft + kl_weight L_kl`` (see the module docstring)."""
        c, size = self.config, len(batch)
        composed, fused_tokens, targets = self.features(batch)
        sim = max_token_similarity(composed, targets)
        label = self.batch_labels(sim, fused_tokens, targets)
        past = self.past(batch, epoch, step)
        keep = torch.ones(size, dtype=torch.bool, device=sim.device)
        if past is not None and c.mask:
            keep = self.keep_mask(label, past[0], past[2])
        masked_label = label * keep.float()
        zero = sim.sum() * 0.0  # a term switched off: zero, attached to the graph
        parts = {"rank": (rcl_rows(sim, c.temperature, c.rcl_clamp) * keep.float()).sum() / size}
        parts["soft"] = soft_margin_loss(sim, masked_label, c.margin) if c.soft_loss else zero
        parts["kl"] = zero
        if past is not None and c.kl:
            rows = past[2]
            parts["kl"] = consistency_kl(past[1][rows][:, rows], past[0][rows], sim[rows][:, rows], masked_label[rows],
                                         c.kl_scale, c.kl_arguments)
        self.remember(batch, epoch, step, label, composed, targets, sim)
        loss = parts["rank"] + c.soft_weight * parts["soft"] + c.kl_weight * parts["kl"]
        components = {k: float(v.detach()) for k, v in parts.items()}
        components.update(soft_label_mean=float(label.mean()), kept_share=float(keep.float().mean()))
        selected = keep if c.mask and epoch > 0 else None  # every sample has a previous epoch from epoch 1 on
        return StepOutput(loss, components, noise_score=1.0 - label.detach(), selected_clean=selected)
