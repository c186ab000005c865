"""The method plugin contract: the harness owns the loop, a method owns its math.

A method is a :class:`Method` subclass with a ``name``, a ``version`` (bump it whenever its
behaviour changes, so results stay comparable) and a ``Config`` dataclass of typed default
hyperparameters (overridable with ``--set <name>.<field>=<value>``). The harness builds it
once per cell with a fresh backbone, hands it :class:`Batch` objects, and calls:

- :meth:`Method.on_epoch_start` before each epoch (TME's GMM pass over the training set
  goes here; it may return an epoch-level :class:`Partition`);
- :meth:`Method.training_step` per batch: the loss, named loss components, and optionally
  per-sample noise scores (higher = more likely noisy; more than one, named, in
  ``extra_scores``) and clean/noisy decisions;
- :meth:`Method.encode_queries`, :meth:`Method.encode_targets` and
  :meth:`Method.similarity` for retrieval, so the evaluator stays method-agnostic.

Every step's output is checked before it is applied (:mod:`cirbench.engine.cell.step_rules`): a
finite scalar loss that requires grad, a boolean mask and finite float scores of the batch's
length, all on the batch's device; the :class:`Batch` is read-only (a tensor of it changed in
place, before or after the loss, is refused naming the field); a method that decides keeps at
least one row in every epoch. A method's ``name`` may not hold ``:``, the separator of the
harness's labels (``name:variant``, ``replay:name``).

Methods never see the ground-truth noise flags: a :class:`Batch` carries ids, cached image
tokens and (possibly corrupted) texts. Only a method that sets ``oracle = True`` is given
the flags, in :attr:`TrainingContext.noise_flags`, and its results are marked as oracle.
Nor are they told the configured noise rate, which real data does not come with: only a
method that declares ``reads_noise_rate = True`` is given it, in
:attr:`TrainingContext.noise_rate`, and its results are marked as told the rate.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterator

import numpy as np
import torch
from torch import nn

from cirbench.backbones.base import Backbone, TextBatch, max_token_similarity
from cirbench.registry import Contract
from cirbench.method.search import LR_SPACE, Distribution


@contextmanager
def frozen_parameters(params: list[nn.Parameter]) -> Iterator[None]:
    """Within the block, ``params`` take no part in the autograd graph (so they get no
    gradient and AdamW skips them, while gradients still flow through the activations to
    whatever else requires them); their flags are restored on exit."""
    flags = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in zip(params, flags):
            p.requires_grad_(flag)


@dataclass
class MethodConfig:
    """Optimiser settings every method has; a method's own ``Config`` subclasses this.

    ``lr`` None means the backbone's ``default_lr`` (1e-3 for ``tiny``, 1e-4 for ``clip``'s
    random composer, the papers' 1e-5 for BLIP-2). The schedule is a one-cycle cosine with ``warmup`` as its rising share.
    Out-of-range values raise ValueError when the config is built (before any work); a
    subclass with its own ``__post_init__`` calls ``super().__post_init__()``.
    """

    search_space: ClassVar[dict[str, Distribution]] = {"lr": LR_SPACE}
    """What ``cirbench sweep`` may vary (:mod:`cirbench.method.search`): ``lr`` for every method; a
    method's ``Config`` adds its own few (``{**MethodConfig.search_space, ...}``)."""

    release_readings: ClassVar[dict[str, Any]] = {}
    """The field values under which the port computes what its authors' release computes on
    every term the parity harness compares (``benchmarks/parity/``), its known defects
    included; ``--set <method>.readings=release`` turns them all on. Empty: the port has no
    reading of its own to switch (docs/<method>.md's "where we differ" says why)."""

    lr: float | None = None
    weight_decay: float = 0.05
    beta1: float = 0.9
    beta2: float = 0.98
    eps: float = 1e-7
    warmup: float = 0.1
    grad_clip: float = 0.0

    def __post_init__(self) -> None:
        ranges = {  # comparisons written so that NaN fails them
            "lr": (self.lr is None or (math.isfinite(self.lr) and self.lr > 0), "> 0 and finite (or none: the backbone's default)"),
            "weight_decay": (math.isfinite(self.weight_decay) and self.weight_decay >= 0, ">= 0 and finite"),
            "beta1": (0 <= self.beta1 < 1, "in [0, 1)"),
            "beta2": (0 <= self.beta2 < 1, "in [0, 1)"),
            "eps": (math.isfinite(self.eps) and self.eps > 0, "> 0 and finite"),
            "warmup": (0 <= self.warmup <= 1, "in [0, 1]"),
            "grad_clip": (math.isfinite(self.grad_clip) and self.grad_clip >= 0, ">= 0 and finite (0: no clipping)"),
        }
        bad = [f"{name}={getattr(self, name)!r} is out of range: must be {rule}" for name, (ok, rule) in ranges.items() if not ok]
        if bad:
            raise ValueError("; ".join(bad))


