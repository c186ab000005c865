"""CaLa against its release (``Chiangsonw/CaLa``, BLIP-2 path, ``--cir-frame sum``): TAC's
visual gap, HCA's pseudo-target, the three logit matrices at the scales the port uses
(``matching_scale`` 100, ``association_scale`` 10), the two cross-entropies and the loss, and
the retrieval features.

The release computes its logits and loss inline, in the body of ``blip_finetune_cirr``'s
training loop (``src/blip_fine_tune.py``), a function that also loads three BLIP-2 models,
builds the CIRR datasets and creates a folder under the checkout. So the harness runs that
loop body alone: it reads the release's own source from the checkout at run time, takes the
block from ``with torch.cuda.amp.autocast():`` to the line before ``scaler.scale(loss)
.backward()``, and executes it (nothing of it is copied into cirbench) in the release
module's namespace with the loop's locals bound: the three BLIP-2 models are fakes whose
``extract_features`` return the seeded hidden states, ``tac`` and ``hca`` are the release's own
``TwinAttentionCompositorBLIP2`` and ``HingebasedCrossAttentionBLIP2`` given seeded weights,
the weights are those of the README's command (``tac_weight`` 0.45, ``hca_weight`` 0.1), and
``combining_function`` is the release's ``element_wise_sum``. The port's ``TwinAttention
Compositor`` and ``HingeCrossAttention`` get the same weights (the shapes match: one-head
``nn.MultiheadAttention``s of the same width; four ``Linear`` layers). HCA's dropout (0.1)
runs in training mode on both sides from the same global seed, set right before each forward
(nothing else draws in between). The release's tokenizer pads the text to the batch's
longest text: its text tokens are the seeded ones up to that length.

Retrieval: the release's ``generate_cirr_val_predictions_blip2`` and
``extract_index_features_blip2`` on fake models (the hidden width is BLIP-2's 768, which they
hard-code; their loaders are given no worker processes), against the port's
``encode_queries`` and ``encode_targets``. The target's first tokens are unit vectors, as the
release normalises them before scoring.
"""

from __future__ import annotations

import contextlib
import io
import textwrap
import types
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from parity import harness

from cirbench.backbones.base import TextBatch
from cirbench.settings.config import build_config
from cirbench.method import Batch
from cirbench_methods.cala import CaLa, CaLaConfig, HingeCrossAttention, TwinAttentionCompositor, batch_longest

RELEASE = harness.Release(
    repo="Chiangsonw/CaLa",
    files={"src/blip_fine_tune.py": "784-875", "src/hinge_based_cross_attention_blip2.py": "7-34, 88-102",
           "src/twin_attention_compositor_blip2.py": "4-38", "src/utils.py": "64-89, 174-181",
           "src/validate.py": "536-580"},
)
SEED = 0
B, Q, T, H, E = 8, 5, 7, 16, 8    # batch, query tokens, text tokens (padded), hidden width, embedding
LENGTHS = [3, 4, 5, 3, 4, 5, 4, 3]  # the texts' lengths: the batch's longest (5) is shorter than T
RETRIEVAL_H = 768                   # the release's retrieval hard-codes BLIP-2's width
RETRIEVAL_B = 2                     # queries and gallery images compared at retrieval (768 numbers each)
DROPOUT_SEED = 1234
TAC_WEIGHT, HCA_WEIGHT = 0.45, 0.1  # the README's command

NOT_COMPARABLE = {
    "three Q-Formers": "the release loads three BLIP-2 models (textual, multimodal, visual) and fine-tunes each "
                       "apart; the port has one composer: the hidden states are given, the models are not compared",
    "learning rates": "the release trains TAC and HCA at twice the encoders' learning rate with its own cosine "
                      "schedule; the harness has one learning rate and schedule for every parameter",
}


