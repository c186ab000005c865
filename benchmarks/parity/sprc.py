"""SPRC's parity adapter: ``chunmeifeng/SPRC``'s ``Blip2QformerCirAlignPrompt.forward`` (the
model its README trains, ``--blip-model-name blip2_cir_align_prompt``) against
``methods/sprc.py``, on seeded float64 inputs (the harness contract:
``benchmarks/parity/harness.py``).

The release computes its three losses inline in ``forward`` from Q-Former passes, so both
codes get the same small *fake composer* (this file's :func:`composer`, seeded weights): one
masked self-attention step over its input sequence, a cross-attention step to the image tokens
when there are any, and a ``tanh``. It has no positions, so it is permutation-equivariant: a
token's output does not depend on where the sequence puts it. The release's Q-Former ``bert``
is replaced by it (its input sequence laid out as the release's ``BertEmbeddings`` lays it out:
``[queries; words]``, and under ``no_img=True``, the prompt pass, ``[CLS; prompts; words 2..T]``,
``Qformer.py`` lines 102-103), and the port runs on a stand-in backbone whose ``compose`` is the
same function over ``[queries; words]``. The vision tower and ``ln_vision`` return their input
(the seeded reference and target tokens), the tokenizer returns the seeded ids and mask, and
``text_proj`` / ``vision_proj`` are the same seeded linear maps on both sides. So what is
compared is everything the two codes do with the composer's outputs: which passes run with
which queries, which position is read, the max-over-tokens similarity, the temperature, the
cross-entropies, the align MSE, the detach of the prompt tokens, the loss weights, and the
gradient each term sends to the temperature and to the query and prompt tokens.

The temperature is an input (``temperature``, the release's start 0.07, and a low value
``low_temperature`` 0.005 below the port's clamp): both sides' learnable temperature is set to
it. The release's loss weights are read from its training script: CIRR's from the defaults of
``--loss-rtc`` and ``--loss-align`` (``clip_finetune_cirr`` weighs every term but ``itc``
by them), FashionIQ's 1 (``clip_finetune_fiq`` sums the dict). No randomness enters a term.
"""

from __future__ import annotations

import ast
import math
import types
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cirbench.backbones.base import Backbone, ComposerOutput, TextBatch
from cirbench.settings.config import build_config
from cirbench.method import Batch, TrainingContext
from cirbench_methods import sprc as port

from . import harness

MODEL = "src/lavis/models/blip2_models/blip2_qformer_cir_align_prompt.py"
SCRIPT = "src/blip_fine_tune_2.py"
RELEASE = harness.Release(
    repo="chunmeifeng/SPRC",
    files={MODEL: "85-92,95-200", SCRIPT: "127-132,291-299,379-380",
           "src/lavis/models/blip2_models/Qformer.py": "78-113,434-475"},
    commit="2935a5397732260d1db6fa577e5926f963e36f0f",
)
SEED = 0
BATCH, QUERIES, WORDS, PATCHES, HIDDEN, EMBED, VOCAB = 8, 32, 6, 5, 16, 8, 20
"""The release reads the composed feature at position 32, after its 32 query tokens."""
CLS = 1
TEMPERATURE, LOW_TEMPERATURE = 0.07, 0.005

NOT_COMPARABLE = {
    "composer": "the Q-Former is the backbone's in cirbench, the same for every method (the release's own: the "
                "prompt pass adds position embeddings to the prompt tokens too, and a pass without image tokens "
                "sends every position, queries and prompts included, through the text feed-forward, Qformer.py "
                "434-475): both sides get one fake composer (docs/sprc.md, row 6)",
    "prompt tokens' start": "a random draw (release: N(0, 0.02^2)); both sides get the same seeded prompt tokens "
                            "(port: prompt_init=normal draws from the release's distribution)",
    "optimiser and schedule": "blip_fine_tune_2.py: AdamW (betas 0.9/0.98, eps 1e-7, weight decay 0.05: the "
                              "harness's defaults), OneCycleLR, fp16 autocast, 50 (CIRR) / 30 (FashionIQ) epochs: "
                              "the training loop, not a term",
}


