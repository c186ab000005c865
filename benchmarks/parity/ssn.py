"""SSN's parity adapter: ``starxing-yuu/SSN``'s ``Model`` (``src/models/ssn.py``) against
``methods/ssn.py``, on seeded float64 inputs (the harness contract:
``benchmarks/parity/harness.py``).

The release's model is built by its own ``__init__`` (with ``args.kl_weight`` 1, the port's
choice: the release's scripts never define it, docs/ssn.md), its CLIP loaders stubbed to fake
encoders that return the seeded features: the text model's ``last_hidden_state`` is the
seeded word tokens (the port's text-only composer pass), the vision model's is the seeded
reference or target tokens (the port's image-only pass; the release's
``image_token_proj_layer`` is set to the identity, the port's tokens being at the composer's
width already). Every module both codes have (the two selection gates, the modality
embeddings, the fusion layer, the combiner and output layers) gets the same seeded weights.

Two mapping choices of the port (docs/ssn.md) are neutralised by what the fakes return: the
release's query base, ``lambda * text_embed + (1 - lambda) * ref_embed`` with ``lambda`` from
its ``dynamic_scalar``, gets the port's base (the normalised composed feature, the seeded
``composed``) as both embeddings, so it is that base whatever ``lambda`` is; and the release's
one target embedding is the port's target token 0 (the vision model's ``image_embeds`` of a
target is its first token), so the release's target is the port's ``encode_targets`` at token
0, and the port's loss is computed on its targets' token 0 alone (its maximum over the other
tokens has no counterpart in the release).

``forward`` returns only the total, so the terms it keeps local are read by recording the
release's own calls: the gates by forward hooks, the queries and the target by wrapping
``combine_features``, the two KL terms by recording the ``nn.KLDivLoss`` it builds, and the
symmetric cross-entropy as ``forward``'s value at ``kl_weight`` 0. The ``fed_*`` terms are the
same loss terms on given unit queries, negative queries and targets (``fed_query``,
``fed_negative``, ``fed_target``; the release's ``combine_features`` returns them, the port's
``queries`` and ``encode_targets`` do): the loss alone, whatever the readings of the layers
before it. Both sides run in eval mode (no dropout). No randomness enters a term.

The fusion layer's weights are drawn at the release's feed-forward width (2048, PyTorch's
default, which ``readings=release`` takes); under the port's defaults (4 x the width, 256
here) its two feed-forward matrices are their first 256 units.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

from cirbench.backbones.base import Backbone, ComposerOutput, TextBatch
from cirbench.settings.config import build_config
from cirbench.method import Batch, TrainingContext
from cirbench_methods import ssn as port

from . import harness

MODEL = "src/models/ssn.py"
RELEASE = harness.Release(
    repo="starxing-yuu/SSN",
    files={MODEL: "13-94,105-204"},
    commit="99cfb0e8c2b05b43eff37241260b9f9069b68d78",
)
SEED = 0
BATCH, TOKENS, WORDS, WIDTH = 8, 4, 6, 64
"""The port's query tokens (the release's 50 CLIP patch tokens), text positions, and the
fusion width (= the embedding width: the release adds the fusion's width-sized token 0 to the
target's CLIP embedding)."""
FEEDFORWARD = 2048
KL_WEIGHT = 1.0

PREFIXES = {
    "text_selection.": "text_token_selection_mask.",
    "image_selection.": "image_token_selection_mask.",
    "token_type.": "token_type_embeddings.",
    "fusion.": "fusion_layer.layers.0.",
    "combiner.": "combiner_layer.",
    "output.": "output_layer.",
}
"""The port's module names -> the release's."""

NOT_COMPARABLE = {
    "query base": "the release's base is CLIP4Cir's dynamic_scalar mix of CLIP's text and reference embeddings; "
                  "cirbench's composer composes both in one pass, whose feature the port uses (fed to the release "
                  "as both embeddings here, so the mix is that base)",
    "target tokens 1..Q-1": "the release has one target embedding (compared: the port's token 0); the port's other "
                            "query tokens, and the maximum over them in its loss and retrieval, have no counterpart",
    "CLIP encoders and image_token_proj_layer": "CLIP weights (fine-tuned in the release); the port's tokens are "
                                                "the composer's, already at its width",
    "optimiser and schedule": "train_cirr.py / train_fiq.py: Adam (CIRR) or AdamW (FashionIQ) with CLIP at "
                              "lr * lr_ratio and SSN's modules at 2 to 5 times that, StepLR, fp16 autocast: the "
                              "training loop, not a term",
}


def _linear(g: torch.Generator, out: int, inp: int) -> dict[str, torch.Tensor]:
    return {"weight": harness.randn(g, out, inp) * inp ** -0.5, "bias": 0.1 * harness.randn(g, out)}


def make_inputs(seed: int) -> dict[str, torch.Tensor]:
    """Reference and target tokens (B, Q, W), word tokens and their mask (B, T) with padding,
    the composed feature (B, W), the fed queries and targets (B, W), and the weights of every module both codes have
    (``port.<name>``, the port's names) and of the release's ``dynamic_scalar``."""
    g = harness.generator(seed)
    lengths = torch.randint(2, WORDS + 1, (BATCH,), generator=g)
    lengths[0] = WORDS
    inputs = {
        "reference": harness.randn(g, BATCH, TOKENS, WIDTH),
        "target": harness.randn(g, BATCH, TOKENS, WIDTH),
        "words": harness.randn(g, BATCH, WORDS, WIDTH),
        "text_mask": (torch.arange(WORDS)[None, :] < lengths[:, None]).to(torch.float64),
        "composed": harness.randn(g, BATCH, WIDTH),
        "fed_query": harness.unit(g, BATCH, WIDTH),
        "fed_negative": harness.unit(g, BATCH, WIDTH),
        "fed_target": harness.unit(g, BATCH, WIDTH),
    }
    in_proj = _linear(g, 3 * WIDTH, WIDTH)
    weights = {
        "text_selection.0": _linear(g, 1, 2 * WIDTH),
        "image_selection.0": _linear(g, 1, 2 * WIDTH),
        "fusion.self_attn": {"in_proj_weight": in_proj["weight"], "in_proj_bias": in_proj["bias"]},
        "fusion.self_attn.out_proj": _linear(g, WIDTH, WIDTH),
        "fusion.linear1": _linear(g, FEEDFORWARD, WIDTH),
        "fusion.linear2": _linear(g, WIDTH, FEEDFORWARD),
        "fusion.norm1": {"weight": 1 + 0.1 * harness.randn(g, WIDTH), "bias": 0.1 * harness.randn(g, WIDTH)},
        "fusion.norm2": {"weight": 1 + 0.1 * harness.randn(g, WIDTH), "bias": 0.1 * harness.randn(g, WIDTH)},
        "combiner": _linear(g, 2 * WIDTH, 2 * WIDTH),
        "output": _linear(g, WIDTH, 2 * WIDTH),
        "token_type": {"weight": 0.5 * harness.randn(g, 2, WIDTH)},
    }
    release_only = {"dynamic_scalar.0": _linear(g, 2 * WIDTH, 2 * WIDTH), "dynamic_scalar.2": _linear(g, 1, 2 * WIDTH)}
    for side, modules in (("port", weights), ("release", release_only)):
        for module, tensors in modules.items():
            inputs.update({f"{side}.{module}.{name}": value for name, value in tensors.items()})
    return inputs


def _record(store: dict[str, torch.Tensor], name: str) -> Any:
    """A forward hook keeping a gate's first output (B, N) under ``name`` (it changes nothing)."""
    def hook(module: nn.Module, args: Any, output: torch.Tensor) -> None:
        store.setdefault(name, output[..., 0])
    return hook


def _base(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.normalize(inputs["composed"], dim=-1)


def _port_weights(inputs: dict[str, torch.Tensor], feedforward: int) -> dict[str, torch.Tensor]:
    """The port's state (its names), the fusion's feed-forward cut to ``feedforward`` units."""
    state = {k.removeprefix("port."): v.clone() for k, v in inputs.items() if k.startswith("port.")}
    state["fusion.linear1.weight"] = state["fusion.linear1.weight"][:feedforward]
    state["fusion.linear1.bias"] = state["fusion.linear1.bias"][:feedforward]
    state["fusion.linear2.weight"] = state["fusion.linear2.weight"][:, :feedforward]
    return state


# ----------------------------------------------------------------------------- the release


class _FakeCLIP(nn.Module):
    """A CLIP model stand-in: ``visual_projection`` gives the release's ``__init__`` its widths;
    calling it returns what :attr:`respond` makes of the call."""

    def __init__(self) -> None:
        super().__init__()
        self.visual_projection = nn.Linear(WIDTH, WIDTH)
        self.respond = lambda *args, **kwargs: None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.respond(*args, **kwargs)


def _transformers() -> types.ModuleType:
    module = types.ModuleType("transformers")
    for name in ("CLIPTextModelWithProjection", "CLIPVisionModelWithProjection"):
        setattr(module, name, types.SimpleNamespace(from_pretrained=lambda *_: _FakeCLIP()))
    for name in ("CLIPTokenizer", "CLIPProcessor"):
        setattr(module, name, types.SimpleNamespace(from_pretrained=lambda *_: None))
    return module


def load(release_dir: Path) -> types.ModuleType:
    return harness.load_release_module(release_dir, MODEL, stubs=["transformers"], real={"transformers": _transformers()},
                                       name="_release_ssn")


class _Recorded(nn.Module):
    """A loss module that records every value it returns."""

    def __init__(self, inner: nn.Module, values: list[torch.Tensor]) -> None:
        super().__init__()
        self.inner, self.values = inner, values

    def forward(self, *args: Any) -> torch.Tensor:
        value = self.inner(*args)
        self.values.append(value)
        return value


def _release_model(module: types.ModuleType, inputs: dict[str, torch.Tensor]) -> nn.Module:
    args = types.SimpleNamespace(pretrained_model_name="stub", projection_dim=WIDTH, hidden_dim=WIDTH, kl_weight=KL_WEIGHT)
    model = module.Model(args).double().eval()
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("clip_")}
    for key, value in inputs.items():
        if key.startswith("port."):
            name = key.removeprefix("port.")
            prefix = next(p for p in PREFIXES if name.startswith(p))
            state[PREFIXES[prefix] + name.removeprefix(prefix)] = value.clone()
        elif key.startswith("release."):
            state[key.removeprefix("release.")] = value.clone()
    state["image_token_proj_layer.weight"] = torch.eye(WIDTH, dtype=torch.float64)
    state["image_token_proj_layer.bias"] = torch.zeros(WIDTH, dtype=torch.float64)
    model.load_state_dict(state, strict=False)
    model.img_tokens = TOKENS
    base = _base(inputs)
    model.clip_text_model.respond = lambda **_: types.SimpleNamespace(last_hidden_state=inputs["words"], text_embeds=base)
    model.clip_vision_model.respond = lambda images: types.SimpleNamespace(
        last_hidden_state=images, image_embeds=base if torch.equal(images, inputs["reference"]) else images[:, 0])
    return model


def _release_losses(model: nn.Module, call: tuple[Any, ...]) -> dict[str, torch.Tensor]:
    """``forward``'s loss terms on ``call``: the total, the two KL terms it builds, and the
    symmetric cross-entropy (``forward`` at ``kl_weight`` 0)."""
    kl: list[torch.Tensor] = []
    kl_div = nn.KLDivLoss
    with harness.on_cpu():
        with mock.patch.object(nn, "KLDivLoss", lambda *a, **k: _Recorded(kl_div(*a, **k), kl)):
            loss = model(*call)
        weight, model.kl_weight = model.kl_weight, 0.0
        contrastive = model(*call)
        model.kl_weight = weight
    return {"contrastive": contrastive, "kl_identity": kl[0], "kl_negative": kl[1], "kl": kl[0] - kl[1], "loss": loss}


def release_terms(release_dir: Path, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The release's gates, queries, target and loss terms, and its loss terms on the fed
    queries and targets (see the module docstring)."""
    module = load(Path(release_dir))
    model = _release_model(module, inputs)
    gates: dict[str, torch.Tensor] = {}
    model.text_token_selection_mask.register_forward_hook(_record(gates, "text_gate"))
    model.image_token_selection_mask.register_forward_hook(_record(gates, "image_gate"))
    combined: list[torch.Tensor] = []

    def combine_features(*args: Any, **kwargs: Any) -> torch.Tensor:
        combined.append(type(model).combine_features(model, *args, **kwargs))
        return combined[-1]

    model.combine_features = combine_features
    text = {"input_ids": torch.zeros(BATCH, WORDS, dtype=torch.long), "attention_mask": inputs["text_mask"].long()}
    call = (inputs["reference"], text, inputs["target"], torch.arange(BATCH))
    losses = _release_losses(model, call)
    terms = {"text_gate": gates["text_gate"], "image_gate": gates["image_gate"], "query": combined[0],
             "query_negative": combined[1], "target": combined[2], **losses}
    fed = iter([inputs["fed_query"], inputs["fed_negative"], inputs["fed_target"]] * 2)
    model.combine_features = lambda *args, **kwargs: next(fed)
    terms.update({f"fed_{k}": v for k, v in _release_losses(model, call).items()})
    return {k: v.detach() for k, v in terms.items()}


# ----------------------------------------------------------------------------- the port


class ParityComposer(Backbone):
    """A stand-in backbone whose passes return the seeded features: an image-only pass its
    image tokens, the text-only pass the word tokens, the joint pass the composed feature at
    the classification position; both projections are identities."""

    name = "parity"

    def __init__(self, inputs: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.inputs = inputs
        self.hidden_size, self.embed_dim, self.num_query_tokens = WIDTH, WIDTH, TOKENS
        self.query_tokens = nn.Parameter(torch.zeros(1, TOKENS, WIDTH, dtype=torch.float64))
        self.text_proj, self.vision_proj = nn.Identity(), nn.Identity()

    def tower_key(self) -> str:
        return "parity"

    def preprocess(self, images: list) -> torch.Tensor:
        raise NotImplementedError

    def encode_image_tokens(self, pixels: torch.Tensor) -> torch.Tensor:
        return pixels

    def tokenize(self, texts: list[str]) -> TextBatch:
        raise NotImplementedError

    def compose(self, image_tokens: torch.Tensor | None, text: TextBatch | None,
                queries: torch.Tensor | None = None) -> ComposerOutput:
        if text is None:
            return ComposerOutput(query=image_tokens, text=None)
        if image_tokens is None:
            return ComposerOutput(query=self.query_tokens.expand(len(text), -1, -1), text=self.inputs["words"])
        return ComposerOutput(query=image_tokens, text=self.inputs["composed"].unsqueeze(1))


def port_terms(inputs: dict[str, torch.Tensor], readings: str) -> dict[str, torch.Tensor]:
    """The port's terms under ``readings``: the gates (hooks on its selection layers), the
    queries (:meth:`SSN.queries`), the target's token 0 (:meth:`SSN.encode_targets`), and
    :meth:`SSN.training_step` on its targets' token 0, the two KL terms read from its calls of
    :func:`methods.ssn.kl_mean`."""
    config = build_config(port.SSNConfig, {"readings": readings}, "ssn")
    context = TrainingContext(num_train=BATCH, epochs=1, batch_size=BATCH, steps_per_epoch=1, seed=0,
                              device=torch.device("cpu"), iterate=lambda shuffle=True: iter(()))
    method = port.SSN(ParityComposer(inputs), config, context).double().eval()
    method.load_state_dict(_port_weights(inputs, config.fusion_feedforward or 4 * WIDTH), strict=False)
    gates: dict[str, torch.Tensor] = {}
    method.text_selection.register_forward_hook(_record(gates, "text_gate"))
    method.image_selection.register_forward_hook(_record(gates, "image_gate"))
    text = TextBatch(torch.zeros(BATCH, WORDS, dtype=torch.long), inputs["text_mask"].bool())
    batch = Batch(torch.arange(BATCH), inputs["reference"], inputs["target"], text, [f"caption {i}" for i in range(BATCH)])
    query, negative = method.queries(batch.reference, batch.text, negative=True)
    terms = {"text_gate": gates["text_gate"], "image_gate": gates["image_gate"], "query": query, "query_negative": negative,
             "target": method.encode_targets(batch.target)[:, 0]}
    method.encode_targets = lambda images: port.SSN.encode_targets(method, images)[:, :1]
    terms.update(_port_losses(method, batch))
    method.queries = lambda reference, text, negative=False: (inputs["fed_query"], inputs["fed_negative"])
    method.encode_targets = lambda images: inputs["fed_target"].unsqueeze(1)
    terms.update({f"fed_{k}": v for k, v in _port_losses(method, batch).items()})
    return {k: v.detach() for k, v in terms.items()}


def _port_losses(method: port.SSN, batch: Batch) -> dict[str, torch.Tensor]:
    """:meth:`SSN.training_step`'s loss terms, the two KL terms read from its calls of
    :func:`methods.ssn.kl_mean`."""
    kl: list[torch.Tensor] = []
    own_kl_mean = port.kl_mean

    def kl_mean(*args: torch.Tensor) -> torch.Tensor:
        kl.append(own_kl_mean(*args))
        return kl[-1]

    with mock.patch.object(port, "kl_mean", kl_mean):
        out = method.training_step(batch, 0, 0)
    return {"contrastive": torch.tensor(out.components["contrastive"], dtype=torch.float64), "kl_identity": kl[0],
            "kl_negative": kl[1], "kl": torch.tensor(out.components["kl"], dtype=torch.float64), "loss": out.loss}
