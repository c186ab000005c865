"""ConeSep's parity adapter: ``Lee-zixu/ConeSep``'s ``ConeSep.forward`` against
``methods/conesep.py``, on seeded float64 features (the harness contract:
``benchmarks/parity/harness.py``).

The release computes every loss inline in ``forward``. The adapter builds the release's
``ConeSep`` with ``object.__new__`` and gives it fake encoders: the vision tower and
``ln_vision`` return their input, ``text_proj`` and ``vision_proj`` are identities, the
tokenizer returns fixed ids, and the Q-Former's ``bert`` returns the seeded features by what
it is called with (the composed feature ``F_c`` for the query tokens with the reference, the
negative composition ``F_neg`` for the negative tokens, the target tokens ``F_t`` for the
target, and, in the BTU branch, the boundary's composed features and target tokens for the
two Gaussian images ``torch.randn`` draws there). ``forward`` then runs twice, as the
release's ``train.py`` calls it: with ``if_negative=True`` (the NBL warm-up: RCL, Eq. 6, Eq. 7)
and ``False`` (GFQ + BTU: boundary, fidelity, partition, Eq. 9-12), every loss weight 1.
What ``forward`` keeps local is read by wrapping the module's own functions for the call:
``fidelity_measure`` (the fidelity and the boundary it is given),
``sinkhorn_log_domain_torch`` (cost, mask and plan of each direction) and the model's
``kl_loss`` (each direction's label and loss). The partition is the mask's diagonal (a
noisy row cannot reach its own target).

The Sinkhorn solvers see the same cost and mask and make the same updates (log-domain,
rows then columns, uniform marginals; the release's ``-1e6`` on a blocked path is an exact
zero in float64, as the port's ``-inf``), but stop by different rules: the release once the
row potentials change by less than ``thresh = 1e-4`` in total, ``cirbench.method.ot.sinkhorn_log``
once every row marginal is within ``sinkhorn_tol`` (checked every 10 iterations), and
``cirbench.method.ot`` has no potential-based stop. The adapter calls the release's solver with
``thresh=0`` and the port's release readings set ``sinkhorn_tol = 0``: both run the
release's cap of 100 iterations and the plans agree to about 1e-9. At the shipped stops
they differ by up to 3.3e-5 per entry on these inputs (plans of entries up to 1/16), 3e-5
in the labels and 1.5e-6 in the KL (``NOT_COMPARABLE["sinkhorn stop"]``).

Randomness: the release draws Gaussian images (``torch.randn``) for the boundary and picks
texts with ``random.choice``; both reach only the fake encoders, which ignore them, so the
boundary's features are inputs (``boundary_composed``, ``boundary_targets``, one per sample
of the batch, as the release draws a batch of them). ``random`` is seeded for the call.

The port's side is its own code on the same features: :func:`methods.conesep.nbl_terms`
and :func:`methods.conesep.unlearning_terms` (what ``ConeSep.loss_terms`` calls),
``boundary_similarity`` (what ``ConeSep.estimate_boundary`` averages), the fidelity and
the partition, under ``build_config(ConeSepConfig, {"readings": readings})``.
"""

from __future__ import annotations

import random
import types
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cirbench.backbones.base import max_token_similarity
from cirbench.settings.config import build_config
from cirbench_methods import conesep as port

from . import harness

RELEASE = harness.Release(
    repo="Lee-zixu/ConeSep",
    files={
        "lavis/models/blip2_models/ConeSep.py": "34-96,202-449",
        "train.py": "40-43,135,165-173",
    },
    commit="8f9ff15ae497a57f580f8ff484714b71763ae115",
)
SEED = 0
BATCH, TOKENS, EMBED = 8, 4, 16
OMEGA = 0.5
"""The release's ``--negative_sample`` default (the share flagged noisy)."""