def make_inputs(seed: int) -> dict[str, torch.Tensor]:
    """Reference and target tokens (B, P, H), token ids and a mask (B, T) with padding, the
    query and prompt tokens (1, 32, H), the fake composer's weights, the projections, and the
    two temperatures."""
    g = harness.generator(seed)
    lengths = torch.randint(2, WORDS + 1, (BATCH,), generator=g)
    lengths[0] = WORDS
    ids = torch.randint(2, VOCAB, (BATCH, WORDS), generator=g)
    ids[:, 0] = CLS
    mask = torch.arange(WORDS)[None, :] < lengths[:, None]
    ids = ids.masked_fill(~mask, 0)
    scale = HIDDEN ** -0.5
    return {
        "reference": harness.randn(g, BATCH, PATCHES, HIDDEN),
        "target": harness.randn(g, BATCH, PATCHES, HIDDEN),
        "text_ids": ids.to(torch.float64),
        "text_mask": mask.to(torch.float64),
        "query_tokens": harness.randn(g, 1, QUERIES, HIDDEN),
        "prompt_tokens": harness.randn(g, 1, QUERIES, HIDDEN),
        "word_embeddings": harness.randn(g, VOCAB, HIDDEN),
        "w_query": scale * harness.randn(g, HIDDEN, HIDDEN),
        "w_key": scale * harness.randn(g, HIDDEN, HIDDEN),
        "w_out": scale * harness.randn(g, HIDDEN, HIDDEN),
        "w_cross": scale * harness.randn(g, HIDDEN, HIDDEN),
        "text_proj.weight": scale * harness.randn(g, EMBED, HIDDEN),
        "text_proj.bias": 0.1 * harness.randn(g, EMBED),
        "vision_proj.weight": scale * harness.randn(g, EMBED, HIDDEN),
        "vision_proj.bias": 0.1 * harness.randn(g, EMBED),
        "temperature": torch.tensor(TEMPERATURE, dtype=torch.float64),
        "low_temperature": torch.tensor(LOW_TEMPERATURE, dtype=torch.float64),
    }


def composer(inputs: dict[str, torch.Tensor], x: torch.Tensor, keep: torch.Tensor, image: torch.Tensor | None) -> torch.Tensor:
    """The fake composer both codes run (see the module docstring): ``x`` (B, S, H) the input
    sequence, ``keep`` (B, S) the positions attended to, ``image`` (B, P, H) or None."""
    scores = (x @ inputs["w_query"]) @ (x @ inputs["w_key"]).transpose(1, 2) / math.sqrt(x.shape[-1])
    scores = scores.masked_fill(~keep.bool()[:, None, :], float("-inf"))
    hidden = x + torch.softmax(scores, dim=-1) @ x @ inputs["w_out"]
    if image is not None:
        attention = torch.softmax(hidden @ image.transpose(1, 2) / math.sqrt(x.shape[-1]), dim=-1)
        hidden = hidden + attention @ image @ inputs["w_cross"]
    return torch.tanh(hidden)


def _linear(inputs: dict[str, torch.Tensor], name: str) -> nn.Linear:
    layer = nn.Linear(HIDDEN, EMBED).double()
    layer.load_state_dict({"weight": inputs[f"{name}.weight"].clone(), "bias": inputs[f"{name}.bias"].clone()})
    return layer


