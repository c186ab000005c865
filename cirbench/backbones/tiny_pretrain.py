"""Every pre-training of the ``tiny`` backbone, run by the harness itself (no download) and
cached under the data root, and :func:`build_tiny`, which turns a ``--weights`` tag into a
backbone.

The papers fine-tune a BLIP-2 whose Q-Former was pre-trained in two ways before any
noisy-triplet training: image-text alignment (BLIP-2 stage 1) and, through the
composed-retrieval checkpoints they start from, composition itself. ``tiny`` mirrors that,
always on synthetic data disjoint from the ``shapes`` benchmark:

- ``stage1``: the composer trained with BLIP-2's image-text contrastive loss on rendered
  scenes of 1 or 5 objects and their captions (the benchmark's scenes have 2 to 4 objects
  and no captions);
- ``cir`` (the default): the ``pretrained`` tower, a composer of width 64 trained by
  ``stage1`` on it, then composed retrieval (reference + modification text -> target,
  InfoNCE) on scenes of 5 to 7 objects whose modification texts use another template set
  than the benchmark's, until more no longer lifts its own held-out retrieval, so no
  pre-training image, scene or text is a benchmark one;
- ``pretrained``: the frozen tower (not the composer) contrastively pre-trained on captioned
  scenes, with a random composer (the ``cir`` start's tower);
- ``random``: nothing pre-trained.

The default start is not pre-trained where it is used: ``cir`` loads the released file
(:mod:`cirbench.backbones.tiny_start`), made by running these functions once
(``cirbench start rebuild --write``, :mod:`cirbench.backbones.tiny_rebuild`). ``stage1`` and
``pretrained`` are computed on first use (from seed 0, whatever a cell's seed, as with a
released checkpoint) and cached as ``<cache_dir>/towers/*.pt``.
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from cirbench.backbones import tiny_release
from cirbench.backbones.base import max_token_similarity, state_digest
from cirbench.backbones.tiny import TinyBackbone, TinyTower
from cirbench.backbones.tiny_start import shipped_backbone
from cirbench.data.datasets.shapes import (
    SHAPES_COLOURS,
    SHAPES_SHAPES,
    SHAPES_SIZES,
    SceneSpace,
    ShapeObject,
    build_edit_split,
    caption_scene,
    render_scenes,
)
from cirbench.results.atomic import atomic_write

TINY_WEIGHTS: dict[str, str] = {
    "cir": "composer pre-trained image-text, then on composed retrieval over disjoint scenes (default)",
    "stage1": "composer pre-trained image-text only (BLIP-2 stage 1 analogue)",
    "random": "nothing pre-trained: random composer",
    "pretrained": "tower (not composer) pre-trained contrastively; random composer",
}
DEFAULT_TINY_WEIGHTS = "cir"

TOWER_VERSION = "1"
STAGE1_VERSION = "1"
CIR_VERSION = "3"
"""v3: 2,400 steps on 6,000 scenes (v2: 600 on 2,000), converged on its own held-out task (docs/benchmark.md)."""
START_SHAPE: dict[str, int] = {"hidden_size": 64, "embed_dim": 64, "num_query_tokens": 8}
"""The released start's composer (the rest of :class:`TinyBackbone`'s defaults): width 64,
half the fine-tune's cost of width 128 at the same regime; 8 query tokens (release 4, as
release 2; release 3 had 6, whose composer at the fine-tune's rate of release 4 leaves
``sprc`` too little to lose at 50% noise: docs/benchmark.md)."""
PRETRAIN_THREADS = 2
"""Threads every pre-training runs on, whatever the caller's: a CPU matrix product's
reductions depend on the thread count, so one seed gave two starts (the stage-1 composer
pre-trained on 1 thread, in a worker process, and on 2, in the main process, differ; the
2-thread one is the start every committed figure used)."""
STAGE1_LR = 1e-3  # the image-text pre-training's rate (independent of the fine-tune's default_lr)
PRETRAIN_OBJECT_COUNTS = (1, 5)  # image-text scenes; the benchmark has 2 to 4 objects
CIR_SPACE = SceneSpace(5, 7)  # composed-retrieval scenes; edits keep them within 5 to 7


# ----------------------------------------------------------------------------- data


def pretraining_scenes(rng: np.random.Generator, n: int) -> tuple[list, torch.Tensor]:
    """``n`` scenes of 1 or 5 objects and their objects as (n, 5, 4) indices (colour, shape,
    size, cell), -1 where a scene has fewer objects."""
    kinds = len(SHAPES_COLOURS) * len(SHAPES_SHAPES)
    scenes, rows = [], np.full((n, max(PRETRAIN_OBJECT_COUNTS), 4), -1, dtype=np.int64)
    for i in range(n):
        k = int(rng.choice(PRETRAIN_OBJECT_COUNTS))
        cells = np.sort(rng.choice(9, size=k, replace=False))
        pairs = rng.choice(kinds, size=k, replace=False)
        sizes = rng.integers(0, 2, size=k)
        scene = tuple(
            ShapeObject(int(p // len(SHAPES_SHAPES)), int(p % len(SHAPES_SHAPES)), int(z), int(c))
            for p, z, c in zip(pairs, sizes, cells)
        )
        scenes.append(scene)
        rows[i, :k] = [[o.colour, o.shape, o.size, o.cell] for o in scene]
    return scenes, torch.from_numpy(rows)


def composed_pretraining_data(rng: np.random.Generator, n_scenes: int, mods: int) -> tuple[np.ndarray, dict]:
    """Rendered images (N, 32, 32, 3) and triplets (``reference``, ``target``, ``texts``) of
    single edits on scenes of 5 to 7 objects in the pre-training wording."""
    image_scenes: list = []
    split = build_edit_split(rng, "pretrain", n_scenes, mods, set(), image_scenes, space=CIR_SPACE, style="pretrain")
    return render_scenes(image_scenes, rng), split


def _normalised_pixels(images: np.ndarray) -> torch.Tensor:
    return (torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0 - 0.5) / 0.25


# ----------------------------------------------------------------------------- the three pre-trainings


class ObjectCaptionEncoder(nn.Module):
    """Embeds a caption given as its objects: (B, K, 4) indices with -1 for padding."""

    def __init__(self, dim: int = 128) -> None:
        super().__init__()
        self.parts = nn.ModuleList(
            nn.Embedding(n, dim) for n in (len(SHAPES_COLOURS), len(SHAPES_SHAPES), len(SHAPES_SIZES), 9)
        )
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))

    def forward(self, objects: torch.Tensor) -> torch.Tensor:
        present = (objects[..., 0] >= 0).float().unsqueeze(-1)
        idx = objects.clamp_min(0)
        per_object = self.mlp(sum(emb(idx[..., i]) for i, emb in enumerate(self.parts)))
        return F.normalize((per_object * present).sum(1), dim=-1)


def _train(params: list[nn.Parameter], loss_fn: Callable[[], torch.Tensor], steps: int, lr: float,
           weight_decay: float, betas: tuple[float, float] = (0.9, 0.999)) -> None:
    optimizer = torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps, pct_start=0.1)
    for _ in range(steps):
        loss = loss_fn()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()


def pretrain_tiny_tower(steps: int = 300, batch_size: int = 256, pool: int = 12000, seed: int = 0) -> TinyTower:
    """A fresh :class:`TinyTower` trained contrastively against an object-caption encoder
    (symmetric InfoNCE on the flattened patch tokens); only the tower is kept."""
    rng = np.random.default_rng([seed, 7])
    scenes, objects = pretraining_scenes(rng, pool)
    pixels = _normalised_pixels(render_scenes(scenes, rng))
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        tower, text = TinyTower(), ObjectCaptionEncoder()
        head = nn.Linear(16 * 64, 128)
        log_scale = nn.Parameter(torch.tensor(np.log(1 / 0.07), dtype=torch.float32))
        labels = torch.arange(batch_size)

        def loss() -> torch.Tensor:
            index = torch.randint(0, pool, (batch_size,))
            image = F.normalize(head(tower(pixels[index]).flatten(1)), dim=-1)
            logits = log_scale.exp().clamp(max=100) * image @ text(objects[index]).T
            return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2

        _train([*tower.parameters(), *text.parameters(), *head.parameters(), log_scale], loss, steps, 2e-3, 0.01)
    return tower.eval()


def _composer_parameters(backbone: TinyBackbone) -> list[nn.Parameter]:
    return [p for name, p in backbone.named_parameters() if not name.startswith("tower.")]


def composer_state(backbone: TinyBackbone) -> dict[str, torch.Tensor]:
    """Every tensor of ``backbone``'s state but the frozen tower's."""
    return {name: value.detach().clone() for name, value in backbone.state_dict().items() if not name.startswith("tower.")}


def pretrain_stage1(backbone: TinyBackbone, steps: int = 600, batch_size: int = 128, pool: int = 12000, seed: int = 0) -> dict:
    """Train ``backbone``'s composer (in place) with BLIP-2's image-text contrastive loss on
    captioned scenes: the image-only pass (max over query tokens) against the text-only pass.
    Returns the composer's state."""
    rng = np.random.default_rng([seed, 11])
    scenes, _ = pretraining_scenes(rng, pool)
    tokens = backbone.encode_image_tokens(_normalised_pixels(render_scenes(scenes, rng)))
    texts = backbone.tokenize([caption_scene(scene) for scene in scenes])
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        log_temperature = nn.Parameter(torch.tensor(math.log(0.07)))
        labels = torch.arange(batch_size)
        backbone.train()

        def loss() -> torch.Tensor:
            index = torch.randint(0, pool, (batch_size,))
            text = backbone.composed_feature(None, texts.select(index))
            sim = max_token_similarity(text, backbone.target_features(tokens[index])) / log_temperature.exp().clamp_min(0.01)
            return (F.cross_entropy(sim, labels) + F.cross_entropy(sim.T, labels)) / 2

        _train([*_composer_parameters(backbone), log_temperature], loss, steps, STAGE1_LR, 0.05, (0.9, 0.98))
    return composer_state(backbone)