NOT_COMPARABLE = {
    "boundary draws": "the release draws a batch of Gaussian images and texts with replacement and runs them "
                      "through the tower (weights); the adapter feeds the resulting features, so only the "
                      "boundary's aggregation is compared (the port draws them under boundary_estimate=release)",
    "negative text": "the release prepends one of its 25 negated phrases to the caption; the text reaches only the "
                     "tower (port: negation_template, its own phrases)",
    "negative prompt start and gradient routing": "prompt_load copies the query tokens; every loss reaches the "
                                                  "Q-Former: parameters and autograd, not a value of these features "
                                                  "(port: negative_init=copy, nbl_gradient=all)",
    "sinkhorn stop": "the release stops once its row potentials change by < 1e-4 in total, cirbench.method.ot.sinkhorn_log "
                     "on the row marginals every 10 iterations; compared at the release's 100-iteration cap "
                     "(release thresh=0, port sinkhorn_tol=0); at the shipped stops the plans differ by up to 3.3e-5",
    "loss weights and schedule": "train.py: 2 warm-up epochs of 12, weights 0.5 (Eq. 6), 0.8 (Eq. 7), 0.5 (Eq. 12): "
                                 "the training loop, not a term (port: warmup_epochs, nu, zeta, kappa)",
}


def make_inputs(seed: int) -> dict[str, torch.Tensor]:
    """Unit composed and negative features (B, E), unit target tokens (B, Q, E), and the
    boundary's composed features and target tokens of the release's B random images."""
    g = harness.generator(seed)
    return {
        "composed": harness.unit(g, BATCH, EMBED),
        "negative": harness.unit(g, BATCH, EMBED),
        "targets": harness.unit(g, BATCH, TOKENS, EMBED),
        "boundary_composed": harness.unit(g, BATCH, EMBED),
        "boundary_targets": harness.unit(g, BATCH, TOKENS, EMBED),
    }


# ----------------------------------------------------------------------------- the release


def load(release_dir: Path) -> types.ModuleType:
    stubs = [*harness.LAVIS_STUBS, "sklearn.cluster"]
    return harness.load_release_module(release_dir, "lavis/models/blip2_models/ConeSep.py", stubs=stubs,
                                       real=harness.lavis_stand_ins(), name="_release_conesep")


