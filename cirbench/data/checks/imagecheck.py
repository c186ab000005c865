"""Checking that a dataset's image files can be read, fast enough for tens of thousands.

Two levels. ``header`` (the default) opens each file with PIL and runs ``verify()``, which
reads the header and, for PNG, walks every chunk and checks its CRC without decoding
pixels: it catches missing, empty, non-image and truncated PNG files in a fraction of the
time of a decode. ``deep`` decodes every image fully, which also catches a truncated or
corrupt JPEG body. Files are checked in parallel threads (PIL releases the GIL while it
reads and decodes), and each verdict is cached per file under the cache directory, keyed by
the file's size and modification time: a deep verdict also answers a header check.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal, Mapping

from cirbench.data.checks.files import decode_image
from cirbench.results.atomic import atomic_write_text

Level = Literal["header", "deep"]
_CACHE_VERSION = 2
_RANK = {"header": 1, "deep": 2}


def default_workers() -> int:
    """Threads for a check: I/O bound at the header level, so a few per core (at most 32)."""
    return min(32, 4 * (os.cpu_count() or 1))


def verify_header(path: Path) -> None:
    """Open ``path`` and verify its header (PNG: every chunk's CRC) without decoding the
    pixels; raises OSError naming the file when it is not a readable image."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.verify()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise OSError(f"cannot read image {path}: {exc}") from exc


def _check_one(path: Path, level: Level) -> str | None:
    try:
        if level == "deep":
            decode_image(path)
        else:
            verify_header(path)
    except OSError as exc:
        return str(exc.__cause__ or exc)
    return None


def _cache_path(cache_dir: Path, root: Path) -> Path:
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return Path(cache_dir) / "checks" / f"images-{digest}.json"


def _read_cache(path: Path | None) -> dict[str, list]:
    if path is None or not path.exists():
        return {}
    try:
        blob = json.loads(path.read_text())
        return blob["files"] if blob.get("version") == _CACHE_VERSION else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _answers(seen: list | None, size: int, mtime: int, level: Level) -> bool:
    """Whether a cached verdict ``[size, mtime_ns, level, error]`` answers a check at ``level``:
    same file, and checked at least as deeply (or already found bad)."""
    if seen is None or len(seen) != 4 or seen[0] != size or seen[1] != mtime:
        return False
    return seen[3] is not None or _RANK.get(seen[2], 0) >= _RANK[level]


def unreadable_images(
    images: Mapping[str, Path], root: Path, cache_dir: Path | None, level: Level = "header", workers: int | None = None
) -> dict[str, str]:
    """Check every image in ``images`` (name -> path) at ``level`` (see the module
    docstring); return name -> error for those that cannot be read."""
    cache_file = _cache_path(cache_dir, root) if cache_dir is not None else None
    cached = _read_cache(cache_file)
    base = root.resolve()
    bad: dict[str, str] = {}
    updated = dict(cached)
    todo: list[tuple[str, str, Path, int, int]] = []
    for name, path in images.items():
        path = Path(path)
        rel = str(path.relative_to(base)) if path.is_relative_to(base) else str(path)
        try:
            stat = os.stat(path)
        except OSError as exc:
            bad[name] = f"cannot stat: {exc}"
            continue
        seen = cached.get(rel)
        if _answers(seen, stat.st_size, stat.st_mtime_ns, level):
            if seen[3] is not None:  # type: ignore[index]
                bad[name] = seen[3]  # type: ignore[index]
        else:
            todo.append((name, rel, path, stat.st_size, stat.st_mtime_ns))
    if todo:
        with ThreadPoolExecutor(max_workers=max(1, workers or default_workers())) as pool:
            verdicts = list(pool.map(lambda item: _check_one(item[2], level), todo))
        for (name, rel, _, size, mtime), error in zip(todo, verdicts):
            updated[rel] = [size, mtime, level, error]
            if error is not None:
                bad[name] = error
    if cache_file is not None and updated != cached:
        atomic_write_text(json.dumps({"version": _CACHE_VERSION, "root": str(base), "files": updated}), cache_file)
    return bad