def pretrain_composed_retrieval(backbone: TinyBackbone, steps: int = 2400, batch_size: int = 64, n_scenes: int = 6000,
                                mods: int = 4, lr: float = 1e-3, seed: int = 0) -> dict:
    """Train ``backbone``'s composer (in place) on composed retrieval: the composed query of
    (reference, modification text) against the target's max-over-tokens features, InfoNCE
    with a learnable temperature, on :func:`composed_pretraining_data`. Returns its state."""
    rng = np.random.default_rng([seed, 13])
    images, split = composed_pretraining_data(rng, n_scenes, mods)
    tokens = backbone.encode_image_tokens(_normalised_pixels(images))
    texts = backbone.tokenize(split["texts"])
    reference, target = torch.as_tensor(split["reference"]), torch.as_tensor(split["target"])
    n = len(reference)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        log_temperature = nn.Parameter(torch.tensor(math.log(0.07)))
        backbone.train()

        def loss() -> torch.Tensor:
            index = torch.randint(0, n, (batch_size,))
            query = backbone.composed_feature(tokens[reference[index]], texts.select(index))
            sim = max_token_similarity(query, backbone.target_features(tokens[target[index]]))
            # the CLIP objective (the same operations as cirbench.method.losses.info_nce, kept here so that a
            # backbone imports nothing of the method layer above it)
            labels = torch.arange(sim.shape[0], device=sim.device)
            return F.cross_entropy(sim / log_temperature.exp().clamp_min(0.01), labels)

        _train([*_composer_parameters(backbone), log_temperature], loss, steps, lr, 0.05, (0.9, 0.98))
    return composer_state(backbone)


