"""The ``clip`` backbone: frozen ``open_clip`` towers under a trainable Q-Former-style composer.

Both CLIP towers stay frozen. The image tower's patch tokens (after ``ln_post``, the
tokens open_clip returns with ``output_tokens``) are what the harness caches; the text
tower runs inside :meth:`ClipBackbone.compose` on whatever texts a method passes (its
per-token outputs after ``ln_final``). On top sits the composer of the ``tiny`` backbone
(:class:`~cirbench.backbones.tiny.ComposerLayer`): learnable query tokens and the projected
text tokens in joint self-attention, the query positions cross-attending to the projected
image tokens. The composed feature is the output at the text's first position (CLIP's
start-of-text token, whose frozen feature is the same for every text, so the position
works as a classification token); targets are the query tokens' outputs.

``--weights`` forms (nothing is ever downloaded):

- ``ARCH:TAG``, e.g. ``ViT-L-14:openai``: an open_clip pretrained tag, found in the local
  Hugging Face cache or open_clip's download folder (``~/.cache/clip``);
- ``ARCH:/path/to/checkpoint.pt``: a local checkpoint file for a built-in architecture;
- a directory in open_clip's ``local-dir`` layout (``open_clip_config.json`` and a weights
  file), or ``hf-hub:org/name`` already in the local Hugging Face cache;
- ``ARCH:random``: seeded random towers of the real size (for cost measurements).

The composer's size comes from ``cirbench_composer.json`` in a weights directory when
present, otherwise from :data:`DEFAULT_COMPOSER`. Only vision-transformer image towers are
supported (they expose patch tokens); a ResNet tower is refused with an error.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from cirbench.backbones.base import Backbone, ComposerOutput, TextBatch, weights_digest
from cirbench.backbones.preprocess import ImagePrep
from cirbench.backbones.tiny import ComposerLayer

DEFAULT_WEIGHTS = "ViT-L-14:openai"
COMPOSER_FILE = "cirbench_composer.json"
_RANDOM_TOWER_SEED = 1234


@dataclass(frozen=True)
class ComposerSpec:
    """The trainable composer's size. ``embed_dim`` None means the CLIP model's own."""

    hidden_size: int = 512
    num_layers: int = 4
    num_heads: int = 8
    num_query_tokens: int = 32
    embed_dim: int | None = None


DEFAULT_COMPOSER = ComposerSpec()


def _require_open_clip() -> Any:
    try:
        import open_clip
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("the clip backbone needs open_clip (and torchvision): pip install 'cirbench[clip]'") from exc
    return open_clip


def _cached_tag_file(open_clip: Any, arch: str, tag: str) -> str:
    """The local file of an open_clip pretrained tag, or a FileNotFoundError that says why."""
    cfg = open_clip.get_pretrained_cfg(arch, tag)
    if not cfg:
        tags = open_clip.list_pretrained_tags_by_model(arch)
        raise ValueError(f"clip weights {arch}:{tag}: unknown tag; tags of {arch}: {', '.join(tags) or 'none'}")
    tried = []
    if cfg.get("hf_hub"):
        from huggingface_hub import hf_hub_download

        repo, filename = os.path.split(cfg["hf_hub"])  # "org/repo/" names the repo's default file
        filename = filename or "open_clip_pytorch_model.bin"
        names = [filename]
        if filename == "open_clip_pytorch_model.bin":
            names.insert(0, "open_clip_model.safetensors")
        elif filename.endswith((".bin", ".pth")):
            names.insert(0, filename[:-4] + ".safetensors")
        for name in names:
            try:
                return hf_hub_download(repo_id=repo, filename=name, local_files_only=True)
            except Exception:  # noqa: BLE001 - any lookup failure means "not cached"
                tried.append(f"hf-hub {repo}/{name}")
    if cfg.get("url"):
        local = Path(os.path.expanduser("~/.cache/clip")) / os.path.basename(cfg["url"])
        if local.is_file():
            return str(local)
        tried.append(str(local))
    raise FileNotFoundError(
        f"clip weights {arch}:{tag} are not in a local cache (looked for: {'; '.join(tried)}); cirbench never "
        "downloads weights: copy them there from a machine with internet, or pass ARCH:/path/to/checkpoint"
    )


def load_open_clip(weights: str | None) -> tuple[nn.Module, Any, str, Path | None]:
    """Resolve ``weights`` (see the module docstring) to an open_clip model, its tokenizer,
    a description of the source, and the weights directory (if any)."""
    open_clip = _require_open_clip()
    spec = weights or DEFAULT_WEIGHTS
    directory: Path | None = None
    if spec.startswith("hf-hub:"):
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError

        try:
            directory = Path(snapshot_download(repo_id=spec[len("hf-hub:"):], local_files_only=True))
        except LocalEntryNotFoundError:
            raise FileNotFoundError(f"clip weights {spec}: not in the local Hugging Face cache; cirbench never downloads weights") from None
    elif Path(spec).expanduser().is_dir():
        directory = Path(spec).expanduser()
    elif spec.startswith((".", "/", "~")):
        raise FileNotFoundError(f"clip weights {spec}: no such directory")
    if directory is not None:
        if not (directory / "open_clip_config.json").is_file():
            raise FileNotFoundError(f"clip weights {spec}: {directory} has no open_clip_config.json")
        name = f"local-dir:{directory}"
        model = open_clip.create_model(name)
        return model, open_clip.get_tokenizer(name), spec, directory
    arch, sep, source = spec.partition(":")
    if not sep or not source:
        raise ValueError(
            f"clip weights {spec!r}: expected ARCH:TAG (e.g. ViT-L-14:openai), ARCH:/path/to/checkpoint, "
            "ARCH:random, a local directory or hf-hub:org/name"
        )
    if arch not in open_clip.list_models():
        raise ValueError(f"clip weights {spec!r}: unknown open_clip architecture {arch!r}")
    if source == "random":
        with torch.random.fork_rng():
            torch.manual_seed(_RANDOM_TOWER_SEED)
            model = open_clip.create_model(arch, pretrained=None)
    else:
        file = Path(source).expanduser()
        checkpoint_file = str(file) if file.is_file() else _cached_tag_file(open_clip, arch, source)
        model = open_clip.create_model(arch, pretrained=checkpoint_file)
    return model, open_clip.get_tokenizer(arch), spec, None


def image_prep_from_model(model: nn.Module) -> ImagePrep:
    """The visual tower's ``preprocess_cfg`` as an :class:`ImagePrep`."""
    cfg = dict(getattr(model.visual, "preprocess_cfg", {}) or {})
    size = cfg.get("size", model.visual.image_size)
    size = (size, size) if isinstance(size, int) else tuple(size)
    mode = cfg.get("resize_mode", "shortest")
    if mode not in ("shortest", "squash"):
        raise ValueError(f"clip: resize mode {mode!r} of this checkpoint is not supported (shortest or squash)")
    interpolation = cfg.get("interpolation", "bicubic")
    if interpolation not in ("bicubic", "bilinear"):
        raise ValueError(f"clip: interpolation {interpolation!r} of this checkpoint is not supported")
    return ImagePrep(size=(int(size[0]), int(size[1])), mean=tuple(cfg.get("mean")), std=tuple(cfg.get("std")),
                     resize_mode=mode, interpolation=interpolation)


