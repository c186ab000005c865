"""The ``blip2`` backbone: a BLIP-2 image-text-retrieval checkpoint through ``transformers``.

What SPRC, TME and ConeSep train: a frozen ViT (its post-layer-norm patch tokens are what
the harness caches), and a trainable Q-Former (query tokens, BERT-style text embeddings,
the Q-Former layers, ``text_projection`` and ``vision_projection``). The checkpoint must be
one whose Q-Former takes text, i.e. saved as ``Blip2ForImageTextRetrieval`` (such as
``Salesforce/blip2-itm-vit-g``); a captioning checkpoint (OPT, Flan-T5) has no text path.

``--weights`` is a local directory (``save_pretrained`` layout, with the tokenizer files)
or a hub id that is already in the local Hugging Face cache: nothing is ever downloaded.

Two details that the ``transformers`` classes do not handle for us:

- ``Blip2QFormerModel.forward`` has no ``input_ids`` argument: text must go through
  ``Blip2TextEmbeddings(input_ids=..., query_embeds=queries)``, which prepends the query
  embeddings to the word + position embeddings (LAVIS's ``BertEmbeddings`` does the same).
- The Q-Former layers insist on image features whenever query tokens are present, but
  SPRC's prompt branch (and every ``compose(None, text)``) runs queries + text *without*
  an image, which LAVIS-based code gets from a patched ``no_img`` flag. So :meth:`compose`
  runs the layers' own sub-modules itself: joint self-attention over [queries; text],
  cross-attention from the query positions only when an image is given, then the query
  and text feed-forward branches. With an image, this is exactly ``Blip2QFormerLayer``.

Images are preprocessed as ``BlipImageProcessor`` does (resize to the configured size,
bicubic; rescale; CLIP mean/std), batched in torch (:mod:`cirbench.backbones.preprocess`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from cirbench.backbones.base import Backbone, ComposerOutput, TextBatch, weights_digest
from cirbench.backbones.preprocess import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, ImagePrep

DEFAULT_WEIGHTS = "Salesforce/blip2-itm-vit-g"
MAX_TEXT_LENGTH = 32  # SPRC's and TME's max_txt_len
_PIL_BICUBIC, _PIL_BILINEAR = 3, 2


def _require_transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "the blip2 backbone needs transformers and safetensors: pip install 'cirbench[blip2]'"
        ) from exc
    return transformers


def resolve_weights(weights: str | None) -> Path:
    """A local checkpoint directory for ``weights``: the directory itself, or the snapshot
    of a hub id in the local Hugging Face cache (never downloaded)."""
    name = weights or DEFAULT_WEIGHTS
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.exists() or name.startswith((".", "/", "~")) or name.count("/") != 1:
        raise FileNotFoundError(f"blip2 weights {name!r}: not a checkpoint directory, nor a hub id of the form org/name")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id=name, local_files_only=True))
    except LocalEntryNotFoundError:
        raise FileNotFoundError(
            f"blip2 weights {name!r} are not in the local Hugging Face cache "
            f"({os.environ.get('HF_HUB_CACHE') or os.environ.get('HF_HOME') or '~/.cache/huggingface'}); cirbench "
            f"never downloads weights. Fetch them on a machine with internet (huggingface-cli download {name}) "
            "and copy the cache over, or pass --weights <local directory>"
        ) from None


def image_prep_from_checkpoint(path: Path, image_size: int) -> ImagePrep:
    """The checkpoint's ``preprocessor_config.json`` as an :class:`ImagePrep` (BLIP's
    defaults, the vision config's image size, when the file is absent)."""
    config: dict[str, Any] = {}
    file = path / "preprocessor_config.json"
    if file.is_file():
        config = json.loads(file.read_text())
        config = config.get("image_processor", config)
    size = config.get("size") or {}
    if isinstance(size, int):
        size = {"height": size, "width": size}
    height = int(size.get("height", size.get("shortest_edge", image_size)))
    width = int(size.get("width", size.get("shortest_edge", image_size)))
    resample = config.get("resample", _PIL_BICUBIC)
    if resample not in (_PIL_BICUBIC, _PIL_BILINEAR):
        raise ValueError(f"{file}: resample {resample} is not supported (bicubic=3 or bilinear=2)")
    normalise = config.get("do_normalize", True)
    return ImagePrep(
        size=(height, width),
        mean=tuple(config.get("image_mean", OPENAI_CLIP_MEAN)) if normalise else (0.0, 0.0, 0.0),
        std=tuple(config.get("image_std", OPENAI_CLIP_STD)) if normalise else (1.0, 1.0, 1.0),
        resize_mode="squash",
        interpolation="bicubic" if resample == _PIL_BICUBIC else "bilinear",
    )


def _first(output: Any) -> torch.Tensor:
    """A sub-module's hidden states (older ``transformers`` return tuples)."""
    return output[0] if isinstance(output, tuple) else output