def make_inputs(seed: int) -> dict[str, torch.Tensor]:
    g = harness.generator(seed)
    mask = (torch.arange(T).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)).double()
    inputs = {
        "joint_query": harness.randn(g, B, Q, H),        # multimodal_embeds: the joint pass's query outputs
        "joint_text": harness.randn(g, B, T, H),         # the joint pass's text outputs (the port's composed feature)
        "text_tokens": harness.randn(g, B, T, H),        # text_embeds: the text-only pass
        "text_mask": mask,
        "target_tokens": harness.randn(g, B, Q, H),      # image_embeds of the target
        "reference_tokens": harness.randn(g, B, Q, H),   # image_embeds of the reference (TAC's)
        "text_proj_weight": harness.randn(g, E, H) / H ** 0.5, "text_proj_bias": 0.1 * harness.randn(g, E),
        "vision_proj_weight": harness.randn(g, E, H) / H ** 0.5, "vision_proj_bias": 0.1 * harness.randn(g, E),
        "retrieval_joint": harness.randn(g, RETRIEVAL_B, Q, RETRIEVAL_H),
        "retrieval_text": harness.randn(g, RETRIEVAL_B, T, RETRIEVAL_H),
        "retrieval_target": harness.unit(g, RETRIEVAL_B, Q, RETRIEVAL_H),
        "retrieval_text_proj_weight": harness.randn(g, E, RETRIEVAL_H) / RETRIEVAL_H ** 0.5,
        "retrieval_text_proj_bias": 0.1 * harness.randn(g, E),
        "retrieval_vision_proj_weight": harness.randn(g, E, RETRIEVAL_H) / RETRIEVAL_H ** 0.5,
        "retrieval_vision_proj_bias": 0.1 * harness.randn(g, E),
    }
    for name, shape in _module_shapes().items():
        inputs[name] = harness.randn(g, *shape) / H ** 0.5
    return inputs


def _module_shapes() -> dict[str, tuple[int, ...]]:
    """The weights of TAC's two attentions and HCA's four maps, by the release's names."""
    shapes: dict[str, tuple[int, ...]] = {}
    for attention in ("reference_as_query_attention", "target_as_query_attention"):
        shapes.update({f"tac.{attention}.in_proj_weight": (3 * H, H), f"tac.{attention}.in_proj_bias": (3 * H,),
                       f"tac.{attention}.out_proj.weight": (H, H), f"tac.{attention}.out_proj.bias": (H,)})
    for layer in ("query_ref1", "key_text1", "key_tar1", "value1"):
        shapes.update({f"hca.{layer}.weight": (H, H), f"hca.{layer}.bias": (H,)})
    return shapes


# names of the port's parameters for the release's
PORT_NAMES = {
    "tac.reference_as_query_attention": "tac.reference_queries", "tac.target_as_query_attention": "tac.target_queries",
    "hca.query_ref1": "hca.query_reference", "hca.key_text1": "hca.key_text", "hca.key_tar1": "hca.key_target",
    "hca.value1": "hca.value",
}


def _port_name(name: str) -> str:
    for release, port in PORT_NAMES.items():
        if name.startswith(release + "."):
            return port + name[len(release):]
    raise KeyError(name)


def _load(module: nn.Module, inputs: dict[str, torch.Tensor], prefix: str, rename=lambda n: n) -> nn.Module:
    """``module`` in float64 with the seeded weights of ``inputs`` under ``prefix``."""
    module = module.double()
    state = {rename(k)[len(prefix):]: v for k, v in inputs.items() if k.startswith(prefix.split(".")[0] + ".")
             and rename(k).startswith(prefix)}
    missing = module.load_state_dict(state, strict=False)
    assert not missing.unexpected_keys and all(k.split(".")[0].endswith("2") for k in missing.missing_keys), missing
    return module


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


# ----------------------------------------------------------------------------- the release


class _Images:
    """A batch of "images": each sample's index, so a fake model can return its features."""

    @staticmethod
    def make(index: torch.Tensor) -> torch.Tensor:
        return index.double().unsqueeze(1)

    @staticmethod
    def index(images: torch.Tensor) -> torch.Tensor:
        return images[:, 0].long()


def _caption_index(captions: list[str]) -> torch.Tensor:
    return torch.tensor([int(c.split()[-1]) for c in captions])


