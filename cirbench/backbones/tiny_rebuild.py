"""Re-making and re-releasing the ``tiny`` start (``cirbench start rebuild [--write]``).

:func:`rebuild_start` re-runs the pre-training from code in an empty cache
(:func:`~cirbench.backbones.tiny_pretrain.pretrained_composer_state`, on
:data:`~cirbench.backbones.tiny_pretrain.PRETRAIN_THREADS` threads), :func:`compare` says
whether it equals the released start bit for bit (and by how much each tensor differs if
not), and :func:`release` writes it as the next release: the start file under
``cirbench/backbones/starts/`` and its digest and key in
:mod:`cirbench.backbones.tiny_release`, the previous file removed.
"""

from __future__ import annotations

import ast
import hashlib
import platform
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from cirbench.backbones import tiny_pretrain, tiny_release, tiny_start
from cirbench.backbones.tiny_start import TinyStart, start_bytes
from cirbench.results.atomic import atomic_write, atomic_write_text

RELEASE_RECORD = Path(tiny_release.__file__).resolve()
"""The module recording the released file, its sha256 and its start key."""


@dataclass(frozen=True)
class TensorDifference:
    """One tensor of a rebuilt start against the released one: ``max_abs`` is the largest
    absolute difference (0.0 when bit for bit equal; inf when the shapes or dtypes differ
    or one side lacks the tensor)."""

    name: str
    equal: bool
    max_abs: float


@dataclass(frozen=True)
class Released:
    """What :func:`release` wrote."""

    release: int
    path: Path
    sha256: str
    start_key: str


def rebuild_start(cache_dir: Path | None = None) -> TinyStart:
    """The ``cir`` start pre-trained from code now, from an empty cache (minutes on a CPU);
    ``cache_dir``: a pre-training cache to read instead (the command never passes one)."""
    with tempfile.TemporaryDirectory(prefix="cirbench-start-") as empty:
        cache = Path(cache_dir or empty)
        tower_state = tiny_pretrain.pretrained_tower_state(cache)
        composer = tiny_pretrain.pretrained_composer_state("cir", cache, lambda: tiny_pretrain.start_backbone(tower_state))
    tower = {name: value.detach().clone() for name, value in tower_state.items()}
    info = {
        "weights": "cir", "tower": "pretrained", "tower_version": tiny_pretrain.TOWER_VERSION,
        "stage1_version": tiny_pretrain.STAGE1_VERSION, "cir_version": tiny_pretrain.CIR_VERSION,
        "threads": str(tiny_pretrain.PRETRAIN_THREADS), "torch": torch.__version__,
        "machine": f"{platform.machine()} {platform.processor()}".strip(),
    }
    return TinyStart(tower, composer, info)


def _difference(name: str, ours: torch.Tensor | None, theirs: torch.Tensor | None) -> TensorDifference:
    if ours is None or theirs is None or ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return TensorDifference(name, False, float("inf"))
    if torch.equal(ours, theirs):
        return TensorDifference(name, True, 0.0)
    return TensorDifference(name, False, float((ours.double() - theirs.double()).abs().max()))


def compare(rebuilt: TinyStart, released: TinyStart) -> list[TensorDifference]:
    """Every tensor of both starts (``tower.`` and ``composer.`` prefixed), in name order."""
    out = []
    for part in ("tower", "composer"):
        ours, theirs = getattr(rebuilt, part), getattr(released, part)
        for name in sorted(set(ours) | set(theirs)):
            out.append(_difference(f"{part}.{name}", ours.get(name), theirs.get(name)))
    return out


def release(rebuilt: TinyStart, starts_dir: Path | None = None, record: Path | None = None) -> Released:
    """Write ``rebuilt`` as the next release: ``tiny-cir-v<N+1>.pt`` in ``starts_dir`` (the
    package's by default), its sha256 and start key in ``record`` (:mod:`tiny_release`'s file
    by default), then remove the previous release's file. The running process keeps the
    previous release's record until it restarts."""
    starts_dir = Path(starts_dir or tiny_start.STARTS_DIR)
    record = Path(record or RELEASE_RECORD)
    previous = _recorded(record)
    number = int(previous.get("RELEASE", 0)) + 1
    data = start_bytes(rebuilt)
    path = starts_dir / f"tiny-cir-v{number}.pt"
    atomic_write(path, lambda tmp: tmp.write_bytes(data))
    path.chmod(0o644)  # package data: readable by every user of an installation
    sha256, key = hashlib.sha256(data).hexdigest(), rebuilt.key()
    atomic_write_text(record_text(number, path.name, sha256, key), record)
    old = previous.get("FILE")
    if old and old != path.name:
        (starts_dir / str(old)).unlink(missing_ok=True)
    return Released(number, path, sha256, key)


def record_text(number: int, file: str, sha256: str, start_key: str) -> str:
    """The source of :mod:`cirbench.backbones.tiny_release` for one release."""
    return (
        '"""The released ``tiny`` start (``--weights cir``): written by ``cirbench start rebuild --write``, not by hand."""\n\n'
        f"RELEASE = {number}\nFILE = {file!r}\nSHA256 = {sha256!r}\nSTART_KEY = {start_key!r}\n"
    )


def _recorded(record: Path) -> dict[str, object]:
    """The constants of a release record (``RELEASE``, ``FILE``, ...), read without importing it."""
    if not record.exists():
        return {}
    tree = ast.parse(record.read_text(), str(record))
    return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}
