"""HUG's parity adapter: ``tanghme0w/AAAI26-HUG``'s training step and retrieval distance
against ``methods/hug.py``, on seeded float64 features (the harness contract:
``benchmarks/parity/harness.py``).

The release's losses are modules (``modules/losses.py``) fed by ``HUGModel.forward``
(``models/hug_model.py``) inside ``train_one_epoch`` (``train.py``), which also draws the
mismatched texts of the coordination loss. The adapter runs ``train_one_epoch`` itself on one
batch: the model is the release's ``HUGModel`` built with ``object.__new__``, its own
``forward``/``extract_query_components``/``extract_target_features`` and its own
``DynamicWeighting``, with a fake BLIP-2 backbone that returns seeded Q-Former states by what
it is called with (the reference's and the target's image-only pass, the text-only pass, and
the fused pass of every (reference, text) pair: the mismatched pairs included) and three small
stand-in uncertainty heads (``softplus(x W + c)``, the same modules on both sides; the
release's head architecture is compared on its own, ``uncertainty_head``). The criterion is
the release's ``HUGLoss`` (λ_FC 0.5, λ_Cord 0.1, ``a`` 1, ``b`` 0, τ 0.07), wrapped to keep
what it returns. What the release keeps local is read without changing it: the distance
matrix with its own ``uncertainty_aware_distance`` per pair (as ``HolisticContrastiveLoss``
loops), each of ``FineGrainedContrastiveLoss``'s cross-entropies through a recording
``F.cross_entropy`` (the component-wise ones (B, K) and the in-batch ones (K,)), the dynamic
weights with ``DynamicWeighting.get_weights``, the mismatched texts from the fake backbone's
calls; the retrieval distance is ``eval.compute_distance_matrix`` on ``encode_query`` and
``encode_target``.

Randomness: the mismatched texts, ``torch.randperm(B)`` in ``train_one_epoch``. The adapter
seeds torch with ``SEED`` before it and before the port's training step; under
``cord_permutation=randperm`` the port's first draw is the same ``torch.randperm(B)``.

Precision: the release allocates its distance matrices and ``a``, ``b`` at torch's default
dtype (float32); the adapter runs it with float64 as the default, so the comparison is of the
computations, not of float32 rounding.

The port's side is its own ``HUG`` (``methods/hug.py``) built on a fake backbone returning
the same states, with the same stand-in heads: ``training_step`` (its ``hc``, ``fc``,
``cord`` and the weighted total), ``variances`` (the dynamic weights and the combined
standard deviation), ``means`` and ``expected_distance`` as ``losses`` calls them,
:func:`methods.hug.fine_grained_release_parts`, :func:`methods.hug.mismatched_pairs`, and
``encode_queries``/``encode_targets``/``similarity`` for retrieval, under
``build_config(HUGConfig, {"readings": readings})``.
"""

from __future__ import annotations

import contextlib
import io
import sys
import types
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cirbench.backbones.base import ComposerOutput, TextBatch
from cirbench.settings.config import build_config
from cirbench.method import Batch, TrainingContext
from cirbench_methods import hug as port

from . import harness

RELEASE = harness.Release(
    repo="tanghme0w/AAAI26-HUG",
    files={
        "modules/losses.py": "18-330",
        "modules/dynamic_weighting.py": "13-106",
        "models/hug_model.py": "88-257",
        "models/uncertainty_head.py": "14-67",
        "train.py": "158-255,300-304",
        "eval.py": "341-386",
    },
    commit="a80270c9114c32909121f2bfee2b6dc7a1de1a35",
)
SEED = 0
BATCH, COMPONENTS, HIDDEN = 4, 3, 8
"""Batch 4, 3 Gaussian components (query tokens), 8 hidden dimensions (the release's double
loops stay fast; 8 is divisible by the heads' 4 attention heads)."""
HEADS = ("visual", "text", "multimodal")

NOT_COMPARABLE = {
    "Q-Former states": "the release's BLIP-2 passes need its weights; its text-only pass is the CLS state of a "
                       "text pass without query tokens, copied to all 32 components (blip_backbone.py), where the "
                       "port's text head reads a text-only composer pass with its query tokens (the backbone "
                       "interface); the adapter feeds the states both sides read",
    "which parameters learn": "the release extracts every state under torch.no_grad() and never gives a, b to its "
                              "optimiser, so only the three heads learn: parameters and autograd, not a value "
                              "(port: freeze_means=true, learn_scale=false, under readings=release)",
    "head dropout masks": "random per call in training mode; the stand-in heads have none and uncertainty_head is "
                          "compared in eval mode (port: head_dropout=0.1 is the release's rate)",
    "optimiser and schedule": "AdamW eps 1e-8 (the torch default; the paper prints 1e-7), lr 3e-5 cosine to 1e-6 "
                              "per epoch over 30 epochs: the training loop, not a term (port: eps=1e-8 under "
                              "readings=release; the rate and schedule are the harness's)",
    "noise score": "the release computes none (the port's noise_score is the coordination head's mean variance "
                   "of the matched pass, docs/hug.md)",
}


