"""ConeSep (Li et al., CVPR 2026): cone-based robust noise-unlearning for composed image
retrieval under noisy triplet correspondence. Paper: ``shared/papers/conesep-paper.txt``;
how each part maps onto this file, the switches and the ablation grid: ``docs/conesep.md``.

Three modules, run in every training step:

- **GFQ** (Sec. 3.2): a noise boundary ``B`` from ``K`` random reference/target images
  drawn in the image tower's input space and texts sampled from the batch (Eq. 2); the
  fidelity of each sample from its composed-target similarity and ``B`` (Eq. 3); the batch
  split into kept-clean and noisy by ``omega``. The noise score is the inverted fidelity.
- **NBL** (Sec. 3.3): a learnable negative prompt gives the diagonal negative composition
  ``F_neg``; the target-oriented sigmoid loss (Eq. 6) and the query-oriented interval loss
  (Eq. 7); objective Eq. 8 for the first ``N`` epochs. Eq. 8 optimises "the parameters of
  the NBL module": the negative branch runs the composer with its weights frozen, so every
  gradient through ``F_neg`` reaches the negative prompt alone, and Eq. 6-7 treat the
  targets and ``F_c`` as given (``nbl_gradient``). The prompt starts as an independent
  draw at the query tokens' scale (``negative_init``), not as their copy: a copy with the
  same text makes ``F_neg = F_c`` at step 0, and the release's routing then pushes every
  composed query away from its own target (measured: at 80% noise the composer reached
  RCL's flat point within 8 steps; ``docs/conesep.md``).
- **BTU** (Sec. 3.4): the B x 2B cost ``[C+ | C-]`` (Eq. 9) with blocked paths, entropic
  OT by log-domain Sinkhorn (Eq. 10, :func:`cirbench.method.ot.sinkhorn_log`), the soft label
  ``Y = gamma P + (1 - gamma) L`` (Eq. 11), the KL unlearning loss (Eq. 12), objective
  Eq. 13 after warm-up. The robust contrastive loss (Eq. 4) runs throughout.

Similarity everywhere a composed feature meets a target is the BLIP-2 max over target
tokens (:func:`max_token_similarity`); between two composed features (``F_c`` vs ``F_neg``)
it is the cosine of the whole vectors. Inference is the plain composed query, as in SPRC.

Where the paper is ambiguous or disagrees with the released code (all documented in
``docs/conesep.md``): Eq. 3 as printed and the release's fidelity are both available
(``fidelity_variant``); how NBL's gradient flows and how the negative prompt starts
(``nbl_gradient``, ``negative_init``); Eq. 7 is used as printed (interval ``[-alpha2, -alpha1]``); the
logits of Eq. 12 are the similarities as printed (``ul_temperature`` divides them by
``tau``; the release feeds ``[softmax(s / tau) | s(F_neg, F_t)^T]`` instead, ``ul_loss``);
the OT plan is row-normalised before mixing with ``L`` (as in the release) so
``Y`` is a distribution, and, unlike the release, ``Y`` is not passed through another
softmax (``label_softmax``).

Every place where the release computes something else is a switch (late fields, defaults
the paper's), and ``ConeSepConfig.release_readings`` turns them all on
(``--set conesep.readings=release``): under it the port equals the release on every term
``benchmarks/parity/conesep.py`` compares (``docs/conesep.md``, "Where we differ from the
release"). The features-to-loss computations are functions of ``methods/_conesep_math.py``
(``target_term``, ``query_term``, ``unlearning_terms``, ``boundary_similarity``, ...), re-exported
here, that both :meth:`ConeSep.loss_terms` and the parity adapter call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from cirbench.backbones.base import Backbone, TextBatch, max_token_similarity
from cirbench.settings.config import late_field
from cirbench.method import Batch, Method, MethodConfig, StepOutput, TrainingContext, frozen_parameters
from cirbench.method.search import Distribution, LogUniform, Uniform
from cirbench_methods._conesep_math import (  # the math, re-exported: tests and the parity adapter read it here
    FidelityVariant, RankingLoss, TargetMatrix, BoundarySampling, NBLGradient, NegativeInit,
    InterLoss, OTCost, NegativeColumn, ULLoss, NBLRows, QueryCosine,
    QueryInterval, BoundaryEstimate, RELEASE_QUERY_INTERVAL, sample_images, fidelity_eq3, fidelity_release,
    boundary_similarity, sample_fidelity, partition, target_matrix, target_oriented_loss, query_oriented_loss,
    nbl_rows, query_term, target_term, unlearning_mask, hard_label, unlearning_cost,
    transport_plan, mixed_label, soft_label, unlearning_loss, unlearning_terms, ranking_term,
)


RELEASE_WARMUP_SHARE = 2 / 12
"""The release's NBL warm-up: 2 of its 12 epochs."""