@dataclass
class Batch:
    """One training batch, read-only to a method (copy a tensor before changing it). ``index``
    holds positions in the training split (stable ids for per-sample state);
    ``reference``/``target`` are frozen-tower tokens (B, P, D_v)."""

    index: torch.Tensor
    reference: torch.Tensor
    target: torch.Tensor
    text: TextBatch
    texts: list[str]

    def __len__(self) -> int:
        return int(self.index.shape[0])


@dataclass
class StepOutput:
    """What a training step returns. ``components`` are logged by name; ``noise_score``
    (B,) and ``selected_clean`` (B,) are the method's per-sample view of the batch.
    ``extra_scores`` are further per-sample scores (B,), higher = more likely noisy, each
    recorded under its name like ``noise_score`` (e.g. HUG's ``overall_uncertainty``);
    the report's tables and figures use ``noise_score`` alone."""

    loss: torch.Tensor
    components: dict[str, float] = field(default_factory=dict)
    noise_score: torch.Tensor | None = None
    selected_clean: torch.Tensor | None = None
    extra_scores: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class Partition:
    """An epoch-level partition of the whole training split, in split order."""

    noise_score: np.ndarray
    selected_clean: np.ndarray


@dataclass
class TrainingContext:
    """What a method may know about the run it is part of."""

    num_train: int
    epochs: int
    batch_size: int
    steps_per_epoch: int
    seed: int
    device: torch.device
    iterate: Callable[[bool], Iterator[Batch]]
    """A full pass over the training split in batches (argument: shuffle), for epoch-level
    passes such as TME's per-sample loss; call it under ``torch.no_grad()``."""
    noise_flags: np.ndarray | None = None
    """The true per-sample noise flags: given to oracle methods only."""
    noise_rate: float | None = None
    """The cell's configured noise rate (``--noise``): given only to a method that declares
    :attr:`Method.reads_noise_rate` (privileged information, marked in the report), None for
    every other."""
    pixels: Callable[[torch.Tensor, str], torch.Tensor] | None = None
    """``pixels(index, role)``: the frozen tower's input (B, C, H, W) on ``device`` of the
    ``role`` image (``"reference"`` or ``"target"``) of each training sample at ``index``
    (``Batch.index``): the images behind the batch's tokens, noise included, decoded and
    preprocessed by the backbone. For a method that builds images of its own (INTENT's
    intervened reference); None outside the harness."""
    encode_pixels: Callable[[torch.Tensor], torch.Tensor] | None = None
    """Frozen-tower tokens (B, P, D_v), float32 on ``device``, of pixels a method built, made
    the way the batch's tokens were (the cache's tower, or the online one), without gradient:
    the unchanged pixels of :attr:`pixels` give the batch's own tokens. None outside the harness."""
    evaluated_targets: Callable[[torch.Tensor], torch.Tensor | None] | None = None
    """``evaluated_targets(index)``: the method's :meth:`Method.encode_targets` features of the
    target image of each training sample at ``index`` (``Batch.index``), as the held-out
    evaluation that ended the last epoch encoded them (eval mode, no gradient), or None
    where there are none (no held-out split, before the first evaluation, once a step has
    changed the weights, or off the CPU: :func:`cirbench.engine.cell.evaluate.keeps_exactly`). For an epoch-level pass at the next epoch's start (TME's), which
    would otherwise encode those targets again. None outside the harness."""