def _head_shapes() -> dict[str, torch.Size]:
    return {k: v.shape for k, v in port.UncertaintyHead(HIDDEN, HIDDEN, 4, 0.0).state_dict().items()}


def make_inputs(seed: int) -> dict[str, torch.Tensor]:
    """Q-Former states (B, K, H) of the reference's and the target's image-only passes and of
    the text-only pass, of the fused pass of every (reference i, text j) pair (B, B, K, H),
    the stand-in heads' weights, and the weights and input of one uncertainty head."""
    g = harness.generator(seed)
    inputs = {
        "reference_states": 0.3 * harness.randn(g, BATCH, COMPONENTS, HIDDEN),
        "target_states": 0.3 * harness.randn(g, BATCH, COMPONENTS, HIDDEN),
        "text_states": 0.3 * harness.randn(g, BATCH, COMPONENTS, HIDDEN),
        "fused_states": 0.3 * harness.randn(g, BATCH, BATCH, COMPONENTS, HIDDEN),
    }
    for name in HEADS:
        inputs[f"{name}_weight"] = harness.randn(g, HIDDEN, HIDDEN)
        inputs[f"{name}_bias"] = harness.randn(g, HIDDEN) - 1.0
    for key, shape in _head_shapes().items():
        inputs[f"head.{key}"] = 0.3 * harness.randn(g, *shape)
    inputs["head_input"] = harness.randn(g, BATCH, COMPONENTS, HIDDEN)
    return inputs


class StandInHead(nn.Module):
    """An uncertainty head of the parity run: ``softplus(x W + c)``, one standard deviation
    per component and dimension, the same module on both sides."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        self.weight, self.bias = nn.Parameter(weight.clone()), nn.Parameter(bias.clone())

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return F.softplus(states @ self.weight + self.bias)


def _heads(inputs: dict[str, torch.Tensor]) -> dict[str, StandInHead]:
    return {name: StandInHead(inputs[f"{name}_weight"], inputs[f"{name}_bias"]) for name in HEADS}


def _states(inputs: dict[str, torch.Tensor], image: torch.Tensor | None, text: torch.Tensor | None) -> torch.Tensor:
    """The seeded states of a pass: images are ids (references 0..B-1, targets B..2B-1),
    texts ids 0..B-1."""
    if image is None:
        return inputs["text_states"][text]
    if text is None:
        return torch.where((image < BATCH).view(-1, 1, 1), inputs["reference_states"][image.clamp(max=BATCH - 1)],
                           inputs["target_states"][(image - BATCH).clamp(min=0)])
    return inputs["fused_states"][image, text]


# ----------------------------------------------------------------------------- the release


def _release_modules(release_dir: Path) -> dict[str, types.ModuleType]:
    import tqdm  # noqa: F401  (imported once here: the stubs' restore of sys.modules must not re-import it)
    import yaml  # noqa: F401

    losses = harness.load_release_module(release_dir, "modules/losses.py", name="_release_hug_losses")
    weighting = harness.load_release_module(release_dir, "modules/dynamic_weighting.py", name="_release_hug_weighting")
    head = harness.load_release_module(release_dir, "models/uncertainty_head.py", name="_release_hug_head")
    model = harness.load_release_module(
        release_dir, "models/hug_model.py",
        ["models", "models.blip_backbone", "models.uncertainty_head", "modules", "modules.dynamic_weighting"],
        name="models.hug_model")
    package = types.ModuleType("modules")
    package.HUGLoss, package.uncertainty_aware_distance = losses.HUGLoss, losses.uncertainty_aware_distance
    package.CIRMetrics = None  # eval.py imports it; compute_distance_matrix does not use it
    stubs = ["models", "modules", "data", "lavis", "lavis.processors", "transformers", "wandb"]
    path = list(sys.path)
    try:
        train = harness.load_release_module(release_dir, "train.py", stubs, {"modules": package}, name="_release_hug_train")
        evaluate = harness.load_release_module(release_dir, "eval.py", stubs, {"modules": package},
                                               name="_release_hug_eval")
    finally:
        sys.path[:] = path  # both scripts put ~/AAAI26-HUG/ref/LAVIS on the path
    return {"losses": losses, "weighting": weighting, "head": head, "model": model, "train": train, "eval": evaluate}


class _Backbone:
    """The release's ``BLIPBackbone`` as HUGModel calls it; records the texts of each fused pass."""

    def __init__(self, inputs: dict[str, torch.Tensor]) -> None:
        self.inputs, self.fused_texts = inputs, []

    def extract_image_features(self, pixel_values: torch.Tensor, query_embeds: Any = None) -> torch.Tensor:
        return _states(self.inputs, pixel_values.long(), None)

    def extract_text_features(self, input_ids: torch.Tensor, attention_mask: Any = None, query_embeds: Any = None):
        return _states(self.inputs, None, input_ids[:, 0])

    def extract_multimodal_features(self, pixel_values: torch.Tensor, input_ids: torch.Tensor,
                                    attention_mask: Any = None, query_embeds: Any = None) -> torch.Tensor:
        self.fused_texts.append(input_ids[:, 0].clone())
        return _states(self.inputs, pixel_values.long(), input_ids[:, 0])