class _Blip2:
    """One of the release's three BLIP-2 models: ``extract_features`` returns the seeded hidden
    states of the samples it is given (images carry their index, captions end with it)."""

    def __init__(self, joint: torch.Tensor, text: torch.Tensor, image: dict[str, torch.Tensor]) -> None:
        self.joint, self.text, self.image = joint, text, image

    def extract_features(self, samples: dict[str, Any], mode: str = "multimodal") -> types.SimpleNamespace:
        if mode == "text":
            index = _caption_index(samples["text_input"])
            return types.SimpleNamespace(text_embeds=self.text[index])
        images = samples["image"]
        if mode == "image":
            role = "reference" if images.shape[1] == 2 else "target"  # a second column marks the reference
            return types.SimpleNamespace(image_embeds=self.image[role][_Images.index(images)])
        return types.SimpleNamespace(multimodal_embeds=self.joint[_Images.index(images)])


def _longest(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The text tokens as the release's tokenizer pads them: up to the batch's longest text."""
    return tokens[:, :int(mask.sum(1).max())]


def _loop_body(release_dir: Path) -> str:
    """The training loop's body of ``blip_finetune_cirr``, from the release's own source."""
    source = (Path(release_dir) / "src/blip_fine_tune.py").read_text().splitlines()
    start_function = next(i for i, line in enumerate(source) if line.startswith("def blip_finetune_cirr("))
    start = next(i for i in range(start_function, len(source)) if "with torch.cuda.amp.autocast():" in source[i])
    end = next(i for i in range(start, len(source)) if "scaler.scale(loss).backward()" in source[i])
    return textwrap.dedent("\n".join(source[start:end]))


def _release_modules(release_dir: Path) -> dict[str, types.ModuleType]:
    stubs = ["clip", "clip.model", "data_utils", "tqdm"]
    utils = harness.load_release_module(release_dir, "src/utils.py", stubs=stubs, name="_release_cala_utils")
    utils.tqdm = lambda iterable, *a, **k: iterable
    real = {"utils": utils}
    hca = harness.load_release_module(release_dir, "src/hinge_based_cross_attention_blip2.py", stubs=["utils"],
                                      real=real, name="_release_cala_hca")
    tac = harness.load_release_module(release_dir, "src/twin_attention_compositor_blip2.py", stubs=["utils"],
                                      real=real, name="_release_cala_tac")
    train = harness.load_release_module(
        release_dir, "src/blip_fine_tune.py", real=real, name="_release_cala_fine_tune",
        stubs=["comet_ml", "data_utils", "clip", "lavis", "lavis.models", "utils", "validate",
               "twin_attention_compositor_blip2", "hinge_based_cross_attention_blip2",
               "twin_attention_compositor_clip", "hinge_based_cross_attention_clip", "artemis", "tqdm"])
    validate = harness.load_release_module(release_dir, "src/validate.py", real=real, name="_release_cala_validate",
                                           stubs=["clip", "clip.model", "data_utils", "utils", "lavis",
                                                  "lavis.models", "tqdm"])
    validate.tqdm = lambda iterable, *a, **k: iterable
    return {"utils": utils, "hca": hca, "tac": tac, "train": train, "validate": validate}


def _no_workers(loader_cls):
    def loader(*args: Any, **kwargs: Any):
        kwargs.update(num_workers=0, pin_memory=False)
        return loader_cls(*args, **kwargs)
    return loader


def release_terms(release_dir: Path, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    modules = _release_modules(release_dir)
    tac = _load(modules["tac"].TwinAttentionCompositorBLIP2(H), inputs, "tac.").train()
    hca = _load(modules["hca"].HingebasedCrossAttentionBLIP2(H), inputs, "hca.").train()
    index = torch.arange(B)
    text = _longest(inputs["text_tokens"], inputs["text_mask"])
    model = _Blip2(inputs["joint_query"], text,
                   {"target": inputs["target_tokens"], "reference": inputs["reference_tokens"]})
    reference_images = torch.cat([_Images.make(index), torch.zeros(B, 1, dtype=torch.float64)], dim=1)
    loop = {
        "encoder_arch": "blip2", "cir_frame": "sum", "blip_textual": model, "blip_multimodal": model,
        "blip_visual": model, "captions": [f"caption {i}" for i in range(B)], "reference_images": reference_images,
        "target_images": _Images.make(index), "images_in_batch": B, "device": "cpu", "tac": tac, "hca": hca,
        "tac_weight": TAC_WEIGHT, "hca_weight": HCA_WEIGHT, "combining_function": modules["utils"].element_wise_sum,
        "crossentropy_criterion": nn.CrossEntropyLoss(),
    }
    namespace = {**vars(modules["train"]), **loop}
    with harness.on_cpu(), warnings.catch_warnings(), _seeded(DROPOUT_SEED):
        warnings.simplefilter("ignore")
        exec(compile(_loop_body(release_dir), str(Path(release_dir) / "src/blip_fine_tune.py"), "exec"), namespace)
    terms = {name: namespace[name] for name in ("matching_logits", "aligning_logits", "reasoning_logits",
                                                "contrastive_loss", "reasoning_loss", "loss")}
    terms["visual_gap"], terms["pseudo_target"] = namespace["visual_gap_feats"], namespace["psudo_T"]
    with torch.no_grad():
        terms["pseudo_target_eval"] = hca.eval()(inputs["joint_query"], text, inputs["target_tokens"])
    terms.update(_release_retrieval(modules, inputs))
    return terms


class _ListDataset(torch.utils.data.Dataset):
    split = "val"

    def __init__(self, items: list) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return self.items[i]


def _release_retrieval(modules: dict[str, types.ModuleType], inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The release's validation query features and index features on the seeded hidden states."""
    utils, validate = modules["utils"], modules["validate"]
    text = _longest(inputs["retrieval_text"], inputs["text_mask"][:RETRIEVAL_B])
    model = _Blip2(inputs["retrieval_joint"], text, {"target": inputs["retrieval_target"]})
    relative = _ListDataset([(_Images.make(torch.tensor([i]))[0], f"ref{i}", f"tgt{i}", f"caption {i}", [f"g{i}"])
                             for i in range(RETRIEVAL_B)])
    classic = _ListDataset([(f"tgt{i}", _Images.make(torch.tensor([i]))[0]) for i in range(RETRIEVAL_B)])
    utils.DataLoader, validate.DataLoader = _no_workers(utils.DataLoader), _no_workers(validate.DataLoader)
    utils.CIRRDataset = utils.FashionIQDataset = _ListDataset  # its isinstance checks (only its print reads them)
    with harness.on_cpu(), warnings.catch_warnings(), torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)  # their accumulators are built at the default dtype
        try:
            index_features, _ = utils.extract_index_features_blip2(classic, model)
            predicted, *_ = validate.generate_cirr_val_predictions_blip2(model, model, relative, utils.element_wise_sum,
                                                                       [], index_features)
        finally:
            torch.set_default_dtype(previous)
    return {"retrieval_query": predicted, "retrieval_target": index_features}