def _text(inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return inputs["text_ids"].long(), inputs["text_mask"].bool()


# ----------------------------------------------------------------------------- the release


def load(release_dir: Path) -> types.ModuleType:
    stubs = [*harness.LAVIS_STUBS]
    return harness.load_release_module(release_dir, MODEL, stubs=stubs, real=harness.lavis_stand_ins(), name="_release_sprc")


def release_loss_weights(release_dir: Path) -> dict[str, float]:
    """The defaults of ``--loss-rtc`` and ``--loss-align`` in the release's training script
    (read from its syntax tree: the script runs its training at import)."""
    tree = ast.parse((Path(release_dir) / SCRIPT).read_text())
    weights = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument" and node.args:
            flag = getattr(node.args[0], "value", None)
            for keyword in node.keywords:
                if flag in ("--loss-rtc", "--loss-align") and keyword.arg == "default":
                    weights[flag.removeprefix("--loss-")] = float(ast.literal_eval(keyword.value))
    if set(weights) != {"rtc", "align"}:
        raise ValueError(f"{SCRIPT}: no defaults of --loss-rtc and --loss-align found")
    return weights


def _release_model(module: types.ModuleType, inputs: dict[str, torch.Tensor]) -> nn.Module:
    """The release's model with the fake encoders (see the module docstring)."""
    model = object.__new__(module.Blip2QformerCirAlignPrompt)
    nn.Module.__init__(model)
    ids, mask = _text(inputs)
    embeddings = inputs["word_embeddings"]

    def bert(input_ids: torch.Tensor | None = None, query_embeds: torch.Tensor | None = None,
             attention_mask: torch.Tensor | None = None, encoder_hidden_states: torch.Tensor | None = None,
             no_img: bool = False, **_: Any) -> Any:
        if input_ids is None:
            x, keep = query_embeds, torch.ones(query_embeds.shape[:2], dtype=torch.bool)
        else:
            words = embeddings[input_ids]
            if no_img:  # BertEmbeddings.forward: [CLS; queries; the other words]
                x = torch.cat([words[:, :1], query_embeds, words[:, 1:]], dim=1)
            else:
                x = torch.cat([query_embeds, words], dim=1)
            keep = attention_mask.bool()
        return types.SimpleNamespace(last_hidden_state=composer(inputs, x, keep, encoder_hidden_states))

    model.tokenizer = lambda text, **_: harness.Tokens(ids, mask.long())
    model.visual_encoder = lambda image: image
    model.ln_vision = lambda embeds: embeds
    model.Qformer = types.SimpleNamespace(bert=bert)
    model.text_proj = _linear(inputs, "text_proj")
    model.vision_proj = _linear(inputs, "vision_proj")
    model.query_tokens = nn.Parameter(inputs["query_tokens"].clone())
    model.prompt_tokens = nn.Parameter(inputs["prompt_tokens"].clone())
    model.temp = nn.Parameter(inputs["temperature"].clone())
    model.device = torch.device("cpu")
    model.max_txt_len = WORDS
    return model


def release_terms(release_dir: Path, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The release's three losses, its CIRR and FashionIQ totals, their gradients at the
    temperature and the query and prompt tokens, and the CIRR total at the low temperature."""
    module = load(Path(release_dir))
    weights = release_loss_weights(Path(release_dir))
    model = _release_model(module, inputs)
    samples = {"image": inputs["reference"], "target": inputs["target"], "text_input": [f"caption {i}" for i in range(BATCH)]}
    with harness.on_cpu():
        losses = model(samples)
        cirr = losses["loss_itc"] + weights["rtc"] * losses["loss_rtc"] + weights["align"] * losses["loss_align"]
        fashioniq = losses["loss_itc"] + losses["loss_rtc"] + losses["loss_align"]
        cirr.backward()
        terms = {
            "itc": losses["loss_itc"], "rtc": losses["loss_rtc"], "align": losses["loss_align"],
            "loss_cirr": cirr, "loss_fashioniq": fashioniq,
            "grad_temperature": model.temp.grad.clone(),
            "grad_query_tokens": model.query_tokens.grad.clone(),
            "grad_prompt_tokens": model.prompt_tokens.grad.clone(),
        }
        with torch.no_grad():
            model.temp.copy_(inputs["low_temperature"])
            low = model(samples)
        terms["loss_cirr_low_temperature"] = low["loss_itc"] + weights["rtc"] * low["loss_rtc"] + weights["align"] * low["loss_align"]
    return {k: v.detach() for k, v in terms.items()}


# ----------------------------------------------------------------------------- the port


class ParityComposer(Backbone):
    """A stand-in backbone whose composer is :func:`composer` over ``[queries; words]``."""

    name = "parity"

    def __init__(self, inputs: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.inputs = inputs
        self.hidden_size, self.embed_dim, self.num_query_tokens = HIDDEN, EMBED, QUERIES
        self.query_tokens = nn.Parameter(inputs["query_tokens"].clone())
        self.text_proj = _linear(inputs, "text_proj")
        self.vision_proj = _linear(inputs, "vision_proj")

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
        size = image_tokens.shape[0] if image_tokens is not None else len(text)
        q = self.expand_queries(size, queries)
        if text is None:
            return ComposerOutput(query=composer(self.inputs, q, torch.ones(q.shape[:2], dtype=torch.bool), image_tokens), text=None)
        x = torch.cat([q, self.inputs["word_embeddings"][text.ids]], dim=1)
        keep = torch.cat([torch.ones(q.shape[:2], dtype=torch.bool), text.mask.bool()], dim=1)
        hidden = composer(self.inputs, x, keep, image_tokens)
        return ComposerOutput(query=hidden[:, :q.shape[1]], text=hidden[:, q.shape[1]:])


def _temperature_parameter(method: port.SPRC) -> nn.Parameter:
    """The parameter the optimiser learns for the temperature (its logarithm by default)."""
    return method.log_temperature if method.config.temperature_parameter == "log" else method.raw_temperature


def _port(inputs: dict[str, torch.Tensor], overrides: dict[str, str], temperature: torch.Tensor) -> tuple[port.SPRC, Batch]:
    config = build_config(port.SPRCConfig, overrides, "sprc")
    backbone = ParityComposer(inputs)
    context = TrainingContext(num_train=BATCH, epochs=1, batch_size=BATCH, steps_per_epoch=1, seed=0,
                              device=torch.device("cpu"), iterate=lambda shuffle=True: iter(()))
    method = port.SPRC(backbone, config, context).double()
    with torch.no_grad():
        method.prompt_tokens.copy_(inputs["prompt_tokens"])
        _temperature_parameter(method).copy_(temperature.log() if config.temperature_parameter == "log" else temperature)
    ids, mask = _text(inputs)
    batch = Batch(torch.arange(BATCH), inputs["reference"], inputs["target"], TextBatch(ids, mask),
                  [f"caption {i}" for i in range(BATCH)])
    return method, batch


def port_terms(inputs: dict[str, torch.Tensor], readings: str) -> dict[str, torch.Tensor]:
    """The port's terms under ``readings``: :meth:`SPRC.per_sample_losses` averaged, and
    :meth:`SPRC.sprc_step`'s loss (at the defaults' weights, and at FashionIQ's, 1 and 1) with
    its gradients at the learnable temperature (whichever parameter ``temperature_parameter``
    makes it: its logarithm by default) and the query and prompt tokens."""
    method, batch = _port(inputs, {"readings": readings}, inputs["temperature"])
    parts = {k: v.mean() for k, v in method.per_sample_losses(batch).items()}
    out = method.sprc_step(batch)
    out.loss.backward()
    terms = {**parts, "loss_cirr": out.loss, "grad_temperature": _temperature_parameter(method).grad.clone(),
             "grad_query_tokens": method.backbone.query_tokens.grad.clone(),
             "grad_prompt_tokens": method.prompt_tokens.grad.clone()}
    fashioniq, batch = _port(inputs, {"readings": readings, "rtc_weight": "1", "align_weight": "1"}, inputs["temperature"])
    terms["loss_fashioniq"] = fashioniq.sprc_step(batch).loss
    low, batch = _port(inputs, {"readings": readings}, inputs["low_temperature"])
    terms["loss_cirr_low_temperature"] = low.sprc_step(batch).loss
    return {k: v.detach() for k, v in terms.items()}