# Negated phrasings for the negative branch's text when it has no prompt of its own
# (``negative_prompt = False``) or when ``negation_template`` asks for them, as the release does.
NEGATION_TEMPLATES: tuple[str, ...] = (
    "the image does not show",
    "there is no",
    "the picture lacks",
    "the scene contains no",
    "nothing in the image shows",
    "the image is without",
)


@dataclass
class ConeSepConfig(MethodConfig):
    """ConeSep's hyperparameters (paper names, Section 4.1 defaults) and ablation switches.

    Hyperparameters: ``K`` random samples for the boundary, temperature ``tau``, fidelity
    threshold ``omega``, OT/hard-label balance ``gamma``, loss weights ``zeta`` (L_intra),
    ``nu`` (L_inter), ``kappa`` (L_ul), ``warmup_epochs`` (the paper's N; not given in the
    paper; None = the release's share of the run, 2 of its 12 epochs, rounded: 2 of
    cirbench's 10), Sinkhorn ``epsilon``, ``sinkhorn_iterations`` and the early
    stop ``sinkhorn_tol`` on the relative row-marginal error (0.03, 100 and 1e-4 as in the
    release, which stops on a 1e-4 change of its potentials; the paper gives none and says
    Sinkhorn converges in 10-20 iterations).

    ``fidelity_variant``: ``eq3`` = Eq. 3 as printed, ``F = x^2 (x - 1)`` with
    ``x = relu(s - B)``, clean iff ``F >= omega``; ``release`` = the public code, ``x``
    divided by the batch maximum, ``f = x^2 (1 - x^2)``, and the ``int(omega * batch)``
    lowest-fidelity samples of every batch flagged noisy (``omega`` is then a share).

    Ablations (Table 3 rows in brackets; all True / ``paper`` / ``gaussian`` is the full
    method): ``random_reference`` [2], ``random_target`` [1], ``random_text`` [3] (off: real
    batch values in the boundary estimate), ``boundary`` [4] (off: B = 0), ``fidelity`` [5]
    (off: the margin ``x`` itself is the fidelity), ``target_matrix`` [6-8] (T all ones,
    all minus ones, all zeros), ``query_loss`` [9] (L_intra), ``negative_prompt`` [10] (off:
    the negative branch uses the shared query tokens and a negated text), ``target_loss``
    [6-8 at once] (no L_inter), ``ot_negative`` [11] (off: C- is a constant, so F_neg does
    not steer the plan), ``ot`` [12] (off: Y = L), ``unlearning`` [13] (L_ul), ``rcl`` [14] (L_robust);
    ``boundary_sampling`` (Tables 5-6) and ``K`` (Fig. 8). ``partition`` off keeps every
    sample clean (no GFQ at all: BTU then has no noisy rows to unlearn). The standard grid
    (:attr:`ConeSep.ablations`) switches one module off at a time. Not in the paper:
    ``ranking_loss = infonce`` puts InfoNCE in place of RCL (Eq. 4), a diagnostic that keeps
    every other part of ConeSep (RCL flattens the similarity matrix on ``shapes``; see
    ``docs/conesep.md``).

    Paper against release: ``nbl_gradient = prompt`` (the paper's Eq. 8: NBL's losses, and
    anything else through ``F_neg``, train the negative prompt alone; the targets in Eq. 6
    and ``F_c`` in Eq. 7 are constants) or ``all`` (the release: through the shared
    composer, the targets and ``F_c`` too); ``negative_init = random`` (an independent
    draw with the query tokens' standard deviation; the paper gives none) or ``copy`` (the
    release: a copy of the query tokens); ``ul_temperature`` (off: Eq. 12's logits as they
    are, the similarities as printed; on: divided by ``tau``, conesep v1-v2's reading, a 14
    times stronger unlearning; the release divides nothing, but its logits are not the
    similarities: ``ul_loss``); ``label_softmax`` (on: the release's extra softmax of ``Y``,
    which flattens it towards uniform; off: ``Y`` as Eq. 11 gives it).

    The release's readings where it computes something else than the paper prints (late
    fields; ``docs/conesep.md``, "Where we differ from the release"; parity:
    ``benchmarks/parity/conesep.py``): ``inter_loss = release`` (Eq. 6 on the probabilities
    ``softmax(s(F_neg, F_t) / tau)``, each row summed, not averaged); ``ot_cost = release``
    (Eq. 9 as ``C+ = 1 - softmax(s / tau)``, ``C- = 1 - s(F_neg^j, F_t^i)``, the matrix
    divided by its maximum); ``negative_column = last`` (every noisy row's label, and the
    one path each clean row may not take, at column 2B - 1 instead of i + B);
    ``ul_loss = release`` (Eq. 12 on ``[softmax(s / tau) | s(F_neg, F_t)^T]``, averaged
    with a second KL over the transposed 2B x B matrix and its own plan). And:
    ``nbl_rows = all`` (Eq. 6-7 over every row, not the kept-clean ones);
    ``query_interval = release`` (Eq. 7's interval fixed at [-0.007, -0.002] and the
    hinge divided by ``tau``); ``query_cosine = release`` (the release's broadcasting
    defect: Eq. 7 on the per-dimension products ``F_c^i[e] F_neg^j[e]`` of every pair, not
    the cosine of row i's vectors); ``boundary_estimate = release`` (Eq. 2 from a batch of
    random images, texts drawn with replacement, averaged over all pairs, not ``K``
    paired samples). ``release_readings`` turns all of them on, with the release's other
    choices above (``--set conesep.readings=release``).
    """

    release_readings: ClassVar[dict[str, object]] = {
        # the four differences of issue 75
        "inter_loss": "release", "ot_cost": "release", "negative_column": "last", "ul_loss": "release",
        # the release's other readings and defects
        "nbl_rows": "all", "query_interval": "release", "query_cosine": "release", "boundary_estimate": "release",
        "label_softmax": True, "nbl_gradient": "all", "negative_init": "copy", "negation_template": True,
        "zeta": 0.8, "sinkhorn_tol": 0.0,
        # already the release's by default
        "fidelity_variant": "release", "ul_temperature": False, "warmup_epochs": None, "nu": 0.5, "kappa": 0.5,
    }

    search_space: ClassVar[dict[str, Distribution]] = {
        **MethodConfig.search_space, "omega": Uniform(0.25, 0.75), "tau": LogUniform(0.01, 0.1),
    }

    K: int = 4
    tau: float = 0.07
    omega: float = 0.5
    gamma: float = 0.7
    zeta: float = 0.5
    nu: float = 0.5
    kappa: float = 0.5
    warmup_epochs: int | None = None
    epsilon: float = 0.03
    sinkhorn_iterations: int = 100
    sinkhorn_tol: float = 1e-4
    fidelity_variant: FidelityVariant = "release"
    boundary_sampling: BoundarySampling = "gaussian"
    random_reference: bool = True
    random_target: bool = True
    random_text: bool = True
    boundary: bool = True
    fidelity: bool = True
    target_matrix: TargetMatrix = "paper"
    query_loss: bool = True
    negative_prompt: bool = True
    negation_template: bool = False
    ot_negative: bool = True
    ot: bool = True
    unlearning: bool = True
    rcl: bool = True
    partition: bool = True
    target_loss: bool = True
    ranking_loss: RankingLoss = "rcl"
    nbl_gradient: NBLGradient = "prompt"
    negative_init: NegativeInit = "random"
    ul_temperature: bool = False
    label_softmax: bool = False
    inter_loss: InterLoss = late_field("eq6")
    ot_cost: OTCost = late_field("eq9")
    negative_column: NegativeColumn = late_field("own")
    ul_loss: ULLoss = late_field("eq12")
    nbl_rows: NBLRows = late_field("clean")
    query_cosine: QueryCosine = late_field("vector")
    query_interval: QueryInterval = late_field("batch")
    boundary_estimate: BoundaryEstimate = late_field("eq2")

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = {
            "K": self.K >= 1, "tau": self.tau > 0, "gamma": 0.0 <= self.gamma <= 1.0,
            "zeta": self.zeta >= 0, "nu": self.nu >= 0, "kappa": self.kappa >= 0,
            "warmup_epochs": self.warmup_epochs is None or self.warmup_epochs >= 0, "epsilon": self.epsilon > 0,
            "sinkhorn_iterations": self.sinkhorn_iterations >= 1, "sinkhorn_tol": self.sinkhorn_tol >= 0,
            "omega": self.fidelity_variant != "release" or 0.0 <= self.omega <= 1.0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"conesep: invalid value for {', '.join(bad)} ({', '.join(f'{b}={getattr(self, b)!r}' for b in bad)})")
        choices = {
            "fidelity_variant": ("eq3", "release"), "target_matrix": ("paper", "ones", "minus_ones", "zeros"),
            "boundary_sampling": ("gaussian", "uniform", "laplace", "empirical"), "ranking_loss": ("rcl", "infonce"),
            "nbl_gradient": ("prompt", "all"), "negative_init": ("random", "copy"),
            "inter_loss": ("eq6", "release"), "ot_cost": ("eq9", "release"), "negative_column": ("own", "last"),
            "ul_loss": ("eq12", "release"), "nbl_rows": ("clean", "all"), "query_cosine": ("vector", "release"),
            "query_interval": ("batch", "release"), "boundary_estimate": ("eq2", "release"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"conesep: {name}={getattr(self, name)!r} is not one of {', '.join(allowed)}")


# ----------------------------------------------------------------------------- the method


class ConeSep(Method):
    """ConeSep: GFQ partition, NBL warm-up, BTU unlearning (see the module docstring)."""

    name = "conesep"
    version = "3"
    paper = "Li et al., ConeSep: Cone-based Robust Noise-Unlearning Compositional Network for CIR, CVPR 2026"
    Config = ConeSepConfig
    partitions = True
    ablations = {  # one module off each (Table 3's groups G1-G3 and D#14); docs/conesep.md
        "no_gfq": {"partition": False},
        "no_nbl": {"negative_prompt": False, "query_loss": False, "target_loss": False},
        "no_btu": {"unlearning": False},
        "no_rcl": {"rcl": False},
    }
    ablation_noise = (0.2,)  # Sec. 4.3: "all ablation studies ... under a noise rate of 0.2"

    def __init__(self, backbone: Backbone, config: ConeSepConfig, context: TrainingContext) -> None:
        super().__init__(backbone, config, context)
        self.generator = torch.Generator(device=context.device)
        self.generator.manual_seed(int(context.seed) + 104729)
        if config.negative_prompt:
            queries = backbone.query_tokens.detach()
            if config.negative_init == "copy":
                start = queries.clone()
            else:
                noise = torch.randn(queries.shape, generator=self.generator, device=self.generator.device)
                start = noise.to(queries.device, queries.dtype) * queries.std()
            self.negative_prompt = nn.Parameter(start)
        self.warmup = (
            round(RELEASE_WARMUP_SHARE * context.epochs) if config.warmup_epochs is None else config.warmup_epochs
        )

    # --- features

    def negative_queries(self) -> torch.Tensor:
        """The negative branch's query tokens: the learnable negative prompt, or the
        backbone's own query tokens for the "w/o neg-prompt" ablation."""
        return self.negative_prompt if self.config.negative_prompt else self.backbone.query_tokens

    def negative_text(self, batch: Batch) -> TextBatch:
        """The negative branch's text: the batch's, or each text behind a negated phrase."""
        if self.config.negative_prompt and not self.config.negation_template:
            return batch.text
        pick = torch.randint(len(NEGATION_TEMPLATES), (len(batch),), generator=self.generator, device=self.generator.device)
        texts = [f"{NEGATION_TEMPLATES[k]} {t}" for k, t in zip(pick.tolist(), batch.texts)]
        return self.backbone.tokenize(texts).to(batch.reference.device)

    def composed_and_negative(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """F_c and F_neg (B, E) each: one composer pass over the doubled batch, or, when NBL
        trains the negative prompt alone, a second pass with the composer's weights frozen."""
        size = len(batch)
        negative_queries = self.backbone.expand_queries(size, self.negative_queries())
        if self.config.nbl_gradient == "prompt":
            composed = self.backbone.composed_feature(batch.reference, batch.text)
            with frozen_parameters(self.backbone.trainable_parameters()):
                negative = self.backbone.composed_feature(batch.reference, self.negative_text(batch), queries=negative_queries)
            return composed, negative
        queries = torch.cat([self.backbone.expand_queries(size), negative_queries])
        texts = TextBatch.cat([batch.text, self.negative_text(batch)])
        both = self.backbone.composed_feature(torch.cat([batch.reference, batch.reference]), texts, queries=queries)
        return both[:size], both[size:]

    # --- GFQ

    def _indices(self, size: int, count: int, device: torch.device) -> torch.Tensor:
        if count <= size:
            return torch.randperm(size, generator=self.generator, device=self.generator.device)[:count].to(device)
        return torch.randint(size, (count,), generator=self.generator, device=self.generator.device).to(device)

    @torch.no_grad()
    def estimate_boundary(self, batch: Batch) -> float:
        """Eq. 2: the mean similarity of ``K`` compositions of random references and batch
        texts to random targets (or real batch values where an ablation switches one off;
        ``empirical`` = independently shuffled real references, texts and targets).
        ``boundary_estimate = release``: as many samples as the batch has, texts drawn with
        replacement, and the mean over all pairs (:func:`boundary_similarity`)."""
        cfg, size, device = self.config, len(batch), batch.reference.device
        release = cfg.boundary_estimate == "release"
        count = size if release else cfg.K

        def text_indices() -> torch.Tensor:
            if release:  # the release's random.choice for each sample
                return torch.randint(size, (count,), generator=self.generator, device=self.generator.device).to(device)
            return self._indices(size, count, device)

        idx = self._indices(size, count, device)
        if cfg.boundary_sampling == "empirical":
            reference = batch.reference[self._indices(size, count, device)]
            target = batch.target[self._indices(size, count, device)]
            text = batch.text.select(text_indices())
        else:
            shape, gen_device = tuple(self.backbone.image_shape), self.generator.device

            def random_tokens() -> torch.Tensor:
                images = sample_images(cfg.boundary_sampling, count, shape, self.generator, gen_device)
                return self.backbone.encode_image_tokens(images.to(device))

            reference = random_tokens() if cfg.random_reference else batch.reference[idx]
            target = random_tokens() if cfg.random_target else batch.target[idx]
            text = batch.text.select(text_indices() if cfg.random_text else idx)
        composed = self.backbone.composed_feature(reference, text)
        targets = self.backbone.target_features(target)
        return float(boundary_similarity(composed, targets, cfg.boundary_estimate))

    def fidelity_scores(self, sim_diag: torch.Tensor, boundary: float) -> torch.Tensor:
        """Eq. 3 (or the release's variant) for each sample of the batch."""
        return sample_fidelity(sim_diag, boundary, self.config)

    # --- the step

    def loss_terms(self, batch: Batch, epoch: int) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, dict[str, float]]:
        """The unweighted loss terms of ``epoch``'s objective (Eq. 8 in the warm-up, Eq. 13
        after it), the batch's kept-clean flags, its fidelity and diagnostics to log."""
        cfg = self.config
        composed, negative = self.composed_and_negative(batch)
        targets = self.backbone.target_features(batch.target)
        sim = max_token_similarity(composed, targets)
        neg_sim = max_token_similarity(negative, targets)
        nbl_sim, nbl_composed = neg_sim, composed  # what Eq. 6 and 7 compare F_neg with
        if cfg.nbl_gradient == "prompt":
            nbl_sim, nbl_composed = max_token_similarity(negative, targets.detach()), composed.detach()
        boundary = self.estimate_boundary(batch) if cfg.boundary else 0.0
        fidelity = self.fidelity_scores(sim.diagonal().detach(), boundary)
        clean = partition(fidelity, cfg.omega, cfg.fidelity_variant) if cfg.partition else torch.ones_like(fidelity, dtype=torch.bool)

        none = sim.sum() * 0.0  # a disabled term: zero, but attached to the graph
        parts = {
            "robust": ranking_term(sim, cfg) if cfg.rcl else none,
            "intra": query_term(nbl_composed, negative, clean, cfg) if cfg.query_loss else none,
        }
        if epoch < self.warmup:
            parts["inter"] = target_term(nbl_sim, clean, cfg) if cfg.target_loss else none
        elif cfg.unlearning:
            parts["ul"] = unlearning_terms(sim, neg_sim, composed, negative, clean, cfg)["ul"]
        else:
            parts["ul"] = none
        diagnostics = {
            "boundary": boundary, "clean_share": float(clean.float().mean()),
            "cos_query_negative": float((composed * negative).sum(-1).mean().detach()),
        }
        return parts, clean, fidelity, diagnostics

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        cfg = self.config
        parts, clean, fidelity, diagnostics = self.loss_terms(batch, epoch)
        if "inter" in parts:
            loss = parts["robust"] + cfg.zeta * parts["intra"] + cfg.nu * parts["inter"]
        else:
            loss = parts["robust"] + cfg.kappa * parts["ul"] + cfg.zeta * parts["intra"]
        components = {k: float(v.detach()) for k, v in parts.items()}
        components.update(diagnostics)
        return StepOutput(loss, components, noise_score=-fidelity, selected_clean=clean)