# ----------------------------------------------------------------------------- the port


def _linear(inputs: dict[str, torch.Tensor], name: str) -> nn.Linear:
    weight = inputs[f"{name}_weight"]
    layer = nn.Linear(weight.shape[1], weight.shape[0]).double()
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(inputs[f"{name}_bias"])
    return layer


class _Backbone:
    """The port's composer on the seeded hidden states: which pass is asked for is told by
    its arguments (both: the joint pass; images alone: their query outputs; text alone: the
    text-only pass)."""

    def __init__(self, inputs: dict[str, torch.Tensor], retrieval: bool = False) -> None:
        if retrieval:  # BLIP-2's width; the joint pass's text outputs are the text-only pass's here
            self.joint_query, self.joint_text = inputs["retrieval_joint"], inputs["retrieval_text"]
            self.text, self.images = inputs["retrieval_text"], {"target": inputs["retrieval_target"]}
        else:
            self.joint_query, self.joint_text = inputs["joint_query"], inputs["joint_text"]
            self.text = inputs["text_tokens"]
            self.images = {"target": inputs["target_tokens"], "reference": inputs["reference_tokens"]}
        prefix = "retrieval_" if retrieval else ""
        self.text_proj = _linear(inputs, f"{prefix}text_proj")
        self.vision_proj = _linear(inputs, f"{prefix}vision_proj")

    def compose(self, images: torch.Tensor | None, text: TextBatch | None) -> types.SimpleNamespace:
        if images is not None and text is not None:
            index = _Images.index(images)
            return types.SimpleNamespace(query=self.joint_query[index], text=self.joint_text[index])
        if images is not None:
            role = "reference" if images.shape[1] == 2 else "target"
            return types.SimpleNamespace(query=self.images[role][_Images.index(images)], text=None)
        return types.SimpleNamespace(query=None, text=self.text[text.ids[:, 0]])

    def composed_feature(self, images: torch.Tensor, text: TextBatch) -> torch.Tensor:
        return F.normalize(self.text_proj(self.compose(images, text).text[:, 0]), dim=-1)

    def target_features(self, images: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.vision_proj(self.compose(images, None).query), dim=-1)


