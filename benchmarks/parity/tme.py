"""TME's parity adapter: ``He-Changhao/2025-CVPR-TME``'s training losses and GMM partition
against ``methods/tme.py``, on seeded float64 features (the harness contract:
``benchmarks/parity/harness.py``).

The release (``src/``) computes its four losses inline in
``Blip2QformerCirImageDiffFeatures.forward`` and the per-sample loss in ``per_loss``. The
adapter builds that class with ``object.__new__`` and fake encoders: ``ln_vision``,
``vision_proj`` and ``text_proj`` are identities, the Q-Former's image pass returns the
image "embeds" it is given (so the reference and target embeds *are* the seeded Q-Former
outputs, and ``d2t_proj`` returns the seeded ``F_diff``), and its text passes return, at the
position ``encode_fusion`` reads, the seeded query feature of the pass (``z_rm`` for
reference + text, ``z_pm`` for the prompt pass, ``z_rd`` for the ``F_diff`` pass) of the
sample whose caption it was given. The ``F_diff`` pass runs the release's own
``Qformer.BertEmbeddings.forward`` on the seeded word embeddings, which computes ``lsa``
(``robust_mse``). The tokenizer gives caption ``i`` the ids ``i * T + t`` (t < T), so that
the word-embedding table returns sample ``i``'s seeded word embeddings. ``forward`` runs
with ``warmup=None`` (the partitioned phase: all four losses) on the first batch, with the
loss settings of the release's own ``parse_args``/``Params`` (``positive_loss=RCL``,
``negative_loss=None``, ``trade_off=1``, ``positive_align_loss=MSE``, ...).

The partition is the release's ``Partitioner.fit_features`` (``utility.py``) with a stub
loader over the seeded batches and the fake model's real ``per_loss``: the per-sample loss
and similarity, their min-max normalisation, the GMM posterior of the clean component and
the clean mask, once with ``split_type=loss`` (the release's setting) and once with
``sim`` (the port's ``gmm_input=similarity``).

Randomness: the GMM's k-means start. The release calls ``GaussianMixture`` without a
``random_state``, so it draws from NumPy's global generator (seeded once, by its
``set_seed``); the port passes the run's seed as ``random_state``. ``np.random.seed(SEED)``
before each release fit and ``seed=SEED`` on the port give both the same stream.

Precision: the release allocates its loss buffers with ``torch.zeros`` at the default dtype
(float32) and hands sklearn what it gets; the adapter runs the release with float64 as
torch's default dtype, so the comparison is of the computations, not of float32 rounding.

The port's side is its own code: :func:`methods.tme.rcl_term` and
:func:`methods.tme.alignment_term` / :func:`methods.tme.word_target` (what ``TME.losses``
calls), :func:`methods.tme.batch_statistics` (what ``TME.per_sample_statistics`` calls per
batch), :func:`methods.tme.min_max` and :func:`methods.tme.gmm_clean_posterior`, under
``build_config(TMEConfig, {"readings": readings})``; the similarities are
``max_token_similarity`` of the normalised features, as the backbone gives them.
"""

from __future__ import annotations

import contextlib
import sys
import types
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from cirbench.backbones.base import max_token_similarity
from cirbench.settings.config import build_config
from cirbench_methods import tme as port

from . import harness

RELEASE = harness.Release(
    repo="He-Changhao/2025-CVPR-TME",
    files={
        "src/lavis/models/blip2_models/blip2_qformer_cir_image_diff_features.py": "117-237",
        "src/lavis/models/blip2_models/Qformer.py": "79-130",
        "src/utility.py": "57-101,193-222,259-294,330-359",
        "src/precompute_train.py": "212-237,245-265",
    },
    commit="7fe811992820d30828e24065eb0c7a7ba099dd3b",
)
SEED = 0
SAMPLES, BATCH, TOKENS, HIDDEN, TEXT_LEN = 64, 8, 32, 16, 12
"""64 samples in 8 batches of 8; 32 query tokens (``encode_fusion`` asserts 32), hidden
size 16, captions of 12 token positions."""