def _release_model(modules: dict[str, types.ModuleType], inputs: dict[str, torch.Tensor]) -> nn.Module:
    model = object.__new__(modules["model"].HUGModel)
    nn.Module.__init__(model)
    model.num_queries, model.hidden_dim = COMPONENTS, HIDDEN
    model.blip_backbone = _Backbone(inputs)
    model.query_tokens = nn.Parameter(torch.zeros(1, COMPONENTS, HIDDEN))
    heads = _heads(inputs)
    model.visual_uncertainty_estimator = heads["visual"]
    model.text_uncertainty_estimator = heads["text"]
    model.multimodal_uncertainty_estimator = heads["multimodal"]
    model.dynamic_weighting = modules["weighting"].DynamicWeighting()
    return model


class _Recorder(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.calls = inner, []

    def forward(self, **kwargs: Any) -> dict:
        out = self.inner(**kwargs)
        self.calls.append((kwargs, out))
        return out


class _Bar(list):
    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass


class _Functional:
    """``torch.nn.functional`` with a ``cross_entropy`` that keeps each call's value."""

    def __init__(self) -> None:
        self.values: list[torch.Tensor] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(F, name)

    def cross_entropy(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        value = F.cross_entropy(*args, **kwargs)
        self.values.append((args[0].shape, value.detach()))
        return value


def _batch_tensors() -> dict[str, torch.Tensor]:
    return {"ref_images": torch.arange(BATCH, dtype=torch.float64),
            "target_images": torch.arange(BATCH, 2 * BATCH, dtype=torch.float64),
            "text_input_ids": torch.arange(BATCH).unsqueeze(1), "text_attention_mask": torch.ones(BATCH, 1).long()}


def release_terms(release_dir: Path, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The release's training step on one batch, its intermediate terms, its retrieval
    distance, and one uncertainty head."""
    modules = _release_modules(release_dir)
    terms: dict[str, torch.Tensor] = {}
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with harness.on_cpu():
            model = _release_model(modules, inputs)
            b = _batch_tensors()
            criterion = _Recorder(modules["losses"].HUGLoss(lambda_fc=0.5, lambda_cord=0.1))
            optimizer = types.SimpleNamespace(zero_grad=lambda: None, step=lambda: None)
            modules["train"].tqdm = lambda iterable, **kwargs: _Bar(iterable)
            functional = _Functional()
            modules["losses"].F = functional
            torch.manual_seed(SEED)
            modules["train"].train_one_epoch(model, [b], criterion, optimizer, torch.device("cpu"), 1,
                                             types.SimpleNamespace(use_wandb=False, log_interval=10))
            (kwargs, out), = criterion.calls
            terms.update(hc=out["loss_hc"], fc=out["loss_fc"], cord=out["loss_cord"], total=out["total_loss"])
            terms["mismatched_texts"] = model.blip_backbone.fused_texts[1]
            component = [v for shape, v in functional.values if shape[0] == 1]
            instance = [v for shape, v in functional.values if shape[0] == BATCH]
            terms["fc_component"] = torch.stack(component).view(COMPONENTS, BATCH).T
            terms["fc_instance"] = torch.stack(instance)
            distance = modules["losses"].uncertainty_aware_distance
            mu_q, sigma_q, mu_c, sigma_c = (kwargs[k].detach() for k in ("mu_q", "sigma_q", "mu_c", "sigma_c"))
            terms["distance"] = torch.tensor([[float(distance(mu_q[i:i + 1], sigma_q[i:i + 1], mu_c[j:j + 1],
                                                                sigma_c[j:j + 1])) for j in range(BATCH)]
                                              for i in range(BATCH)])
            with torch.no_grad():
                parts = model.extract_query_components(b["ref_images"], b["text_input_ids"], b["text_attention_mask"])
                weights = model.dynamic_weighting.get_weights(parts["sigma_r"], parts["sigma_t"], parts["sigma_m"])
                terms["dynamic_weights"] = torch.stack(weights)
                terms["query_std"] = parts["sigma_q"]
                q_mu, q_sigma = model.encode_query(b["ref_images"], b["text_input_ids"], b["text_attention_mask"])
                c_mu, c_sigma = model.encode_target(b["target_images"])
                modules["eval"].tqdm = lambda iterable, **kwargs: iterable
                with contextlib.redirect_stdout(io.StringIO()):  # it prints its progress
                    terms["retrieval_distance"] = modules["eval"].compute_distance_matrix(
                        {"query_mu": q_mu, "query_sigma": q_sigma, "target_mu": c_mu, "target_sigma": c_sigma},
                        torch.device("cpu"))
                head = modules["head"].UncertaintyEstimator(HIDDEN, 4, 0.1)
                head.load_state_dict({_release_key(k[len("head."):]): v for k, v in inputs.items() if k.startswith("head.")})
                terms["uncertainty_head"] = head.eval()(inputs["head_input"])
    finally:
        torch.set_default_dtype(previous)
    return {k: harness.as_tensor(v) for k, v in terms.items()}


def _release_key(key: str) -> str:
    """The release's name of a port head's parameter."""
    return key.replace("encoder.", "transformer_layer.", 1).replace("mlp.", "uncertainty_head.", 1)


# ----------------------------------------------------------------------------- the port


class _PortBackbone(nn.Module):
    """The backbone interface as HUG calls it, returning the seeded states."""

    def __init__(self, inputs: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.inputs = inputs
        self.hidden_size = self.embed_dim = HIDDEN
        self.num_query_tokens = COMPONENTS
        self.vision_proj = nn.Identity()

    def compose(self, image: torch.Tensor | None, text: TextBatch | None, queries: Any = None) -> ComposerOutput:
        ids = None if image is None else image[:, 0, 0].long()
        return ComposerOutput(_states(self.inputs, ids, None if text is None else text.ids[:, 0]), None)


def port_terms(inputs: dict[str, torch.Tensor], readings: str) -> dict[str, torch.Tensor]:
    """The port's training step on the same batch, its intermediate terms, its retrieval
    distance, and one uncertainty head."""
    config = build_config(port.HUGConfig, {"readings": readings}, "hug")
    context = TrainingContext(num_train=BATCH, epochs=1, batch_size=BATCH, steps_per_epoch=1, seed=SEED,
                              device=torch.device("cpu"), iterate=lambda shuffle=True: iter(()))
    method = port.HUG(_PortBackbone(inputs), config, context).double()
    heads = _heads(inputs)
    method.visual_head, method.text_head, method.multimodal_head = heads["visual"], heads["text"], heads["multimodal"]
    b = _batch_tensors()
    text = TextBatch(b["text_input_ids"], b["text_attention_mask"])
    batch = Batch(torch.arange(BATCH), b["ref_images"].view(-1, 1, 1), b["target_images"].view(-1, 1, 1), text,
                  [str(i) for i in range(BATCH)])
    torch.manual_seed(SEED)
    out = method.training_step(batch, 0, 0)
    terms = {k: torch.tensor(out.components[k], dtype=torch.float64) for k in ("hc", "fc", "cord")}
    terms["total"] = out.loss
    torch.manual_seed(SEED)
    terms["mismatched_texts"] = port.mismatched_pairs(BATCH, config.cord_pairs, "cpu", config.cord_permutation)[1]
    with torch.no_grad():
        fused = method.backbone.compose(batch.reference, text).query
        target = method.backbone.compose(batch.target, None).query
        v = method.variances(batch.reference, text, fused, None, target)
        mu_q, mu_c = method.means(fused), method.means(target)
        scale = method.variance_scale
        terms["distance"] = port.expected_distance(mu_q, v["q"] * scale, mu_c, v["c"] * scale)
        stacked = torch.stack([v["r"], v["t"], v["m"]])
        terms["dynamic_weights"] = port.modality_weights(stacked, config.dynamic_weighting, config.weighting_eps)
        terms["query_std"] = v["q"].sqrt()
        if config.fc_form == "release":  # the paper's Eq. 16 (the default) has no such parts
            component, instance = port.fine_grained_release_parts(v["q"].sqrt(), v["c"].sqrt(), config.fc_temperature)
            terms["fc_component"], terms["fc_instance"] = component, instance
        terms["retrieval_distance"] = -method.similarity(method.encode_queries(batch.reference, text),
                                                         method.encode_targets(batch.target))
        head = port.UncertaintyHead(HIDDEN, HIDDEN, 4, config.head_dropout).double()
        head.load_state_dict({k[len("head."):]: v for k, v in inputs.items() if k.startswith("head.")})
        terms["uncertainty_head"] = head.eval()(inputs["head_input"])
    return {k: harness.as_tensor(v) for k, v in terms.items()}