class Method(nn.Module):
    """Base class of every method plugin (see the module docstring for the contract)."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    paper: ClassVar[str] = ""
    Config: ClassVar[type[MethodConfig]] = MethodConfig
    partitions: ClassVar[bool] = False
    """True if the method decides clean/noisy per sample (purity applies)."""
    scores_noise: ClassVar[bool] = False
    """True if the method gives per-sample noise scores without partitioning (HUG)."""
    oracle: ClassVar[bool] = False
    reads_noise_rate: ClassVar[bool] = False
    """True if the method reads the configured noise rate (:attr:`TrainingContext.noise_rate`,
    e.g. Co-teaching's forget rate): privileged information real data does not come with, so
    it is withheld from every other method, recorded in each run (``runs.reads_noise_rate``)
    and marked in the report's tables, as the perfect filter's ground truth is."""
    role: ClassVar[str] = ""
    """The part the method plays in the report, if any (a name of
    :data:`cirbench.results.roles.ROLES`: ``baseline``, ``perfect_filter``), recorded in each
    run so that the report finds it by role, never by name. Declared by the class itself,
    never inherited (:func:`method_role`): a method built on the baseline is not the baseline."""
    same_at_no_noise: ClassVar[str] = ""
    """The method this one is at 0% noise, if any (the perfect filter, with nothing to
    filter, is the baseline): a grid does not train it at 0% and says so; the report reads that
    method's cell there."""
    ablations: ClassVar[dict[str, dict[str, Any]]] = {}
    """The method's standard ablation grid: variant name -> ``Config`` overrides. ``cirbench
    run --ablate <name>`` runs the full method beside every variant, labelled ``<name>:<variant>``."""
    ablation_noise: ClassVar[tuple[float, ...]] = (0.2,)
    """The noise rates at which the method's paper reports its ablations (the grid's default)."""
    needs: ClassVar[tuple[str, ...]] = ()
    """The optional backbone capabilities it calls (names of
    :data:`~cirbench.backbones.base.OPTIONAL_CAPABILITIES`, e.g. ``word_embeddings``): a grid
    pairing it with a backbone that lacks one is refused before any cell trains."""

    def __init__(self, backbone: Backbone, config: MethodConfig, context: TrainingContext) -> None:
        super().__init__()
        self.backbone = backbone
        self.config = config
        self.context = context

    def on_epoch_start(self, epoch: int) -> Partition | None:
        """Called before each epoch; may return an epoch-level partition."""
        return None

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        """The loss of one batch (and optionally the method's per-sample noise view);
        ``step`` counts every step of the run from 0, across epochs. Every method overrides
        it: ``nn.Module`` enforces no ``@abstractmethod``, so discovery refuses a class that
        does not (:func:`cirbench.plugins.implements_training_step`)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement training_step")

    def encode_queries(self, reference: torch.Tensor, text: TextBatch) -> torch.Tensor:
        """Composed query features for retrieval (default: the backbone's composed feature)."""
        return self.backbone.composed_feature(reference, text)

    def encode_targets(self, images: torch.Tensor) -> torch.Tensor:
        """Gallery features for retrieval (default: per-token target features)."""
        return self.backbone.target_features(images)

    def similarity(self, queries: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Query-by-gallery scores, higher is better (default: max over target tokens)."""
        return max_token_similarity(queries, targets)


def method_role(cls: type[Method]) -> str:
    """The role ``cls`` itself declares (``""`` for none): a subclass does not inherit its base's."""
    return str(vars(cls).get("role", ""))


METHOD_CONTRACT = Contract(Method, "training_step", "training_step(self, batch, epoch, step) -> StepOutput", separator=":")
"""A method plugin: a :class:`Method` subclass with a ``name`` (without ``:``, the separator
of ``name:variant`` and ``replay:name``) that implements ``training_step``; its registry
holds the class (one per discovery: :mod:`cirbench.plugins`)."""