def _port_method(config: CaLaConfig, inputs: dict[str, torch.Tensor], retrieval: bool = False) -> CaLa:
    method = object.__new__(CaLa)
    nn.Module.__init__(method)
    method.config = config
    method.backbone = _Backbone(inputs, retrieval)
    method.context = None
    method.tac = _load(TwinAttentionCompositor(H, config.tac_repeats), inputs, "tac.", _port_name)
    method.hca = _load(HingeCrossAttention(H, config.hca_dropout), inputs, "hca.", _port_name)
    return method.train()


def port_terms(inputs: dict[str, torch.Tensor], readings: str) -> dict[str, torch.Tensor]:
    config = build_config(CaLaConfig, {"readings": readings}, "cala")
    method = _port_method(config, inputs)
    index = torch.arange(B)
    text = TextBatch(ids=index.unsqueeze(1).expand(B, T).contiguous(), mask=inputs["text_mask"].bool())
    reference_images = torch.cat([_Images.make(index), torch.zeros(B, 1, dtype=torch.float64)], dim=1)
    batch = Batch(index=index, reference=reference_images, target=_Images.make(index), text=text, texts=[])
    with _seeded(DROPOUT_SEED):
        logits = method.logits(batch)
    with _seeded(DROPOUT_SEED):
        out = method.training_step(batch, 0, 0)
    terms = {"matching_logits": logits["matching"], "aligning_logits": logits["aligning"],
             "reasoning_logits": logits["reasoning"],
             "contrastive_loss": torch.tensor(out.components["contrastive"], dtype=torch.float64),
             "reasoning_loss": torch.tensor(out.components["reasoning"], dtype=torch.float64), "loss": out.loss,
             "visual_gap": method.tac(inputs["reference_tokens"], inputs["target_tokens"])}
    hca_text, hca_mask = inputs["text_tokens"], text.mask
    if config.hca_text == "release":
        hca_text, hca_mask = batch_longest(hca_text, hca_mask)
    with _seeded(DROPOUT_SEED):
        terms["pseudo_target"] = method.hca(inputs["joint_query"], hca_text, hca_mask, inputs["target_tokens"])
    with torch.no_grad():
        terms["pseudo_target_eval"] = method.hca.eval()(inputs["joint_query"], hca_text, hca_mask,
                                                        inputs["target_tokens"])
    retrieval = _port_method(config, inputs, retrieval=True).eval()
    with torch.no_grad():
        few = index[:RETRIEVAL_B]
        terms["retrieval_query"] = retrieval.encode_queries(reference_images[few], text.select(few))
        targets = retrieval.encode_targets(_Images.make(few))
    terms["retrieval_target"] = targets[:, 0] if config.query == "release" else targets
    return terms
