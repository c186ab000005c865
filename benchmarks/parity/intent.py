"""INTENT against its release (``ZivChen-Ty/INTENT``): the Fourier amplitude mix, the CKA
consistency, ``loss_stu`` / ``loss_odl`` / ``loss_caco`` in and after the warm-up, the totals
and the warm-up's length.

The release's ``Blip2QformerCir.forward`` runs on an object built with ``object.__new__``
whose encoders are fakes shared with the port's side: the "visual encoder" is a seeded linear
map of the pixels to 4 tokens, the "Q-Former" a seeded map of those tokens to 33 hidden states
(the 32 query outputs, then the text position the release reads at 32; the text is ignored),
and ``text_proj``, ``vision_proj`` and ``text_proj_cau`` are ``Linear`` layers given the same
seeded weights on both sides (the port's ``backbone.text_proj``, ``target_features`` and
``INTENT.text_proj_cau``). So the intervened image goes through the same tower and composer on
both sides, and ``loss_caco`` compares what the mix produced, as in training.

The release draws each sample's mixing coefficient with ``torch.empty(1).uniform_(0, alpha)``
(the global generator); here ``uniform_`` hands out the seeded ``lam`` input in order, and the
port's ``INTENT.draw_lambdas`` returns the same ``lam``. The release builds its centring
matrix with ``torch.ones`` and ``torch.eye`` at the default dtype, so it runs with the default
dtype float64 (as the inputs are). The totals are what ``train_INTENT.py``'s ``train`` loop
hands its AMP scaler (``loss_stu + mu loss_odl [+ alpha loss_caco]``), a fake model returning
the release's own terms; the warm-up's length is its parser's ``--warm_up`` default.
"""

from __future__ import annotations

import contextlib
import sys
import types
import warnings
from pathlib import Path
from typing import Any, Iterator
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

from parity import harness

from cirbench.backbones.base import max_token_similarity
from cirbench.settings.config import build_config
from cirbench.method import Batch
from cirbench_methods.intent import INTENT, INTENTConfig, amplitude_mix, linear_cka, rcl_loss, warmup_length

RELEASE = harness.Release(
    repo="ZivChen-Ty/INTENT",
    files={"lavis/models/blip2_models/blip2_cir.py": "57-111, 305-328, 331-341, 343-366, 369-541",
           "train_INTENT.py": "48-57, 177-211"},
)
SEED = 0
B, C, H, W = 8, 3, 8, 8       # the batch and its images
P, D = 4, 6                   # the fake tower's tokens
HIDDEN, E, Q = 16, 8, 32      # the composer's width, the embedding, the query tokens (32 hard-coded)
HIDDEN_STATES = Q + 1         # the release reads the text output at position 32
RUN_EPOCHS = 2                # the harness's default run (release 4), for the warm-up's length

NOT_COMPARABLE = {
    "get_infodiscri": "computed every step (a fixed orthogonal projection, credibilities, fuzzy uncertainties) and "
                      "passed to get_discri_loss_retrieval, which ignores it: no term depends on it, and the port "
                      "does not compute it",
    "noise_score": "the port records 1 - r_ii as a per-sample score; the release records none (r enters loss_odl, "
                   "compared)",
}