class Blip2Backbone(Backbone):
    """BLIP-2 frozen ViT + trainable Q-Former (see the module docstring)."""

    name = "blip2"
    description = "BLIP-2 ITM checkpoint (transformers): frozen ViT + trainable Q-Former; --weights DIR or cached hub id"
    default_lr = 1e-5

    def __init__(self, model: nn.Module, tokenizer: Any, prep: ImagePrep, source: str, max_text_length: int = MAX_TEXT_LENGTH) -> None:
        super().__init__()
        qformer_config = model.config.qformer_config
        if not getattr(qformer_config, "use_qformer_text_input", False) or not hasattr(model, "embeddings"):
            raise ValueError(
                f"blip2 weights {source}: this Q-Former takes no text (use_qformer_text_input is off); use an "
                f"image-text retrieval checkpoint such as {DEFAULT_WEIGHTS}"
            )
        self.vision = model.vision_model.requires_grad_(False).eval()
        self.query_tokens = model.query_tokens
        self.embeddings = model.embeddings
        self.qformer = model.qformer
        self.text_proj = model.text_projection
        self.vision_proj = model.vision_projection
        self.tokenizer = tokenizer
        self.prep = prep
        self.source = source
        self.max_text_length = max_text_length
        self.hidden_size = int(qformer_config.hidden_size)
        self.embed_dim = int(model.config.image_text_hidden_size)
        self.num_query_tokens = int(model.config.num_query_tokens)
        self.image_shape = (3, *prep.size)
        self.gradient_checkpointing = False
        self._tower_key: str | None = None
        probe = tokenizer(["a"], return_tensors="pt")["input_ids"][0]
        if tokenizer.cls_token_id is None or int(probe[0]) != tokenizer.cls_token_id:
            raise ValueError(f"blip2 weights {source}: the tokenizer does not start texts with a [CLS] token")

    @classmethod
    def build(cls, seed: int, cache_dir: Path, weights: str | None) -> "Blip2Backbone":
        """The checkpoint ``weights`` (the Q-Former is pre-trained: ``seed`` changes nothing)."""
        return cls.from_pretrained(weights)

    @classmethod
    def from_pretrained(cls, weights: str | None) -> "Blip2Backbone":
        """Load ``weights`` (a directory or a cached hub id) on the CPU, in float32."""
        transformers = _require_transformers()
        path = resolve_weights(weights)
        transformers.utils.logging.disable_progress_bar()
        try:
            model, info = transformers.Blip2ForImageTextRetrieval.from_pretrained(
                path, local_files_only=True, output_loading_info=True
            )
        except (OSError, ValueError) as exc:
            raise ValueError(f"blip2 weights {weights or DEFAULT_WEIGHTS} ({path}): cannot load a BLIP-2 checkpoint: {exc}") from exc
        needed = ("embeddings.", "qformer.", "query_tokens", "text_projection", "vision_projection", "vision_model.")
        missing = sorted(k for k in info["missing_keys"] if k.startswith(needed))
        if missing:
            raise ValueError(
                f"blip2 weights {path}: the checkpoint lacks {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}; "
                f"it is not an image-text retrieval checkpoint (e.g. {DEFAULT_WEIGHTS})"
            )
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ValueError(f"blip2 weights {path}: no usable tokenizer files in the checkpoint directory: {exc}") from exc
        prep = image_prep_from_checkpoint(path, int(model.config.vision_config.image_size))
        return cls(model.float(), tokenizer, prep, source=str(weights or DEFAULT_WEIGHTS))

    def tower_key(self) -> str:
        if self._tower_key is None:
            digest = weights_digest(self.vision, self.prep.describe())
            slug = "".join(c if c.isalnum() else "_" for c in Path(self.source).name)[-40:]
            self._tower_key = f"blip2-{slug}-{digest:08x}"
        return self._tower_key

    def train(self, mode: bool = True) -> "Blip2Backbone":
        super().train(mode)
        self.vision.eval()
        return self

    def preprocess(self, images: list[np.ndarray]) -> torch.Tensor:
        return self.prep(images)

    def encode_image_tokens(self, pixels: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            dtype = self.vision.embeddings.patch_embedding.weight.dtype
            return self.vision(pixel_values=pixels.to(dtype)).last_hidden_state

    def tokenize(self, texts: list[str]) -> TextBatch:
        encoded = self.tokenizer(
            list(texts), padding="longest", truncation=True, max_length=self.max_text_length, return_tensors="pt"
        )
        return TextBatch(encoded["input_ids"], encoded["attention_mask"].bool())

    def _layer(
        self, layer: nn.Module, hidden: torch.Tensor, mask: torch.Tensor | None, image: torch.Tensor | None, num_queries: int
    ) -> torch.Tensor:
        attended = _first(layer.attention(hidden, attention_mask=mask))
        query = attended[:, :num_queries]
        if image is not None and layer.has_cross_attention:
            query = _first(layer.crossattention(query, encoder_hidden_states=image))
        out = layer.feed_forward_chunk_query(query)
        if attended.shape[1] > num_queries:
            out = torch.cat([out, layer.feed_forward_chunk(attended[:, num_queries:])], dim=1)
        return out

    def word_embeddings(self, text: TextBatch) -> torch.Tensor:
        return self.embeddings.word_embeddings(text.ids)

    def compose(
        self,
        image_tokens: torch.Tensor | None,
        text: TextBatch | None,
        queries: torch.Tensor | None = None,
    ) -> ComposerOutput:
        if image_tokens is None and text is None:
            raise ValueError("blip2 compose: give image tokens, a text batch, or both")
        batch = image_tokens.shape[0] if image_tokens is not None else text.ids.shape[0]  # type: ignore[union-attr]
        q = self.expand_queries(batch, queries)
        num_queries = q.shape[1]
        mask = None
        if text is not None:
            hidden = self.embeddings(input_ids=text.ids, query_embeds=q)
            keep = torch.cat([torch.ones(batch, num_queries, dtype=torch.bool, device=q.device), text.mask.bool()], dim=1)
            mask = torch.zeros(keep.shape, dtype=hidden.dtype, device=q.device)
            mask = mask.masked_fill(~keep, torch.finfo(hidden.dtype).min)[:, None, None, :]
        else:
            hidden = q
        hidden = self.qformer.dropout(self.qformer.layernorm(hidden))
        image = None if image_tokens is None else image_tokens.to(hidden.dtype)
        use_checkpoint = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        for layer in self.qformer.encoder.layer:
            if use_checkpoint:
                hidden = checkpoint(self._layer, layer, hidden, mask, image, num_queries, use_reentrant=False)
            else:
                hidden = self._layer(layer, hidden, mask, image, num_queries)
        return ComposerOutput(query=hidden[:, :num_queries], text=hidden[:, num_queries:] if text is not None else None)


SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def wordpiece_tokenizer(words: list[str]) -> Any:
    """A BERT-style fast tokenizer over ``words`` (plus the special tokens): the stand-in
    for the real BERT vocabulary in random-weight checkpoints."""
    transformers = _require_transformers()
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {token: i for i, token in enumerate(dict.fromkeys([*SPECIAL_TOKENS, *words]))}
    core = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    core.normalizer = normalizers.BertNormalizer(lowercase=True)
    core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    core.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
    )
    return transformers.BertTokenizerFast(
        tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]"
    )