NOT_COMPARABLE = {
    "query features (z_rm, z_pm, z_rd, F_diff)": "the release's Q-Former passes (reference + text, prompt tokens + "
                                                "text, F_diff in the word positions) need BLIP-2 and its weights; "
                                                "the port runs its own composer (docs/tme.md: the passes the "
                                                "backbone interface forces); the adapter feeds the features both "
                                                "losses read",
    "lsa target's padding": "the release pads every caption to 32 tokens and averages all 32 word embeddings; "
                            "under lsa_target=release the port averages every position of the batch as its "
                            "backbone pads it (the formula is compared on the same padded embeddings)",
    "partition temperature": "per_loss reads the temperature without robust_infoNCE's clamp, so after an optimiser "
                             "step it can sit below 0.01 by that step's change; the port clamps it first. Equal "
                             "at any temperature >= 0.01 (the inputs' 0.02)",
    "warm-up, optimisers and shuffling": "the training loop (precompute_train.py: 3/2/1 warm-up epochs, a second "
                                         "AdamW over d2t_proj and the prompt in 'proj', reshuffled batches per "
                                         "epoch, AMP), not a term",
}


def make_inputs(seed: int) -> dict[str, torch.Tensor]:
    """Target and reference Q-Former tokens (N, 32, H), the three query features (N, H)
    (``z_rm`` leaning towards its own target on about half the samples, so that the
    per-sample losses are bimodal), ``F_diff`` (N, 32, H), word embeddings (N, T, H) with
    their mask, the clean labels of the loss batch, the batch order and the temperature
    (0.02: inside the release's clamp, low enough that some softmax entries fall below the
    release's 1e-7 guard)."""
    g = harness.generator(seed)
    target = harness.randn(g, SAMPLES, TOKENS, HIDDEN)
    reference = harness.randn(g, SAMPLES, TOKENS, HIDDEN)
    lean = (torch.rand(SAMPLES, generator=g, dtype=torch.float64) < 0.5).to(torch.float64)
    own = F.normalize(target, dim=-1)[:, 0]
    z_rm = harness.randn(g, SAMPLES, HIDDEN) * 0.3 + lean.unsqueeze(1) * 2.0 * own
    z_pm = harness.randn(g, SAMPLES, HIDDEN)
    z_rd = harness.randn(g, SAMPLES, HIDDEN)
    f_diff = harness.randn(g, SAMPLES, TOKENS, HIDDEN)
    words = harness.randn(g, SAMPLES, TEXT_LEN, HIDDEN)
    lengths = torch.randint(3, TEXT_LEN + 1, (SAMPLES,), generator=g)
    word_mask = (torch.arange(TEXT_LEN).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
    clean = (torch.rand(SAMPLES, generator=g, dtype=torch.float64) < 0.6).to(torch.float64)
    clean[:2] = torch.tensor([1.0, 0.0], dtype=torch.float64)  # the loss batch holds both kinds
    order = torch.randperm(SAMPLES, generator=g).to(torch.float64)
    return {"target": target, "reference": reference, "z_rm": z_rm, "z_pm": z_pm, "z_rd": z_rd, "f_diff": f_diff,
            "words": words, "word_mask": word_mask, "clean": clean, "order": order,
            "temperature": torch.tensor(0.02, dtype=torch.float64)}


def batches(inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The sample indices of each batch, in the seeded order (the first is the loss batch)."""
    return list(inputs["order"].long().split(BATCH))


# ----------------------------------------------------------------------------- the release


def _release_modules(release_dir: Path) -> dict[str, types.ModuleType]:
    import pandas  # noqa: F401  (imported once here: the stubs' restore of sys.modules must not re-import it)
    import tqdm  # noqa: F401

    src = Path(release_dir) / "src"
    vision = ["torchvision", "torchvision.transforms", "torchvision.transforms.functional"]
    registry = types.ModuleType("lavis.common.registry")
    registry.registry = types.SimpleNamespace(register_model=lambda name: (lambda cls: cls))
    blip2 = types.ModuleType("lavis.models.blip2_models.blip2")
    blip2.Blip2Base, blip2.disabled_train = nn.Module, (lambda self, mode=True: self)
    real = {"lavis.common.registry": registry, "lavis.models.blip2_models.blip2": blip2}
    stubs = [*vision, "lavis", "lavis.common.registry", "lavis.models.blip2_models.blip2", "transformers",
             "transformers.activations", "transformers.file_utils", "transformers.modeling_outputs",
             "transformers.modeling_utils", "transformers.utils", "transformers.models.bert.configuration_bert"]
    model = harness.load_release_module(src, "lavis/models/blip2_models/blip2_qformer_cir_image_diff_features.py",
                                        stubs, real, name="_release_tme_model")
    qformer = harness.load_release_module(src, "lavis/models/blip2_models/Qformer.py", stubs, real,
                                          name="_release_tme_qformer")
    utility = harness.load_release_module(src, "utility.py", vision, name="_release_tme_utility")
    train = harness.load_release_module(
        src, "precompute_train.py",
        [*vision, "lavis", "lavis.models", "lavis.models.blip2_models.blip2_qformer_cir_image_diff_features", "data",
         "precompute_evaluation"], name="_release_tme_train")
    return {"model": model, "qformer": qformer, "utility": utility, "train": train}


def _pn_loss(modules: dict[str, types.ModuleType]) -> dict[str, Any]:
    """The loss settings ``blip_finetune`` passes to ``forward``: ``parse_args`` defaults (plus
    train.sh's flags, none of which is a loss setting) through ``Params.set_params``."""
    with mock.patch.object(sys, "argv", ["precompute_train.py"]):
        args = modules["train"].parse_args()
    args.timestamp = None
    params = modules["utility"].Params()
    params.set_params(args)
    return dict(params.pn_loss)


def _fake_model(modules: dict[str, types.ModuleType], inputs: dict[str, torch.Tensor]) -> nn.Module:
    cls = modules["model"].Blip2QformerCirImageDiffFeatures
    model = object.__new__(cls)
    nn.Module.__init__(model)
    model.temp = nn.Parameter(inputs["temperature"].clone())
    model.ln_vision = nn.Identity()
    model.vision_proj = nn.Identity()
    model.text_proj = nn.Identity()
    model.max_txt_len = TEXT_LEN
    model.query_tokens = nn.Parameter(torch.zeros(1, TOKENS, HIDDEN, dtype=torch.float64))
    model.prompt_tokens = nn.Parameter(torch.zeros(1, TOKENS, HIDDEN, dtype=torch.float64))
    model.maybe_autocast = contextlib.nullcontext
    words = inputs["words"]

    def tokenizer(texts: list[str], **kwargs: Any) -> harness.Tokens:
        index = torch.tensor([int(t) for t in texts])
        ids = index.unsqueeze(1) * TEXT_LEN + torch.arange(TEXT_LEN).unsqueeze(0)
        return harness.Tokens(ids, inputs["word_mask"][index].long())

    model.tokenizer = tokenizer
    embeddings = types.SimpleNamespace(
        word_embeddings=nn.Embedding.from_pretrained(words.reshape(-1, HIDDEN)),
        position_embeddings=nn.Embedding.from_pretrained(torch.zeros(2 * TOKENS + TEXT_LEN, HIDDEN, dtype=torch.float64)),
        position_ids=torch.arange(2 * TOKENS + TEXT_LEN).unsqueeze(0),
        position_embedding_type="absolute", LayerNorm=nn.Identity(), dropout=nn.Identity(),
    )
    bert_embeddings = modules["qformer"].BertEmbeddings.forward

    def bert(input_ids: torch.Tensor | None = None, query_embeds: torch.Tensor | None = None,
             encoder_hidden_states: torch.Tensor | None = None, no_img: bool = False,
             image_diff: torch.Tensor | None = None, clean_label: torch.Tensor | None = None,
             pn_loss: dict | None = None, **kwargs: Any) -> Any:
        if input_ids is None:  # encode_image: the image "embeds" are the Q-Former outputs
            return types.SimpleNamespace(last_hidden_state=encoder_hidden_states)
        index = input_ids[:, 0] // TEXT_LEN
        query = inputs["z_pm"] if no_img else inputs["z_rd"] if image_diff is not None else inputs["z_rm"]
        hidden = torch.zeros(len(index), TOKENS + 1, HIDDEN, dtype=torch.float64)
        hidden[:, 0 if no_img else TOKENS] = query[index]
        out = types.SimpleNamespace(last_hidden_state=hidden)
        if image_diff is None:
            return out
        _, lsa = bert_embeddings(embeddings, input_ids=input_ids, query_embeds=query_embeds, no_img=no_img,
                                 image_diff=image_diff, clean_label=clean_label, pn_loss=pn_loss)
        return out, lsa

    model.Qformer = types.SimpleNamespace(bert=bert)
    return model


class _Dataset:
    """The triplets (its length) and one feature table for the names of their images."""

    def __init__(self, features: torch.Tensor, length: int) -> None:
        self.features, self.length = features, length

    def __len__(self) -> int:
        return self.length

    def get_image_features(self, names: torch.Tensor) -> torch.Tensor:
        return self.features[names]


class _Loader:
    """``(reference_name, target_name, captions, index)`` batches, as the release's loader
    yields them; references are names ``i`` and targets ``N + i`` of one feature table."""

    def __init__(self, inputs: dict[str, torch.Tensor]) -> None:
        self.dataset = _Dataset(torch.cat([inputs["reference"], inputs["target"]]), SAMPLES)
        self.order = batches(inputs)

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self):
        for index in self.order:
            yield index, index + SAMPLES, [str(int(i)) for i in index], index


def release_terms(release_dir: Path, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The release's losses on the first batch and its partition of all samples."""
    modules = _release_modules(release_dir)
    utility = modules["utility"]
    utility.tqdm = lambda iterable, **kwargs: iterable
    pn_loss = _pn_loss(modules)
    terms: dict[str, torch.Tensor] = {}
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with harness.on_cpu():
            model = _fake_model(modules, inputs)
            index = batches(inputs)[0]
            model.d2t_proj = lambda difference: inputs["f_diff"][index]
            samples = {"image": inputs["reference"][index], "target": inputs["target"][index],
                       "text_input": [str(int(i)) for i in index]}
            losses = model(samples, inputs["clean"][index], pn_loss, None)
            terms.update({name: losses[name] for name in ("lrm", "lpm", "lrd", "lsa")})
            for split, suffix in (("loss", ""), ("sim", "_by_similarity")):
                partitioner = utility.Partitioner("GMM", split, 0.5, dataset_name="CIRR")
                np.random.seed(SEED)
                pred = partitioner.fit_features(model, _Loader(inputs), {"eval": lambda caption: caption})
                if split == "loss":
                    terms["normalised_loss"] = partitioner.losses
                    terms["normalised_similarity"] = partitioner.sims
                terms[f"clean_posterior{suffix}"] = partitioner.prob
                terms[f"clean_mask{suffix}"] = pred
            loss, sim = torch.zeros(SAMPLES), torch.zeros(SAMPLES)
            for i in batches(inputs):
                loss[i], sim[i] = model.per_loss(inputs["reference"][i], inputs["target"][i], [str(int(j)) for j in i])
            terms["per_sample_loss"], terms["per_sample_similarity"] = loss, sim
    finally:
        torch.set_default_dtype(previous)
    return {k: harness.as_tensor(v) for k, v in terms.items()}


# ----------------------------------------------------------------------------- the port


def port_terms(inputs: dict[str, torch.Tensor], readings: str) -> dict[str, torch.Tensor]:
    """The port's losses on the first batch and its partition of all samples."""
    c = build_config(port.TMEConfig, {"readings": readings}, "tme")
    temperature = inputs["temperature"].clamp(min=c.min_temperature)
    targets = F.normalize(inputs["target"], dim=-1)

    def sim(query: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return max_token_similarity(F.normalize(query[index], dim=-1), targets[index])

    index = batches(inputs)[0]
    clean = inputs["clean"][index].bool()
    terms = {
        "lrm": port.rcl_term(sim(inputs["z_rm"], index), temperature, clean, c.rcl_clamp),
        "lpm": port.rcl_term(sim(inputs["z_pm"], index), temperature, clean, c.rcl_clamp),
        "lrd": port.rcl_term(sim(inputs["z_rd"], index), temperature, None, c.rcl_clamp),
        "lsa": port.alignment_term(inputs["f_diff"][index],
                                   port.word_target(inputs["words"][index], inputs["word_mask"][index], c.lsa_target),
                                   clean),
    }
    loss, similarity = torch.zeros(SAMPLES, dtype=torch.float64), torch.zeros(SAMPLES, dtype=torch.float64)
    for i in batches(inputs):
        loss[i], similarity[i] = port.batch_statistics(sim(inputs["z_rm"], i), temperature)
    terms["per_sample_loss"], terms["per_sample_similarity"] = loss, similarity
    terms["normalised_loss"] = torch.from_numpy(port.min_max(loss.numpy()))
    terms["normalised_similarity"] = torch.from_numpy(port.min_max(similarity.numpy()))
    for values, low, suffix in ((loss, True, ""), (similarity, False, "_by_similarity")):
        posterior = port.gmm_clean_posterior(values.numpy(), clean_is_low=low, seed=SEED, max_iter=c.gmm_max_iter,
                                             tol=c.gmm_tol, reg_covar=c.gmm_reg_covar)
        terms[f"clean_posterior{suffix}"] = torch.from_numpy(posterior)
        terms[f"clean_mask{suffix}"] = torch.from_numpy(posterior > c.threshold)
    return {k: harness.as_tensor(v) for k, v in terms.items()}