def make_inputs(seed: int) -> dict[str, torch.Tensor]:
    g = harness.generator(seed)
    inputs = {
        # images in a normalised input space (about -2 to 2), as the release's loader hands them
        "reference": harness.randn(g, B, C, H, W),
        "target": harness.randn(g, B, C, H, W),
        "lam": torch.rand(B, generator=g, dtype=torch.float64),
        "tower": harness.randn(g, C * H * W, P * D) / (C * H * W) ** 0.5,
        "composer": harness.randn(g, HIDDEN_STATES, P * D, HIDDEN) / (P * D) ** 0.5,
        "text_proj_weight": harness.randn(g, E, HIDDEN) / HIDDEN ** 0.5,
        "text_proj_bias": 0.1 * harness.randn(g, E),
        "vision_proj_weight": harness.randn(g, E, HIDDEN) / HIDDEN ** 0.5,
        "vision_proj_bias": 0.1 * harness.randn(g, E),
        "cau_weight": harness.randn(g, E, HIDDEN) / HIDDEN ** 0.5,
        "cau_bias": 0.1 * harness.randn(g, E),
        # an odd-sized pair for the mix over the centred half of the spectrum (ratio 0.5)
        "reference_odd": harness.randn(g, 2, C, 7, 6),
        "target_odd": harness.randn(g, 2, C, 7, 6),
        "lam_odd": torch.rand(2, generator=g, dtype=torch.float64),
        # token sets for the CKA alone
        "cka_x": harness.unit(g, B, Q, E),
        "cka_y": harness.unit(g, B, Q, E),
    }
    # saturated rows for RCL's clamp: queries 0-3 on e_1, target 5's tokens on e_1, every other
    # target token at least 0.6 away along it (p_i5 > 1 - 1e-7 off the diagonal)
    composed = harness.unit(g, B, E)
    composed[:4] = torch.eye(E, dtype=torch.float64)[0]
    along = -(0.6 + 0.4 * torch.rand(B, 2, 1, generator=g, dtype=torch.float64))
    targets = torch.cat([along, harness.unit(g, B, 2, E - 1) * (1.0 - along ** 2).sqrt()], dim=-1)
    targets[5] = torch.eye(E, dtype=torch.float64)[0]
    inputs.update(saturated_composed=composed, saturated_targets=targets)
    return inputs


# ----------------------------------------------------------------------------- what both sides share


def _tower(inputs: dict[str, torch.Tensor], images: torch.Tensor) -> torch.Tensor:
    """The fake frozen tower: pixels (N, C, H, W) -> tokens (N, P, D)."""
    return (images.flatten(1) @ inputs["tower"]).view(-1, P, D)


def _composer(inputs: dict[str, torch.Tensor], tokens: torch.Tensor, positions: int) -> torch.Tensor:
    """The fake Q-Former: tokens (N, P, D) -> hidden states (N, positions, HIDDEN)."""
    return torch.tanh(torch.einsum("nf,kfh->nkh", tokens.flatten(1), inputs["composer"][:positions]))


def _linear(inputs: dict[str, torch.Tensor], name: str) -> nn.Linear:
    layer = nn.Linear(HIDDEN, E).double()
    with torch.no_grad():
        layer.weight.copy_(inputs[f"{name}_weight"])
        layer.bias.copy_(inputs[f"{name}_bias"])
    return layer


# ----------------------------------------------------------------------------- the release


STUBS = [*harness.LAVIS_STUBS, "matplotlib", "matplotlib.pyplot", "PIL", "PIL.Image",
         "torchvision", "torchvision.transforms"]


class _QFormer:
    """The release's ``Qformer.bert``: the fused call (token ids given) returns 33 hidden
    states, the target call the 32 query outputs, each a function of the image tokens."""

    def __init__(self, inputs: dict[str, torch.Tensor]) -> None:
        self.inputs = inputs

    def bert(self, *args: Any, encoder_hidden_states: torch.Tensor, **kwargs: Any) -> types.SimpleNamespace:
        positions = HIDDEN_STATES if args else Q
        return types.SimpleNamespace(last_hidden_state=_composer(self.inputs, encoder_hidden_states, positions))


def _release_model(module: types.ModuleType, inputs: dict[str, torch.Tensor]) -> nn.Module:
    model = object.__new__(module.Blip2QformerCir)
    nn.Module.__init__(model)
    model.visual_encoder = lambda images: _tower(inputs, images)
    model.ln_vision = lambda tokens: tokens
    model.Qformer = _QFormer(inputs)
    model.query_tokens = torch.zeros(1, Q, HIDDEN, dtype=torch.float64)
    model.tokenizer = lambda text, **kwargs: harness.Tokens.blank(len(text), 2)
    model.device = torch.device("cpu")
    model.max_txt_len = 2
    model.text_proj, model.vision_proj = _linear(inputs, "text_proj"), _linear(inputs, "vision_proj")
    model.text_proj_cau = _linear(inputs, "cau")
    model.loss_T = nn.Parameter(torch.tensor([10.0], dtype=torch.float64))
    model.W = model.conW = torch.eye(E, dtype=torch.float64)  # get_infodiscri's projection (its output is unused)
    return model