TINY_CONFIG: dict[str, Any] = {
    "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "image_size": 32, "patch_size": 8},
    "qformer_config": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
                       "max_position_embeddings": 64, "cross_attention_frequency": 1, "use_qformer_text_input": True},
    "num_query_tokens": 8,
    "image_text_hidden_size": 32,
}
"""A random-weight BLIP-2 small enough for CPU tests (32x32 images, 16 patch tokens)."""

REAL_CONFIG: dict[str, Any] = {
    "qformer_config": {"use_qformer_text_input": True},
    "num_query_tokens": 32,
    "image_text_hidden_size": 256,
}
"""The blip2-itm-vit-g architecture (EVA ViT-g/14 at 224, 12-layer Q-Former of width 768)."""


def random_model(size: str = "tiny", seed: int = 0, words: list[str] | None = None) -> tuple[nn.Module, Any]:
    """A randomly initialised ``Blip2ForImageTextRetrieval`` (``tiny`` or ``real`` size) and
    a WordPiece tokenizer over ``words``, for tests and cost measurements."""
    transformers = _require_transformers()
    if size not in ("tiny", "real"):
        raise ValueError(f"blip2 random model: unknown size {size!r}; use tiny or real")
    tokenizer = wordpiece_tokenizer(list(words or []))
    spec = json.loads(json.dumps(TINY_CONFIG if size == "tiny" else REAL_CONFIG))
    if size == "tiny":
        spec["qformer_config"]["vocab_size"] = len(tokenizer)
    config = transformers.Blip2Config(**spec)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = transformers.Blip2ForImageTextRetrieval(config)
        nn.init.normal_(model.query_tokens, std=config.qformer_config.initializer_range)
    return model.eval(), tokenizer


def write_random_checkpoint(path: Path, size: str = "tiny", seed: int = 0, words: list[str] | None = None) -> Path:
    """Save a random-weight checkpoint (model, tokenizer, preprocessor config) to ``path``
    in the layout ``--weights`` reads; returns ``path``."""
    model, tokenizer = random_model(size, seed, words)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _require_transformers().utils.logging.disable_progress_bar()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    image_size = int(model.config.vision_config.image_size)
    (path / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "BlipImageProcessor", "size": {"height": image_size, "width": image_size},
        "resample": _PIL_BICUBIC, "do_normalize": True, "image_mean": list(OPENAI_CLIP_MEAN), "image_std": list(OPENAI_CLIP_STD),
    }, indent=2))
    return path