# ----------------------------------------------------------------------------- caches and the factory


@contextmanager
def pinned_threads(threads: int) -> Iterator[None]:
    """Run the body on ``threads`` torch threads, then restore the caller's count."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _cached(path: Path, compute: Callable[[], dict]) -> dict:
    """The state dict at ``path``, or ``compute()`` now (on :data:`PRETRAIN_THREADS`
    threads, with torch's RNG left as it was) and cached there atomically."""
    if path.exists():
        try:
            return torch.load(path, weights_only=True)
        except (RuntimeError, OSError, EOFError) as exc:
            warnings.warn(f"pre-training cache {path} is unreadable ({exc}); pre-training again")
    with torch.random.fork_rng(), pinned_threads(PRETRAIN_THREADS):
        state = compute()
    atomic_write(path, lambda tmp: torch.save(state, tmp))
    return state


def pretrained_tower_state(cache_dir: Path) -> dict:
    """The ``pretrained`` tower's weights (cached)."""
    return _cached(Path(cache_dir) / "towers" / f"tiny-tower-pretrained-v{TOWER_VERSION}.pt",
                   lambda: pretrain_tiny_tower().state_dict())


def start_backbone(tower_state: dict) -> TinyBackbone:
    """A fresh composer of the released start's shape (:data:`START_SHAPE`, seed 0) on the
    pre-trained tower ``tower_state``: what ``cirbench start rebuild`` pre-trains."""
    return TinyBackbone(seed=0, tower="pretrained", tower_state=tower_state, **START_SHAPE)


def _composer_cache(backbone: TinyBackbone, cache_dir: Path, stage: str) -> Path:
    shape = f"h{backbone.hidden_size}-q{backbone.num_query_tokens}-l{len(backbone.layers)}"
    version = f"stage1-v{STAGE1_VERSION}" + (f"-cir-v{CIR_VERSION}" if stage == "cir" else "")
    return Path(cache_dir) / "towers" / f"{backbone.tower_key()}-composer-{shape}-{version}.pt"


def pretrained_composer_state(stage: str, cache_dir: Path, fresh: Callable[[], TinyBackbone]) -> dict:
    """The composer state after ``stage`` (``stage1`` or ``cir``), from the cache or
    pre-trained now from ``fresh()`` (the same architecture, seed 0)."""
    if stage not in ("stage1", "cir"):
        raise ValueError(f"unknown composer pre-training {stage!r}")
    base = fresh()

    def stage1() -> dict:
        return pretrain_stage1(fresh())

    if stage == "stage1":
        return _cached(_composer_cache(base, cache_dir, "stage1"), stage1)

    def cir() -> dict:
        backbone = fresh()
        backbone.load_state_dict(pretrained_composer_state("stage1", cache_dir, fresh), strict=False)
        return pretrain_composed_retrieval(backbone)

    return _cached(_composer_cache(base, cache_dir, "cir"), cir)


def start_identity(weights: str | None) -> str:
    """What a run id holds for the start of ``weights`` (a tag of :data:`TINY_WEIGHTS`; None:
    the default), known without pre-training or loading anything: the released start's key
    for ``cir``; for a start pre-trained on first use, its recipe's version (the result, which
    may differ in the last bits from machine to machine, is recorded in ``runs.start_key``
    and guarded by :mod:`cirbench.engine.cell.resources`)."""
    tag = weights or DEFAULT_TINY_WEIGHTS
    recipes = {"cir": tiny_release.START_KEY, "stage1": f"tiny-random+stage1-v{STAGE1_VERSION}",
               "random": "tiny-random", "pretrained": f"tiny-pretrained-v{TOWER_VERSION}"}
    return recipes.get(tag, tag)


def build_tiny(weights: str | None, seed: int, cache_dir: Path | None) -> TinyBackbone:
    """A ``tiny`` backbone for one cell: ``weights`` is a tag of :data:`TINY_WEIGHTS` (None:
    the default); ``seed`` initialises whatever is not pre-trained. ``cir`` is the released
    start (no pre-training); ``stage1`` and ``pretrained`` are pre-trained into ``cache_dir``
    on first use."""
    tag = weights or DEFAULT_TINY_WEIGHTS
    if tag not in TINY_WEIGHTS:
        raise ValueError(f"tiny backbone: unknown --weights {tag!r}; choose one of {', '.join(TINY_WEIGHTS)}")
    if tag == "cir":
        return shipped_backbone(seed)
    cache_dir = Path(cache_dir or "datasets")
    tower = pretrained_tower_state(cache_dir) if tag == "pretrained" else None
    backbone = TinyBackbone(seed=seed, tower="pretrained" if tower else "random", tower_state=tower)
    if tag == "stage1":
        state = pretrained_composer_state(tag, cache_dir, lambda: TinyBackbone(seed=0))
        backbone.load_state_dict(state, strict=False)
        backbone.pretrained_start = f"{tag}-{state_digest(state):08x}"
    return backbone