@contextlib.contextmanager
def _lambdas(values: torch.Tensor) -> Iterator[None]:
    """``Tensor.uniform_`` hands out ``values`` in order (the release's per-sample draw)."""
    queue = [float(v) for v in values]

    def uniform_(self: torch.Tensor, low: float = 0.0, high: float = 1.0, **kwargs: Any) -> torch.Tensor:
        return self.fill_(queue.pop(0))

    with mock.patch.object(torch.Tensor, "uniform_", uniform_):
        yield
    assert not queue, "the release drew fewer lambdas than the batch"


@contextlib.contextmanager
def _float64_default() -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _load_train(release_dir: Path) -> types.ModuleType:
    threads = torch.get_num_threads()
    with warnings.catch_warnings(), mock.patch.object(sys, "argv", ["train_INTENT.py"]):
        module = harness.load_release_module(
            release_dir, "train_INTENT.py", name="_release_intent_train",
            stubs=["clip", "datasets", "test_BLIP2", "data_utils", "setproctitle", "lavis", "lavis.models", "tqdm",
                   "torchvision"])
    torch.set_num_threads(threads)
    return module


class _LossModel:
    def __init__(self, losses: dict[str, torch.Tensor]) -> None:
        self.losses = losses

    def train(self) -> None:
        pass

    def apply(self, fn) -> None:
        pass

    def __call__(self, samples, device, after_warmup=False):
        return self.losses


