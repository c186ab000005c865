"""TME (He et al., CVPR 2025): the robust baseline with a small-loss GMM partition.

What the released code (He-Changhao/2025-CVPR-TME) does, and what this plugin does:

- **Partition** (every epoch after the warm-up, in :meth:`TME.on_epoch_start`): each
  training triplet's in-batch loss ``-log_softmax(sim / temp).diag()`` of the composed
  query against the targets of its (shuffled) batch, min-max normalised over the split,
  fitted by ``GaussianMixture(n_components=2, max_iter=10, tol=1e-2, reg_covar=5e-4)``; the
  lower-mean component is clean and a sample is clean when its clean posterior exceeds 0.5.
  The noisy posterior is the noise score the harness turns into AUROC. ``gmm_input =
  "similarity"`` fits the diagonal similarity instead (the release's ``split_type sim``;
  the higher-mean component is clean). The mixture is seeded from the run's seed.
- **Losses** (release names): ``lrm`` = RCL of the composed query (reference + text) on the
  clean rows, each row against all targets of the batch, averaged over the clean rows;
  ``lpm`` = the same for a prompt-only query (learnable prompt tokens + text, no image);
  ``lrd`` = RCL on all rows for a query fusing the reference with ``F_diff``, the composer's
  image-only encoding of ``d2t_proj(target tokens - reference tokens)``; ``lsa`` = MSE
  between the token-mean of ``F_diff`` and a detached token-mean text embedding, clean rows
  only. Total ``lrm_weight * lrm + lpm_weight * lpm + lsa_weight * lsa + lrd_weight *
  lrd`` (release: 1, 1, 1 and w = 0.2, its default and CIRR setting; FashionIQ uses 0.1).
  The temperature is learnable from 0.07 and clamped at 0.01 from below, as released.
- **Warm-up** (every sample clean, no partition, no purity rows): ``warmup_qformer`` epochs
  of ``lrm`` alone; ``warmup_proj`` epochs of ``lrd + lpm + lsa`` in which only
  ``d2t_proj`` and the prompt tokens learn (the release steps a second optimiser over just
  those), so that the new branches are fitted before their losses reach the shared
  composer; ``warmup_last`` epochs of all losses. The release uses 3 / 2 / 1 of 30 epochs
  (a fifth of training). The lengths are in epochs and may be fractional: a phase ends at
  the step where its share of the epochs is spent. Left unset (None, the default) each
  keeps the release's share of the run: 3/30, 2/30 and 1/30 of the epochs, i.e. 1, 2/3 and
  1/3 of an epoch in cirbench's 10-epoch default, so the partition and all four losses run
  from the third epoch (index 2) on; the first partition is at the first epoch start after
  the whole warm-up. (tme v2 squeezed the three phases into the first of 4 epochs, so the
  first GMM was fitted on a model that had just got worse: at 80% noise R@10 fell from
  the start's 0.403 to 0.162 after that epoch and the partition kept 77% of the samples at
  purity 0.258, chance 0.20.) With 1 / 0 / 0 (the
  defaults of tme v1, which skipped the projection warm-up) the untrained ``lrd`` and
  ``lpm`` branches reached the composer at full learning rate in epoch 1 and one seed in
  three collapsed to R@10 0.008 at 0% noise (``docs/tme.md``).

Differences forced by the backbone interface (the composer is one Q-Former-style pass):

- The composed query is the classification-token output of one pass (queries + text +
  reference), as in ``sprc``; TME, like SPRC, feeds the reference's Q-Former outputs into a
  second text pass.
- ``lrd``'s query: the release runs a text pass in which ``F_diff`` replaces the word
  embeddings and the reference's Q-Former outputs are the query embeddings, and projects
  the first ``F_diff`` position. Here ``F_diff`` becomes the query tokens of a pass that
  cross-attends to the reference tokens, and the first query position's output goes
  through ``text_proj``: the same two inputs, fused by the composer.
- ``lsa``'s target: the release uses the detached BERT word embeddings of the caption
  (mean over all 32 padded positions). Here it is the mean over the real text tokens of
  the backbone's word embeddings (:meth:`Backbone.word_embeddings`), taken once per
  training sample when the method is built, so the target never depends on the trainable
  weights. (tme v2 used the composer's own text states from the prompt-only pass: a
  target that moved with the weights it was supposed to anchor.)
- The per-sample pass iterates the split in one fixed shuffled order (the harness's
  ``iterate``); the release reshuffles it every epoch.

The small-loss rule needs a model that already fits the clean pairs better than the noisy
ones (the release starts from pre-trained BLIP-2). On ``tiny``, trained from scratch, the
composer is still near chance after one epoch of RCL, so the first partitions are close to
random (AUROC ~0.5); a longer ``warmup_qformer`` shows the mechanism working, and missing
the caption-swapped (hard) noise, once the model has learned something.

Switches: ``partition = false`` keeps every sample clean in every epoch (the release's
``all_positive`` partitioner: the same losses, a plain robust loss, and no partition or
purity rows); ``gmm_input``; the three warm-up lengths; ``rcl_clamp`` and ``lsa_target``,
the release's readings where the port differs (``readings=release`` turns both on;
``docs/tme.md``, "Where we differ from the release"). The seconds spent in each
epoch's partition pass are kept in :attr:`TME.partition_seconds` and logged as the
``partition_seconds`` component of that epoch's first training step.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture
from torch import nn

from cirbench.backbones.base import max_token_similarity
from cirbench.settings.config import late_field
from cirbench.method.losses import per_sample_info_nce, per_sample_robust_contrastive
from cirbench.method import Batch, Method, MethodConfig, Partition, StepOutput, frozen_parameters
from cirbench.method.search import Distribution, LogUniform

Phase = Literal["qformer", "proj", "last", "train"]


@dataclass
class TMEConfig(MethodConfig):
    """TME's released settings (``train.sh`` / ``precompute_train.py``); the warm-up
    lengths, in epochs, default to the release's shares of the run (see the module
    docstring)."""

    search_space: ClassVar[dict[str, Distribution]] = {
        **MethodConfig.search_space, "lrd_weight": LogUniform(0.05, 0.8), "temperature": LogUniform(0.01, 0.1),
    }
    release_readings: ClassVar[dict[str, object]] = {"rcl_clamp": "release", "lsa_target": "release"}
    """Where the port's defaults are not the release's code (``docs/tme.md``, "Where we differ
    from the release"; ``benchmarks/parity/tme.py`` checks every comparable term under them)."""

    temperature: float = 0.07
    min_temperature: float = 0.01
    lrm_weight: float = 1.0
    lpm_weight: float = 1.0
    lsa_weight: float = 1.0
    lrd_weight: float = 0.2
    partition: bool = True
    gmm_input: Literal["loss", "similarity"] = "loss"
    threshold: float = 0.5
    gmm_max_iter: int = 10
    gmm_tol: float = 1e-2
    gmm_reg_covar: float = 5e-4
    warmup_qformer: float | None = None
    warmup_proj: float | None = None
    warmup_last: float | None = None
    rcl_clamp: Literal["port", "release"] = late_field("port")
    """RCL's guard: ``port`` clamps ``1 - p`` at 1e-6 (``cirbench.method.losses``); ``release``
    clamps ``p`` to [1e-7, 1 - 1e-7] first, as its ``robust_infoNCE``."""
    lsa_target: Literal["static", "release"] = late_field("static")
    """``lsa``'s target: ``static``, each sample's mean word embedding over its real tokens,
    taken once when the method is built; ``release``, the current word embeddings of the
    batch's text, detached, averaged over every position of the padded text (pads included)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("warmup_qformer", "warmup_proj", "warmup_last"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"tme: {name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"tme: threshold must be in (0, 1), got {self.threshold}")
        if not 0.0 < self.min_temperature <= self.temperature:
            raise ValueError(f"tme: need 0 < min_temperature <= temperature, got {self.min_temperature}, {self.temperature}")
        if self.gmm_input not in ("loss", "similarity"):
            raise ValueError(f"tme: gmm_input must be 'loss' or 'similarity', got {self.gmm_input!r}")
        if self.rcl_clamp not in ("port", "release"):
            raise ValueError(f"tme: rcl_clamp must be 'port' or 'release', got {self.rcl_clamp!r}")
        if self.lsa_target not in ("static", "release"):
            raise ValueError(f"tme: lsa_target must be 'static' or 'release', got {self.lsa_target!r}")


def min_max(values: np.ndarray) -> np.ndarray:
    """``values`` rescaled to [0, 1]; a constant vector becomes all zeros."""
    values = np.asarray(values, dtype=np.float64)
    span = values.max() - values.min()
    return (values - values.min()) / span if span > 0 else np.zeros_like(values)


def gmm_clean_posterior(
    values: np.ndarray,
    clean_is_low: bool,
    seed: int,
    max_iter: int = 10,
    tol: float = 1e-2,
    reg_covar: float = 5e-4,
) -> np.ndarray:
    """Per-sample posterior of the clean component of a two-component 1-D Gaussian mixture
    fitted to min-max normalised ``values``. The clean component is the one with the lower
    mean when ``clean_is_low`` (losses), else the higher mean (similarities)."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if values.size < 2 or not np.isfinite(values).all():
        raise ValueError(f"tme: the GMM needs at least 2 finite values, got {values.size} (finite: {np.isfinite(values).all()})")
    x = min_max(values).reshape(-1, 1)
    gmm = GaussianMixture(n_components=2, max_iter=max_iter, tol=tol, reg_covar=reg_covar, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # max_iter=10 is the released setting
        gmm.fit(x)
    means = gmm.means_.reshape(-1)
    clean = int(means.argmin() if clean_is_low else means.argmax())
    return gmm.predict_proba(x)[:, clean]


def robust_rows(sim: torch.Tensor, temperature: torch.Tensor | float, clamp: str = "port") -> torch.Tensor:
    """Each row's RCL term ``-sum_{j != i} log(1 - p_ij)`` (B,) of a square ``sim``, with
    ``p = softmax(sim / temperature)``; ``clamp`` picks the guard (:attr:`TMEConfig.rcl_clamp`)."""
    guards = {"port": "one_minus", "release": "probability"}
    if clamp not in guards:
        raise ValueError(f"tme: rcl_clamp must be 'port' or 'release', got {clamp!r}")
    return per_sample_robust_contrastive(sim, temperature, guard=guards[clamp])


def rcl_term(sim: torch.Tensor, temperature: torch.Tensor | float, rows: torch.Tensor | None = None,
             clamp: str = "port") -> torch.Tensor:
    """TME's robust loss on a (B, B) similarity: the mean RCL row over all rows (``rows``
    None, ``lrd``), or the sum over the rows marked in ``rows`` (B,) divided by their count
    (0 when none: ``lrm``, ``lpm``)."""
    per_row = robust_rows(sim, temperature, clamp)
    return per_row.mean() if rows is None else per_row[rows].sum() / rows.sum().clamp_min(1)


def word_target(words: torch.Tensor, mask: torch.Tensor, reading: str = "static") -> torch.Tensor:
    """``lsa``'s target (B, H) from word embeddings (B, T, H) and the text mask (B, T): the
    mean over the real tokens (``static``), or over every position, pads included
    (``release``, whose captions are padded to 32 tokens)."""
    if reading == "release":
        return words.mean(1)
    m = mask.unsqueeze(-1).to(words.dtype)
    return (words * m).sum(1) / m.sum(1).clamp_min(1)


def alignment_term(f_diff: torch.Tensor, target: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``lsa``: the squared difference of the token-mean of ``F_diff`` (B, Q, H) and
    ``target`` (B, H), averaged over dimensions, summed over the rows marked in ``rows``
    and divided by their count (the release's ``MSELoss`` on the clean rows)."""
    per_row = (f_diff.mean(1) - target).pow(2).mean(-1)
    return per_row[rows].sum() / rows.sum().clamp_min(1)


def batch_statistics(sim: torch.Tensor, temperature: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
    """The partition's per-sample statistics of one batch's (B, B) similarity: each row's
    in-batch loss ``-log_softmax(sim / temperature).diag()`` and its own-pair similarity."""
    return per_sample_info_nce(sim, temperature), sim.diagonal()


class TME(Method):
    """The robust baseline; see the module docstring."""

    name = "tme"
    version = "3"
    paper = "He et al., Learning with Noisy Triplet Correspondence for Composed Image Retrieval (TME), CVPR 2025"
    Config = TMEConfig
    partitions = True
    needs = ("word_embeddings",)  # lsa's static text target

    def __init__(self, backbone, config: TMEConfig, context) -> None:
        super().__init__(backbone, config, context)
        with torch.no_grad():  # the interface has no token-width attribute: probe the frozen tower once
            probe = torch.zeros(1, *backbone.image_shape, device=backbone.query_tokens.device)
            token_width = backbone.encode_image_tokens(probe).shape[-1]
        self.d2t_proj = nn.Linear(token_width, token_width)
        self.prompt_tokens = nn.Parameter(torch.randn_like(backbone.query_tokens) * 0.02)
        self.temperature = nn.Parameter(torch.tensor(float(config.temperature)))
        epochs = context.epochs
        release = {"warmup_qformer": 3 / 30, "warmup_proj": 2 / 30, "warmup_last": 1 / 30}  # of the run
        self.warmup = {k: share * epochs if getattr(config, k) is None else getattr(config, k) for k, share in release.items()}
        n = context.num_train
        static = config.lsa_target == "static"
        self.register_buffer("word_targets", self.static_word_targets() if static else None, persistent=False)
        self.clean_mask = np.ones(n, dtype=bool)
        self.noise_posterior = np.zeros(n, dtype=np.float64)
        self.partitioned = False
        self.partition_seconds: dict[int, float] = {}
        self._unlogged_partition_seconds: float | None = None

    # ------------------------------------------------------------------ schedule

    @torch.no_grad()
    def static_word_targets(self) -> torch.Tensor:
        """``lsa``'s target of every training sample (N, H): the mean word embedding of its
        text over the real tokens, from the weights the method starts with (NaN for a sample
        the context's pass did not visit)."""
        targets = torch.full((self.context.num_train, self.backbone.hidden_size), float("nan"))
        for batch in self.context.iterate(False):
            words = self.backbone.word_embeddings(batch.text).float()
            targets[batch.index.cpu()] = word_target(words, batch.text.mask, "static").cpu()
        return targets.to(self.backbone.query_tokens.device)

    @property
    def warmup_epochs(self) -> float:
        """The length of the warm-up in epochs (all three phases; may be fractional)."""
        return sum(self.warmup.values())

    def phase(self, epoch: int, step: int = 0) -> Phase:
        """The release's training phase at global ``step`` (counted from the first step of
        training, as the harness passes it) in ``epoch``: ``qformer`` / ``proj`` /
        ``last`` warm-up, or ``train`` (partitioned, when the partition is on). Warm-up ends
        at an epoch boundary for the partition: an epoch that starts inside the warm-up is
        never partitioned, and its steps after the warm-up train as in ``last``."""
        w = self.warmup
        position = max(float(epoch), step / max(self.context.steps_per_epoch, 1))
        if position < w["warmup_qformer"]:
            return "qformer"
        if position < w["warmup_qformer"] + w["warmup_proj"]:
            return "proj"
        if epoch < math.ceil(self.warmup_epochs - 1e-9):
            return "last"
        return "train"

    # ------------------------------------------------------------------ partition

    def clamped_temperature(self) -> torch.Tensor:
        """The learnable temperature, clamped in place at ``min_temperature`` (as released)."""
        with torch.no_grad():
            self.temperature.clamp_(min=self.config.min_temperature)
        return self.temperature

    def query_target_similarity(self, batch: Batch) -> torch.Tensor:
        """(B, B) max-over-tokens similarity of the composed queries against the batch's
        targets (their features as the held-out evaluation just encoded them, where it did)."""
        query = self.backbone.composed_feature(batch.reference, batch.text)
        evaluated = self.context.evaluated_targets
        targets = evaluated(batch.index) if evaluated is not None else None
        return max_token_similarity(query, self.backbone.target_features(batch.target) if targets is None else targets)

    @torch.no_grad()
    def per_sample_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """Every training sample's in-batch loss and own-pair similarity, in split order,
        from one eval-mode pass in shuffled batches."""
        n = self.context.num_train
        loss, sim = np.full(n, np.nan), np.full(n, np.nan)
        temperature = self.clamped_temperature()
        was_training = self.training
        self.eval()
        try:
            for batch in self.context.iterate(True):
                batch_loss, batch_sim = batch_statistics(self.query_target_similarity(batch), temperature)
                index = batch.index.cpu().numpy()
                loss[index] = batch_loss.double().cpu().numpy()
                sim[index] = batch_sim.double().cpu().numpy()
        finally:
            self.train(was_training)
        if np.isnan(loss).any():
            raise RuntimeError(f"tme: the per-sample pass left {int(np.isnan(loss).sum())} of {n} training samples unvisited")
        return loss, sim

    def on_epoch_start(self, epoch: int) -> Partition | None:
        """After the warm-up (and with the partition on), fit the GMM and return the split."""
        self.partitioned = self.config.partition and self.phase(epoch) == "train"
        if not self.partitioned:
            self.clean_mask[:] = True
            self.noise_posterior[:] = 0.0
            return None
        c = self.config
        tick = time.perf_counter()
        loss, sim = self.per_sample_statistics()
        by_loss = c.gmm_input == "loss"
        clean_posterior = gmm_clean_posterior(
            loss if by_loss else sim, clean_is_low=by_loss, seed=self.context.seed,
            max_iter=c.gmm_max_iter, tol=c.gmm_tol, reg_covar=c.gmm_reg_covar,
        )
        self.clean_mask = clean_posterior > c.threshold
        self.noise_posterior = 1.0 - clean_posterior
        self.partition_seconds[epoch] = time.perf_counter() - tick
        self._unlogged_partition_seconds = self.partition_seconds[epoch]
        return Partition(noise_score=self.noise_posterior.copy(), selected_clean=self.clean_mask.copy())

    # ------------------------------------------------------------------ losses

    def difference_features(self, batch: Batch) -> torch.Tensor:
        """``F_diff`` (B, Q, H): the composer's image-only encoding of the projected
        target-minus-reference tokens."""
        return self.backbone.compose(self.d2t_proj(batch.target - batch.reference), None).query

    def losses(self, batch: Batch, phase: Phase, clean: torch.Tensor) -> dict[str, torch.Tensor]:
        """The loss terms active in ``phase``; ``clean`` (B,) marks the rows treated as clean."""
        temperature = self.clamped_temperature()
        targets = self.backbone.target_features(batch.target)
        c = self.config

        def rcl(query: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
            return rcl_term(max_token_similarity(query, targets), temperature, rows, c.rcl_clamp)

        parts: dict[str, torch.Tensor] = {}
        if phase != "proj":
            parts["lrm"] = rcl(self.backbone.composed_feature(batch.reference, batch.text), clean)
        if phase != "qformer":
            f_diff = self.difference_features(batch)
            fused = self.backbone.compose(batch.reference, None, queries=f_diff).query[:, 0]
            parts["lrd"] = rcl(F.normalize(self.backbone.text_proj(fused), dim=-1), None)
            prompt_pass = self.backbone.compose(None, batch.text, queries=self.prompt_tokens)
            parts["lpm"] = rcl(F.normalize(self.backbone.text_proj(prompt_pass.text[:, 0]), dim=-1), clean)
            if c.lsa_target == "release":
                with torch.no_grad():
                    words = self.backbone.word_embeddings(batch.text)
                word_mean = word_target(words, batch.text.mask, "release").to(f_diff.dtype)
            else:
                word_mean = self.word_targets[batch.index].to(f_diff.dtype)
            if torch.isnan(word_mean).any():
                raise RuntimeError("tme: a batch holds samples whose lsa target was never computed (the context's "
                                   "iterate() did not visit them when the method was built)")
            parts["lsa"] = alignment_term(f_diff, word_mean, clean)
        return parts

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        """The phase's weighted losses; after the warm-up, the stored partition of the batch."""
        phase = self.phase(epoch, step)
        index = batch.index.cpu().numpy()
        clean = torch.as_tensor(self.clean_mask[index], device=batch.index.device)
        if phase == "proj":
            with frozen_parameters([*self.backbone.trainable_parameters(), self.temperature]):
                parts = self.losses(batch, phase, clean)
        else:
            parts = self.losses(batch, phase, clean)
        c = self.config
        weights = {"lrm": c.lrm_weight, "lpm": c.lpm_weight, "lsa": c.lsa_weight, "lrd": c.lrd_weight}
        loss = sum(weights[k] * v for k, v in parts.items())
        components = {k: float(v.detach()) for k, v in parts.items()}
        components["temperature"] = float(self.temperature.detach())
        if self._unlogged_partition_seconds is not None:
            components["partition_seconds"] = self._unlogged_partition_seconds
            self._unlogged_partition_seconds = None
        out = StepOutput(loss, components)
        if self.partitioned:
            out.selected_clean = clean
            out.noise_score = torch.as_tensor(self.noise_posterior[index], device=batch.index.device, dtype=torch.float32)
        return out