def _fake_model(module: types.ModuleType, inputs: dict[str, torch.Tensor]) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The release's model with fake encoders returning ``inputs`` (see the module docstring),
    and the reference and target "images" it is to be called with."""
    model = object.__new__(module.ConeSep)
    nn.Module.__init__(model)
    size = inputs["composed"].shape[0]
    hidden = 33  # the release reads the composed feature at position 32 (after 32 query tokens)

    def at_32(feature: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(feature.shape[0], hidden, feature.shape[1], dtype=feature.dtype)
        out[:, 32] = feature
        return out

    reference = torch.zeros(size, 1, 1, dtype=torch.float64)
    target = torch.ones(size, 1, 1, dtype=torch.float64)
    model.query_tokens = nn.Parameter(torch.zeros(1, hidden, 1, dtype=torch.float64))
    model.negative_tokens = nn.Parameter(torch.zeros(1, hidden, 1, dtype=torch.float64))

    def bert(*text: Any, query_embeds: torch.Tensor, encoder_hidden_states: torch.Tensor, **_: Any) -> Any:
        from_image = encoder_hidden_states.dim() == 3  # the seeded images; torch.randn's are 4-D
        if query_embeds.data_ptr() == model.negative_tokens.data_ptr():
            state = at_32(inputs["negative"])
        elif text:
            state = at_32(inputs["composed"] if from_image else inputs["boundary_composed"])
        else:
            state = inputs["targets"] if from_image and bool((encoder_hidden_states == 1).all()) else inputs["boundary_targets"]
        return types.SimpleNamespace(last_hidden_state=state)

    model.tokenizer = lambda texts, **_: harness.Tokens.blank(len(texts), 3)
    model.visual_encoder = lambda image: image
    model.ln_vision = lambda embeds: embeds
    model.Qformer = types.SimpleNamespace(bert=bert)
    model.text_proj = nn.Identity()
    model.vision_proj = nn.Identity()
    model.device = torch.device("cpu")
    model.temp = 0.07
    model.max_txt_len = 32
    model.no_text = ["the image does not show"]
    return model, {"image": reference, "target": target, "text_input": [f"caption {i}" for i in range(size)]}


def release_terms(release_dir: Path, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The release's terms on ``inputs`` (the module docstring says how they are read)."""
    module = load(Path(release_dir))
    model, samples = _fake_model(module, inputs)
    seen: dict[str, Any] = {"sinkhorn": [], "kl": []}
    fidelity_measure, sinkhorn = module.fidelity_measure, module.sinkhorn_log_domain_torch

    def record_fidelity(x: torch.Tensor, boundary_estimation: float) -> torch.Tensor:
        seen["boundary"] = torch.tensor(boundary_estimation, dtype=torch.float64)
        seen["fidelity"] = fidelity_measure(x, boundary_estimation=boundary_estimation)
        return seen["fidelity"]

    def record_sinkhorn(p: torch.Tensor, q: torch.Tensor, C: torch.Tensor, Mask: torch.Tensor) -> torch.Tensor:
        plan = sinkhorn(p, q, C, Mask=Mask, thresh=0.0)  # to its 100-iteration cap (module docstring)
        seen["sinkhorn"].append((C, Mask, plan))
        return plan

    kl = nn.KLDivLoss(reduction="batchmean")

    def record_kl(log_probs: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        value = kl(log_probs, label)
        seen["kl"].append((label, value))
        return value

    model.kl_loss = record_kl
    module.fidelity_measure, module.sinkhorn_log_domain_torch = record_fidelity, record_sinkhorn
    random.seed(SEED)
    weights = dict(omega=OMEGA, target_forgetting_loss_weight=1.0, target_oriented_weight=1.0, query_oriented_weight=1.0)
    try:
        with harness.on_cpu(), torch.no_grad():
            nbl = model.forward(samples, "cpu", True, **weights)
            btu = model.forward(samples, "cpu", False, **weights)
    finally:
        module.fidelity_measure, module.sinkhorn_log_domain_torch = fidelity_measure, sinkhorn
    (cost, mask, plan), (cost_t, mask_t, plan_t) = seen["sinkhorn"]
    (label, ul_forward), (label_t, ul_transposed) = seen["kl"]
    return {
        "robust": nbl["loss_robust"],
        "inter": nbl["targe_oriented_learning"],
        "intra": nbl["query_oriented_learning"],
        "boundary": seen["boundary"],
        "fidelity": seen["fidelity"],
        "clean": mask.diagonal()[:BATCH].ne(0),
        "ot_cost": cost,
        "ot_blocked": mask.eq(0),
        "ot_plan": plan,
        "label": label,
        "ul_forward": ul_forward,
        "ot_cost_t": cost_t,
        "ot_blocked_t": mask_t.eq(0),
        "ot_plan_t": plan_t,
        "label_t": label_t,
        "ul_transposed": ul_transposed,
        "ul": btu["loss_ul"],
    }


# ----------------------------------------------------------------------------- the port


def port_terms(inputs: dict[str, torch.Tensor], readings: str) -> dict[str, torch.Tensor]:
    """The port's terms on ``inputs`` under ``readings`` (``release`` or ``paper``), from the
    functions ``ConeSep.loss_terms`` and ``ConeSep.estimate_boundary`` call."""
    cfg = build_config(port.ConeSepConfig, {"readings": readings, "omega": str(OMEGA)}, "conesep")
    composed, negative, targets = inputs["composed"], inputs["negative"], inputs["targets"]
    sim = max_token_similarity(composed, targets)
    neg_sim = max_token_similarity(negative, targets)
    boundary = port.boundary_similarity(inputs["boundary_composed"], inputs["boundary_targets"], cfg.boundary_estimate)
    fidelity = port.sample_fidelity(sim.diagonal(), float(boundary), cfg)
    clean = port.partition(fidelity, cfg.omega, cfg.fidelity_variant)
    terms = {
        "robust": port.ranking_term(sim, cfg),
        "inter": port.target_term(neg_sim, clean, cfg),
        "intra": port.query_term(composed, negative, clean, cfg),
        "boundary": boundary,
        "fidelity": fidelity,
        "clean": clean,
    }
    terms.update(port.unlearning_terms(sim, neg_sim, composed, negative, clean, cfg))
    return terms