def _release_total(train_module: types.ModuleType, losses: dict[str, torch.Tensor], after_warmup: bool) -> torch.Tensor:
    """The total ``train`` hands its scaler for one batch whose model returns ``losses``."""
    scaler = mock.MagicMock()
    loader = [{"source_img_data": torch.zeros(1), "target_img_data": torch.zeros(1), "mod": {"str": ["caption"]}}]
    with harness.on_cpu(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train_module.train(_LossModel(losses), mock.MagicMock(), loader, scaler, 0, {"eval": lambda s: s}, 1,
                           after_warmup=after_warmup)
    return scaler.scale.call_args.args[0]


def release_terms(release_dir: Path, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    module = harness.load_release_module(release_dir, "lavis/models/blip2_models/blip2_cir.py", stubs=STUBS,
                                         real=harness.lavis_stand_ins(), name="_release_intent")
    samples = {"image": inputs["reference"], "target": inputs["target"], "text_input": ["caption"] * B}
    terms: dict[str, torch.Tensor] = {}
    with harness.on_cpu(), _float64_default(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with _lambdas(inputs["lam"]):
            terms["mix"] = module.colorful_spectrum_mix(inputs["reference"], inputs["target"])[0]
        with _lambdas(inputs["lam_odd"]):
            terms["mix_ratio_half_odd"] = module.colorful_spectrum_mix(
                inputs["reference_odd"], inputs["target_odd"], alpha=1.0, ratio=0.5)[0]
        model = _release_model(module, inputs)
        terms["loss_caco_tokens"] = model.causal_consistency(inputs["cka_x"], inputs["cka_y"])
        terms["loss_stu_saturated"] = model.robust_infoNCE(
            inputs["saturated_composed"].unsqueeze(1).unsqueeze(1), inputs["saturated_targets"].permute(0, 2, 1))
        with _lambdas(inputs["lam"]):
            warmup = model(samples, "cpu", after_warmup=False)
        after = model(samples, "cpu", after_warmup=True)
    for name in ("loss_stu", "loss_odl", "loss_caco"):
        terms[f"{name}_warmup"] = warmup[name]
    terms["loss_stu"], terms["loss_odl"] = after["loss_stu"], after["loss_odl"]
    train_module = _load_train(release_dir)
    terms["loss_total_warmup"] = _release_total(train_module, warmup, after_warmup=False)
    terms["loss_total"] = _release_total(train_module, after, after_warmup=True)
    terms["warmup_epochs"] = torch.tensor(float(train_module.args.warm_up))
    return terms


# ----------------------------------------------------------------------------- the port


class _Backbone:
    """The port's backbone on the shared fakes: ``compose`` splits the composer's hidden states
    into the query outputs and the text position; ``target_features`` the normalised
    ``vision_proj`` of the target's query outputs."""

    def __init__(self, inputs: dict[str, torch.Tensor]) -> None:
        self.inputs = inputs
        self.text_proj = _linear(inputs, "text_proj")
        self.vision_proj = _linear(inputs, "vision_proj")

    def compose(self, tokens: torch.Tensor, text: Any) -> types.SimpleNamespace:
        hidden = _composer(self.inputs, tokens, HIDDEN_STATES)
        return types.SimpleNamespace(query=hidden[:, :Q], text=hidden[:, Q:])

    def target_features(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.vision_proj(_composer(self.inputs, tokens, Q)), dim=-1)


def _port_method(config: INTENTConfig, inputs: dict[str, torch.Tensor]) -> INTENT:
    method = object.__new__(INTENT)
    nn.Module.__init__(method)
    method.config = config
    method.backbone = _Backbone(inputs)
    images = {"reference": inputs["reference"], "target": inputs["target"]}
    method.context = types.SimpleNamespace(
        epochs=RUN_EPOCHS, pixels=lambda index, role: images[role][index],
        encode_pixels=lambda pixels: _tower(inputs, pixels))
    method.text_proj_cau = _linear(inputs, "cau")
    method.loss_T = nn.Parameter(torch.tensor(float(config.loss_scale)))
    method.warmup = warmup_length(config.warmup_epochs, RUN_EPOCHS)
    method.draw_lambdas = lambda size: inputs["lam"][:size] * config.mix_alpha  # the release's draws
    return method


def port_terms(inputs: dict[str, torch.Tensor], readings: str) -> dict[str, torch.Tensor]:
    config = build_config(INTENTConfig, {"readings": readings}, "intent")
    terms: dict[str, torch.Tensor] = {
        "mix": amplitude_mix(inputs["reference"], inputs["target"], inputs["lam"] * config.mix_alpha,
                             config.mix_ratio, config.mix_clamp),
        "mix_ratio_half_odd": amplitude_mix(inputs["reference_odd"], inputs["target_odd"], inputs["lam_odd"], 0.5,
                                            config.mix_clamp),
        "loss_caco_tokens": 1.0 - linear_cka(inputs["cka_x"], inputs["cka_y"]).mean(),
        "loss_stu_saturated": rcl_loss(max_token_similarity(inputs["saturated_composed"], inputs["saturated_targets"]),
                                       config.temperature, config.rcl_clamp),
    }
    method = _port_method(config, inputs)
    batch = Batch(index=torch.arange(B), reference=_tower(inputs, inputs["reference"]),
                  target=_tower(inputs, inputs["target"]), text=None, texts=["caption"] * B)
    warmup = method.training_step(batch, 0, 0)
    after = method.training_step(batch, method.warmup, 0)
    for name in ("stu", "odl", "caco"):
        terms[f"loss_{name}_warmup"] = torch.tensor(warmup.components[name], dtype=torch.float64)
    terms["loss_stu"] = torch.tensor(after.components["stu"], dtype=torch.float64)
    terms["loss_odl"] = torch.tensor(after.components["odl"], dtype=torch.float64)
    terms["loss_total_warmup"], terms["loss_total"] = warmup.loss, after.loss
    terms["warmup_epochs"] = torch.tensor(float(method.warmup))
    return terms