class ClipBackbone(Backbone):
    """Frozen open_clip towers + trainable composer (see the module docstring)."""

    name = "clip"
    description = "open_clip frozen towers + trainable Q-Former-style composer; --weights ARCH:TAG, ARCH:FILE or DIR"
    default_lr = 1e-4  # the composer starts from random weights (BLIP-2's Q-Former is pretrained)

    def __init__(self, model: nn.Module, tokenizer: Any, source: str, composer: ComposerSpec = DEFAULT_COMPOSER, seed: int = 0) -> None:
        super().__init__()
        visual = model.visual
        if not hasattr(visual, "output_tokens") or not hasattr(visual, "transformer"):
            raise ValueError(f"clip weights {source}: the image tower ({type(visual).__name__}) is not a vision transformer with patch tokens")
        model.requires_grad_(False)
        self.clip = model.eval()
        self.tokenizer = tokenizer
        self.source = source
        self.prep = image_prep_from_model(model)
        self.image_shape = (3, *self.prep.size)
        self.hidden_size = composer.hidden_size
        self.embed_dim = composer.embed_dim or int(self._clip_embed_dim())
        self.num_query_tokens = composer.num_query_tokens
        self.composer_spec = composer
        self.gradient_checkpointing = False
        self._tower_key: str | None = None
        image_width = int(visual.transformer.width)
        text_width = int(model.text.width if hasattr(model, "text") else model.transformer.width)
        hidden = composer.hidden_size
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.image_in = nn.Sequential(nn.Linear(image_width, hidden), nn.LayerNorm(hidden))
            self.text_in = nn.Sequential(nn.Linear(text_width, hidden), nn.LayerNorm(hidden))
            self.query_tokens = nn.Parameter(torch.randn(1, composer.num_query_tokens, hidden) * 0.02)
            self.layers = nn.ModuleList(ComposerLayer(hidden, composer.num_heads) for _ in range(composer.num_layers))
            self.final_norm = nn.LayerNorm(hidden)
            self.text_proj = nn.Linear(hidden, self.embed_dim)
            self.vision_proj = nn.Linear(hidden, self.embed_dim)

    @classmethod
    def build(cls, seed: int, cache_dir: Path, weights: str | None) -> "ClipBackbone":
        """The towers of ``weights`` and a composer initialised from ``seed``."""
        return cls.from_weights(weights, seed=seed)

    @classmethod
    def from_weights(cls, weights: str | None, seed: int = 0) -> "ClipBackbone":
        """Build from a ``--weights`` value (see the module docstring)."""
        model, tokenizer, source, directory = load_open_clip(weights)
        composer = DEFAULT_COMPOSER
        if directory is not None and (directory / COMPOSER_FILE).is_file():
            try:
                composer = ComposerSpec(**json.loads((directory / COMPOSER_FILE).read_text()))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{directory / COMPOSER_FILE}: not a composer spec ({exc})") from exc
        return cls(model, tokenizer, source, composer, seed)

    def _clip_embed_dim(self) -> int:
        proj = getattr(self.clip.visual, "proj", None)
        return int(proj.shape[1]) if proj is not None else int(self.clip.visual.output_dim)

    def tower_key(self) -> str:
        if self._tower_key is None:
            digest = weights_digest(self.clip.visual, self.prep.describe())
            slug = "".join(c if c.isalnum() or c in "-" else "_" for c in Path(self.source).name)[-40:]
            self._tower_key = f"clip-{slug}-{digest:08x}"
        return self._tower_key

    def train(self, mode: bool = True) -> "ClipBackbone":
        super().train(mode)
        self.clip.eval()
        return self

    def preprocess(self, images: list[np.ndarray]) -> torch.Tensor:
        return self.prep(images)

    def encode_image_tokens(self, pixels: torch.Tensor) -> torch.Tensor:
        visual = self.clip.visual
        with torch.no_grad():
            visual.output_tokens = True
            try:
                _, tokens = visual(pixels.to(visual.conv1.weight.dtype))
            finally:
                visual.output_tokens = False
        return tokens

    def tokenize(self, texts: list[str]) -> TextBatch:
        ids = self.tokenizer(list(texts))
        mask = ids != 0
        length = max(1, int(mask.sum(dim=1).max()))
        return TextBatch(ids[:, :length].contiguous(), mask[:, :length].contiguous())

    @torch.no_grad()
    def text_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        """The frozen text tower's per-token outputs (B, T, D_t) for token ids (B, T)."""
        if hasattr(self.clip, "text"):  # CustomTextCLIP: its text tower returns tokens itself
            tower = self.clip.text
            full = torch.zeros(ids.shape[0], tower.context_length, dtype=ids.dtype, device=ids.device)
            full[:, : ids.shape[1]] = ids
            tower.output_tokens = True
            try:
                return tower(full)[1][:, : ids.shape[1]]
            finally:
                tower.output_tokens = False
        clip, length = self.clip, ids.shape[1]
        cast = clip.transformer.get_cast_dtype()
        x = clip.token_embedding(ids).to(cast) + clip.positional_embedding[:length].to(cast)
        mask = None if clip.attn_mask is None else clip.attn_mask[:length, :length]
        return clip.ln_final(clip.transformer(x, attn_mask=mask))

    def word_embeddings(self, text: TextBatch) -> torch.Tensor:
        """The frozen text tower's tokens through the composer's input projection (the
        composer has no word-embedding table of its own)."""
        return self.text_in(self.text_tokens(text.ids).float())

    def compose(
        self,
        image_tokens: torch.Tensor | None,
        text: TextBatch | None,
        queries: torch.Tensor | None = None,
    ) -> ComposerOutput:
        if image_tokens is None and text is None:
            raise ValueError("clip compose: give image tokens, a text batch, or both")
        batch = image_tokens.shape[0] if image_tokens is not None else text.ids.shape[0]  # type: ignore[union-attr]
        q = self.expand_queries(batch, queries)
        num_queries = q.shape[1]
        parts, padding = [q], None
        if text is not None:
            parts.append(self.text_in(self.text_tokens(text.ids).float()))
            padding = torch.cat([torch.zeros(batch, num_queries, dtype=torch.bool, device=q.device), ~text.mask.bool()], 1)
        x = torch.cat(parts, dim=1)
        image = None if image_tokens is None else self.image_in(image_tokens.float())
        use_checkpoint = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        for layer in self.layers:
            if use_checkpoint:
                x = checkpoint(layer, x, padding, num_queries, image, use_reentrant=False)
            else:
                x = layer(x, padding, num_queries, image)
        x = self.final_norm(x)
        return ComposerOutput(query=x[:, :num_queries], text=x[:, num_queries:] if text is not None else None)


TINY_MODEL_CONFIG: dict[str, Any] = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "head_width": 16, "patch_size": 8},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}
"""A random-weight CLIP small enough for CPU tests (32x32 images, 16 patch tokens)."""

TINY_COMPOSER = ComposerSpec(hidden_size=64, num_layers=2, num_heads=4, num_query_tokens=8)


def write_random_checkpoint(path: Path, seed: int = 0, model_cfg: dict[str, Any] | None = None,
                            composer: ComposerSpec = TINY_COMPOSER) -> Path:
    """Save random CLIP towers in open_clip's ``local-dir`` layout (plus the composer spec)
    to ``path``, for tests; returns ``path``."""
    _require_open_clip()
    from open_clip.model import CLIP

    cfg = json.loads(json.dumps(model_cfg or TINY_MODEL_CONFIG))
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = CLIP(**cfg)
    torch.save(model.state_dict(), path / "open_clip_pytorch_model.bin")
    (path / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg, "preprocess_cfg": {}}, indent=2))
    (path / COMPOSER_FILE).write_text(json.dumps(asdict(composer), indent=2))
    return path
