"""``shapes``: an embedded synthetic CIR benchmark of rendered coloured-shape scenes.

In the spirit of the CSS dataset (Vo et al. 2019, TIRG): a scene holds 2 to 4 objects on a
3x3 grid, each with a colour, a shape, a size and a cell; a modification text (add, remove,
recolour, reshape, resize, move) turns a reference scene into a target scene. Everything is
generated with numpy from one seed, so equal parameters give byte-identical data anywhere.

Validation is built so that the text decides: every validation reference comes with a
*family* of ``val_family_size`` distinct single edits, all of them queries and all of their
targets in the gallery, so a query's target competes with its siblings, which differ from it
only where the text says. Each query also has a CIRR-style subset (its target and five
siblings) for ``Recall_subset@1,2,3``.

The same generator, with another :class:`SceneSpace` and template set, makes the disjoint
pre-training data of the ``tiny`` backbone (:mod:`cirbench.backbones.tiny_pretrain`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from cirbench.data.base import ArrayImages, CIRDataset, EvalProtocol, TripletSplit

GENERATOR_VERSION = "2"

SHAPES_COLOURS: tuple[str, ...] = ("red", "green", "blue", "yellow", "purple", "cyan")
SHAPES_SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
SHAPES_SIZES: tuple[str, ...] = ("small", "large")
MODIFICATION_KINDS: tuple[str, ...] = ("add", "remove", "colour", "shape", "size", "move")

_RGB = np.array(
    [[220, 45, 45], [45, 190, 65], [55, 85, 235], [235, 215, 45], [155, 65, 205], [45, 205, 215]],
    dtype=np.float32,
)
_BACKGROUND = np.array([48, 48, 48], dtype=np.float32)
# Object extents as fractions of a cell; largest half-extent plus offset stays below 0.5,
# so objects never leave their cell and masks never overlap.
_HALF_EXTENT = (0.22, 0.38)
_SCALE_JITTER = 0.05
_MAX_OFFSET = 0.10
_NOISE_STD = 3.0
_RENDER_CHUNK = 2048  # fixed: the noise stream depends on it


class SceneSpace(NamedTuple):
    """How many objects a scene may hold (inclusive); at most 9, one per cell."""

    min_objects: int
    max_objects: int


BENCHMARK_SPACE = SceneSpace(2, 4)

# Cell names, first is canonical (captions); the rest are synonyms for modification texts.
_CELL_NAMES: tuple[tuple[str, ...], ...] = (
    ("top left", "upper left", "top left corner"),
    ("top centre", "top middle"),
    ("top right", "upper right", "top right corner"),
    ("middle left", "centre left", "left side"),
    ("centre", "middle"),
    ("middle right", "centre right", "right side"),
    ("bottom left", "lower left", "bottom left corner"),
    ("bottom centre", "bottom middle"),
    ("bottom right", "lower right", "bottom right corner"),
)
_SIZE_WORDS = (("small", "little"), ("large", "big"))


class ShapeObject(NamedTuple):
    """One object of a scene; every field is an index into its vocabulary (cell: row*3+col)."""

    colour: int
    shape: int
    size: int
    cell: int


Scene = tuple[ShapeObject, ...]  # sorted by cell: the tuple itself is the scene's signature


@dataclass(frozen=True)
class ShapesParams:
    """Parameters of the ``shapes`` benchmark; equal parameters give identical data."""

    seed: int = 0
    n_train_scenes: int = 10000
    n_val_scenes: int = 100
    mods_per_scene: int = 2
    image_size: int = 32
    val_family_size: int = 32
    subset_size: int = 6

    def key(self) -> str:
        """A stable identifier of the generated content, used for caches and results."""
        blob = json.dumps({"generator_version": GENERATOR_VERSION, **asdict(self)}, sort_keys=True)
        return f"shapes-v{GENERATOR_VERSION}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


# ----------------------------------------------------------------------------- scenes


def _canonical(objects: list[ShapeObject] | Scene) -> Scene:
    return tuple(sorted(objects, key=lambda o: o.cell))


def _random_scene(rng: np.random.Generator, space: SceneSpace = BENCHMARK_SPACE) -> Scene:
    k = int(rng.integers(space.min_objects, space.max_objects + 1))
    cells = rng.choice(9, size=k, replace=False)
    pairs = rng.choice(len(SHAPES_COLOURS) * len(SHAPES_SHAPES), size=k, replace=False)
    sizes = rng.integers(0, 2, size=k)
    n_shapes = len(SHAPES_SHAPES)
    return _canonical(
        [ShapeObject(int(p // n_shapes), int(p % n_shapes), int(z), int(c)) for p, z, c in zip(pairs, sizes, cells)]
    )


def random_scenes(rng: np.random.Generator, n: int, space: SceneSpace = BENCHMARK_SPACE) -> list[Scene]:
    """``n`` random valid scenes (2-4 objects by default, one per cell, unique colour+shape)."""
    return [_random_scene(rng, space) for _ in range(n)]


def caption_scene(scene: Scene) -> str:
    """A plain description, e.g. "a large red circle in the top left, a small blue square in the centre"."""
    return ", ".join(
        f"a {SHAPES_SIZES[o.size]} {SHAPES_COLOURS[o.colour]} {SHAPES_SHAPES[o.shape]} in the {_CELL_NAMES[o.cell][0]}"
        for o in scene
    )


# ----------------------------------------------------------------------------- rendering


def _shape_masks(dx: np.ndarray, dy: np.ndarray, half: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """(k, s, s) masks of k objects (offsets ``dx``, ``dy`` from their centres), each for its own shape."""
    tests = (lambda x, y, h: x * x + y * y <= h * h,  # circle
             lambda x, y, h: (np.abs(x) <= 0.85 * h) & (np.abs(y) <= 0.85 * h),  # square
             lambda x, y, h: (y <= h) & (np.abs(x) <= 0.5 * (y + h)))  # triangle: apex up, base width 2h
    mask = np.empty((len(shape), dy.shape[1], dx.shape[2]), dtype=bool)
    for kind, inside in enumerate(tests):
        rows = np.flatnonzero(shape == kind)
        mask[rows] = inside(dx[rows], dy[rows], half[rows])
    return mask


def render_scenes(scenes: list[Scene], rng: np.random.Generator, image_size: int = 32) -> np.ndarray:
    """Render scenes to (N, image_size, image_size, 3) uint8 RGB, with fresh jitter per call."""
    if image_size < 12:
        raise ValueError(f"image_size must be at least 12, got {image_size}")
    n, s = len(scenes), image_size
    table = np.array([o for sc in scenes for o in sc], dtype=np.int64).reshape(-1, 4)
    owner = np.repeat(np.arange(n), [len(sc) for sc in scenes])
    m, cell_px = len(table), s / 3

    offset = rng.uniform(-_MAX_OFFSET, _MAX_OFFSET, size=(m, 2)) * cell_px
    half = np.asarray(_HALF_EXTENT)[table[:, 2]] * cell_px * rng.uniform(1 - _SCALE_JITTER, 1 + _SCALE_JITTER, m)
    colour = _RGB[table[:, 0]] + rng.uniform(-12, 12, size=(m, 3)).astype(np.float32)
    cx = ((table[:, 3] % 3 + 0.5) * cell_px + offset[:, 0]).astype(np.float32)[:, None, None]
    cy = ((table[:, 3] // 3 + 0.5) * cell_px + offset[:, 1]).astype(np.float32)[:, None, None]
    h = half.astype(np.float32)[:, None, None]
    shape = table[:, 1][:, None, None]
    gain = rng.uniform(0.9, 1.1, size=n).astype(np.float32)[:, None, None, None]
    shift = rng.uniform(-6, 6, size=(n, 3)).astype(np.float32)[:, None, None, :]

    coords = np.arange(s, dtype=np.float32) + 0.5
    out = np.empty((n, s, s, 3), dtype=np.uint8)
    for start in range(0, n, _RENDER_CHUNK):
        stop = min(n, start + _RENDER_CHUNK)
        lo, hi = np.searchsorted(owner, [start, stop])
        dx = coords[None, None, :] - cx[lo:hi]  # (k, 1, s)
        dy = coords[None, :, None] - cy[lo:hi]  # (k, s, 1)
        mask = _shape_masks(dx, dy, h[lo:hi], shape[lo:hi, 0, 0])
        k, yy, xx = np.nonzero(mask)

        canvas = np.empty((stop - start, s, s, 3), dtype=np.float32)
        canvas[:] = _BACKGROUND
        canvas[owner[lo:hi][k] - start, yy, xx] = colour[lo:hi][k]
        canvas *= gain[start:stop]
        canvas += shift[start:stop]
        canvas += _NOISE_STD * rng.standard_normal(canvas.shape, dtype=np.float32)
        np.clip(canvas, 0, 255, out=canvas)
        out[start:stop] = np.rint(canvas).astype(np.uint8)
    return out


# ----------------------------------------------------------------------------- modifications

# Modification templates per style: the benchmark's, and the pre-training's (other wording
# throughout, so that no pre-training text is ever a benchmark text).
_TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    "benchmark": {
        "add": ("add a {obj} to the {cell}", "put a {obj} in the {cell}", "place a {obj} in the {cell}",
                "insert a {obj} at the {cell}", "draw a {obj} in the {cell}", "there should also be a {obj} in the {cell}"),
        "remove": ("remove {obj}", "take away {obj}", "delete {obj}", "get rid of {obj}", "erase {obj}", "{obj} should be gone"),
        "colour": ("make {obj} {new}", "change the colour of {obj} to {new}", "paint {obj} {new}", "recolour {obj} {new}",
                   "{obj} should be {new}", "turn {obj} {new}"),
        "shape": ("turn {obj} into a {new}", "make {obj} a {new}", "change {obj} into a {new}",
                  "replace {obj} with a {colour} {new}", "reshape {obj} into a {new}"),
        "size": ("make {obj} {new}", "{obj} should be {new}"),
        "size_up": ("enlarge {obj}", "make {obj} bigger", "increase the size of {obj}", "scale up {obj}"),
        "size_down": ("shrink {obj}", "make {obj} smaller", "reduce the size of {obj}", "scale down {obj}"),
        "move": ("move {obj} to the {cell}", "shift {obj} to the {cell}", "put {obj} in the {cell} instead",
                 "relocate {obj} to the {cell}", "drag {obj} to the {cell}"),
    },
    "pretrain": {
        "add": ("could you add a {obj} at the {cell}", "include a {obj} in the {cell} too", "an extra {obj} goes in the {cell}",
                "also show a {obj} in the {cell}"),
        "remove": ("without {obj}", "leave out {obj}", "omit {obj}", "drop {obj}"),
        "colour": ("give {obj} a {new} colour", "colour {obj} in {new}", "{obj} becomes {new}", "switch {obj} to {new}"),
        "shape": ("{obj} becomes a {new}", "swap {obj} for a {colour} {new}", "let {obj} be a {new}",
                  "transform {obj} into a {new}"),
        "size": ("{obj} gets {new}", "have {obj} be {new}"),
        "size_up": ("grow {obj}", "blow up {obj}"),
        "size_down": ("downsize {obj}", "minimise {obj}"),
        "move": ("{obj} goes to the {cell}", "send {obj} to the {cell}", "slide {obj} over to the {cell}",
                 "reposition {obj} at the {cell}"),
    },
}
EDIT_STYLES: tuple[str, ...] = tuple(_TEMPLATES)


def _pick(rng: np.random.Generator, options: list | tuple):
    return options[int(rng.integers(len(options)))]


def _name(o: ShapeObject, rng: np.random.Generator, with_size: bool = False) -> str:
    size = f"{_pick(rng, _SIZE_WORDS[o.size])} " if with_size else ""
    return f"{size}{SHAPES_COLOURS[o.colour]} {SHAPES_SHAPES[o.shape]}"


def _refer(o: ShapeObject, rng: np.random.Generator, allow_size: bool = True) -> str:
    """A referring expression; colour+shape is unique in a scene, and so is the cell."""
    form = int(rng.integers(6))
    cell = _pick(rng, _CELL_NAMES[o.cell])
    if form == 3 and allow_size:
        return f"the {_name(o, rng, with_size=True)}"
    if form == 4:
        return f"the {_name(o, rng)} in the {cell}"
    if form == 5:
        return f"the {SHAPES_COLOURS[o.colour]} one in the {cell}"
    return f"the {_name(o, rng)}"


def _cell_options(scene: Scene) -> list[int]:
    used = {o.cell for o in scene}
    return [c for c in range(9) if c not in used]


def _replace(scene: Scene, i: int, new: ShapeObject) -> Scene:
    return _canonical([new if j == i else o for j, o in enumerate(scene)])


Edit = tuple[Scene, str]


class _Editor(NamedTuple):
    """What an edit may do: the scene space it stays in and the wording it uses."""

    space: SceneSpace
    templates: dict[str, tuple[str, ...]]


def _edit_add(scene: Scene, rng: np.random.Generator, ed: _Editor) -> Edit | None:
    if len(scene) >= ed.space.max_objects:
        return None
    used = {(o.colour, o.shape) for o in scene}
    pairs = [(c, s) for c in range(len(SHAPES_COLOURS)) for s in range(len(SHAPES_SHAPES)) if (c, s) not in used]
    c, s = _pick(rng, pairs)
    new = ShapeObject(c, s, int(rng.integers(2)), _pick(rng, _cell_options(scene)))
    text = _pick(rng, ed.templates["add"]).format(obj=_name(new, rng, with_size=True), cell=_pick(rng, _CELL_NAMES[new.cell]))
    return _canonical([*scene, new]), text


def _edit_remove(scene: Scene, rng: np.random.Generator, ed: _Editor) -> Edit | None:
    if len(scene) <= ed.space.min_objects:
        return None
    i = int(rng.integers(len(scene)))
    return scene[:i] + scene[i + 1:], _pick(rng, ed.templates["remove"]).format(obj=_refer(scene[i], rng))


def _edit_colour(scene: Scene, rng: np.random.Generator, ed: _Editor) -> Edit | None:
    used = {(o.colour, o.shape) for o in scene}
    options = [(i, c) for i, o in enumerate(scene) for c in range(len(SHAPES_COLOURS)) if (c, o.shape) not in used]
    if not options:
        return None
    i, c = _pick(rng, options)
    text = _pick(rng, ed.templates["colour"]).format(obj=_refer(scene[i], rng), new=SHAPES_COLOURS[c])
    return _replace(scene, i, scene[i]._replace(colour=c)), text


def _edit_shape(scene: Scene, rng: np.random.Generator, ed: _Editor) -> Edit | None:
    used = {(o.colour, o.shape) for o in scene}
    options = [(i, s) for i, o in enumerate(scene) for s in range(len(SHAPES_SHAPES)) if (o.colour, s) not in used]
    if not options:
        return None
    i, s = _pick(rng, options)
    text = _pick(rng, ed.templates["shape"]).format(
        obj=_refer(scene[i], rng), new=SHAPES_SHAPES[s], colour=SHAPES_COLOURS[scene[i].colour])
    return _replace(scene, i, scene[i]._replace(shape=s)), text


def _edit_size(scene: Scene, rng: np.random.Generator, ed: _Editor) -> Edit | None:
    i = int(rng.integers(len(scene)))
    o = scene[i]
    size = 1 - o.size
    template = _pick(rng, (*ed.templates["size"], *ed.templates["size_up" if size == 1 else "size_down"]))
    obj = f"the {_name(o, rng, with_size=True)}" if rng.random() < 0.5 else _refer(o, rng, allow_size=False)
    text = template.format(obj=obj, new=_pick(rng, _SIZE_WORDS[size]))
    return _replace(scene, i, o._replace(size=size)), text


def _edit_move(scene: Scene, rng: np.random.Generator, ed: _Editor) -> Edit | None:
    free = _cell_options(scene)
    if not free:
        return None
    i = int(rng.integers(len(scene)))
    cell = _pick(rng, free)
    text = _pick(rng, ed.templates["move"]).format(obj=_refer(scene[i], rng), cell=_pick(rng, _CELL_NAMES[cell]))
    return _replace(scene, i, scene[i]._replace(cell=cell)), text


_EDITS: dict[str, Callable[[Scene, np.random.Generator, _Editor], Edit | None]] = {
    "add": _edit_add, "remove": _edit_remove, "colour": _edit_colour,
    "shape": _edit_shape, "size": _edit_size, "move": _edit_move,
}


def _pick_edits(scene: Scene, rng: np.random.Generator, n: int, ed: _Editor) -> list[tuple[str, Scene, str]] | None:
    """``n`` modifications with distinct targets, distinct kinds while enough kinds apply."""
    edits: list[tuple[str, Scene, str]] = []
    seen = {scene}
    for attempt in range(20 * n):
        if attempt % len(MODIFICATION_KINDS) == 0:
            order = [MODIFICATION_KINDS[j] for j in rng.permutation(len(MODIFICATION_KINDS))]
        kind = order[attempt % len(MODIFICATION_KINDS)]
        result = _EDITS[kind](scene, rng, ed)
        if result is not None and result[0] not in seen:
            seen.add(result[0])
            edits.append((kind, *result))
            if len(edits) == n:
                return edits
    return None


# ----------------------------------------------------------------------------- the benchmark


def build_edit_split(
    rng: np.random.Generator,
    name: str,
    n_scenes: int,
    mods: int,
    taken: set[Scene],
    image_scenes: list[Scene],
    space: SceneSpace = BENCHMARK_SPACE,
    style: str = "benchmark",
    subset_size: int = 0,
) -> dict:
    """Triplets of ``n_scenes`` new base scenes, ``mods`` distinct single edits each.

    Appends every base and target scene to ``image_scenes`` (the triplets index into it);
    ``taken`` holds forbidden base scenes and receives the new ones. With ``subset_size``,
    each triplet also gets a ``subset``: its target and ``subset_size - 1`` of its siblings
    (other edits of the same base), in random order, as CIRR's ``img_set``.
    """
    if style not in _TEMPLATES:
        raise ValueError(f"unknown edit style {style!r}; choose one of {', '.join(EDIT_STYLES)}")
    editor = _Editor(space, _TEMPLATES[style])
    split: dict[str, list] = {k: [] for k in ("sample_ids", "reference", "target", "texts", "modification")}
    if subset_size:
        split["subset"] = []
    while len(split["sample_ids"]) < n_scenes * mods:
        scene = _random_scene(rng, space)
        edits = None if scene in taken else _pick_edits(scene, rng, mods, editor)
        if edits is None:
            continue
        taken.add(scene)
        ref = len(image_scenes)
        image_scenes.append(scene)
        family = list(range(ref + 1, ref + 1 + mods))
        for kind, target, text in edits:
            split["sample_ids"].append(f"shapes-{name}-{len(split['sample_ids']):06d}")
            split["reference"].append(ref)
            split["target"].append(len(image_scenes))
            split["texts"].append(text)
            split["modification"].append(kind)
            if subset_size:
                own = len(image_scenes)
                others = [t for t in family if t != own]
                members = [own, *(int(x) for x in rng.choice(others, size=min(subset_size - 1, len(others)), replace=False))]
                split["subset"].append([members[j] for j in rng.permutation(len(members))])
            image_scenes.append(target)
    return split


def generate_shapes(params: ShapesParams) -> tuple[np.ndarray, list[str], dict]:
    """Generate the benchmark: pixels (N, H, W, 3) uint8, image ids, and a JSON-able description.

    The description holds ``train``/``val`` (sample_ids, reference, target, texts, modification;
    ``val`` also ``subset``), ``gallery`` (every validation image index), ``scenes`` (per image,
    its objects as [colour, shape, size, cell] index lists), ``key``, ``params`` and
    ``generator_version``. Training has ``mods_per_scene`` edits per base scene, validation
    ``val_family_size``.
    """
    if (params.n_train_scenes < 1 or params.n_val_scenes < 1 or not 1 <= params.mods_per_scene <= 16
            or not 2 <= params.val_family_size <= 64 or not 2 <= params.subset_size <= params.val_family_size):
        raise ValueError(f"invalid shapes parameters: {params}")
    scene_rng, render_rng = (np.random.Generator(np.random.PCG64(s)) for s in np.random.SeedSequence(params.seed).spawn(2))
    image_scenes: list[Scene] = []
    train_scenes: set[Scene] = set()
    train = build_edit_split(scene_rng, "train", params.n_train_scenes, params.mods_per_scene, train_scenes, image_scenes)
    n_train_images = len(image_scenes)
    # Validation base scenes must not be train base scenes (nor repeat among themselves).
    val = build_edit_split(scene_rng, "val", params.n_val_scenes, params.val_family_size, set(train_scenes), image_scenes,
                           subset_size=params.subset_size)
    pixels = render_scenes(image_scenes, render_rng, params.image_size)
    meta = {
        "generator_version": GENERATOR_VERSION,
        "key": params.key(),
        "params": asdict(params),
        "train": train,
        "val": val,
        "gallery": list(range(n_train_images, len(image_scenes))),
        "scenes": [[list(o) for o in sc] for sc in image_scenes],
    }
    return pixels, [f"shapes-img-{i:06d}" for i in range(len(image_scenes))], meta


def _write_cache(path: Path, pixels: np.ndarray, image_ids: list[str], meta: dict) -> None:
    blob = json.dumps({"image_ids": image_ids, **meta}).encode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, pixels=pixels, meta=np.frombuffer(blob, dtype=np.uint8))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_cache(path: Path, params: ShapesParams) -> tuple[np.ndarray, list[str], dict]:
    with np.load(path, allow_pickle=False) as z:
        pixels = z["pixels"]
        meta = json.loads(z["meta"].tobytes())
    image_ids = meta.pop("image_ids")
    s = params.image_size
    if meta["key"] != params.key() or pixels.dtype != np.uint8 or pixels.shape != (len(image_ids), s, s, 3):
        raise ValueError("cache content does not match the parameters")
    return pixels, image_ids, meta


def _split(d: dict) -> TripletSplit:
    subset = [np.asarray(m, dtype=np.int64) for m in d["subset"]] if "subset" in d else None
    return TripletSplit(sample_ids=d["sample_ids"], reference=np.asarray(d["reference"]), texts=d["texts"],
                        target=np.asarray(d["target"]), subset=subset, extra={"modification": d["modification"]})


def load_shapes(cache_dir: Path, params: ShapesParams = ShapesParams()) -> CIRDataset:
    """The ``shapes`` benchmark, generated on first use and cached in ``cache_dir/<key>.npz``."""
    cache_dir = Path(cache_dir)
    path = cache_dir / f"{params.key()}.npz"
    loaded = None
    if path.exists():
        try:
            loaded = _read_cache(path, params)
        except Exception as exc:  # any unreadable cache is regenerated
            warnings.warn(f"shapes cache {path} is unreadable ({exc!r}); regenerating", stacklevel=2)
    if loaded is None:
        loaded = generate_shapes(params)
        cache_dir.mkdir(parents=True, exist_ok=True)
        _write_cache(path, *loaded)
    pixels, image_ids, meta = loaded
    train, val = _split(meta["train"]), _split(meta["val"])
    return CIRDataset(
        name="shapes",
        key=params.key(),
        image_ids=image_ids,
        images=ArrayImages(pixels),
        train=train,
        val=val,
        gallery={"all": np.asarray(meta["gallery"], dtype=np.int64)},
        protocol=EvalProtocol(name="shapes", exclude_reference=True, recall_at=(1, 5, 10, 50), subset_recall_at=(1, 2, 3)),
        info={
            "generator_version": GENERATOR_VERSION,
            "params": asdict(params),
            "modification_kind": {
                name: dict(sorted(Counter(split.extra["modification"]).items())) for name, split in
                (("train", train), ("val", val))
            },
        },
    )
