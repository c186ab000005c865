"""On-disk helpers shared by the FashionIQ and CIRR loaders: the dataset root, paths that
cannot leave it, image discovery, JSON reading that names the entry at fault, image decoding,
and a file-backed :class:`~cirbench.data.base.ImageSource`."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np

IMAGE_SUFFIXES: tuple[str, ...] = (".png", ".jpg", ".jpeg")
DATA_ROOT_ENV = "CIRBENCH_DATA_ROOT"


class PathEscapeError(ValueError):
    """A path from a dataset file that would lead outside the dataset root."""


class JsonEntryError(ValueError):
    """A JSON file that cannot be parsed; ``entry`` is the index of the top-level entry at
    fault (or None when the file as a whole is wrong)."""

    def __init__(self, message: str, entry: int | None = None) -> None:
        super().__init__(message)
        self.entry = entry


def resolve_data_root(dataset: str, data_root: Path | str | None) -> Path:
    """The root of a dataset's files: ``data_root``, else ``$CIRBENCH_<DATASET>_ROOT``, else
    ``$CIRBENCH_DATA_ROOT``; an error naming the option when none is set or it is no folder."""
    specific = f"CIRBENCH_{dataset.upper().replace('-', '_')}_ROOT"
    chosen = data_root or os.environ.get(specific) or os.environ.get(DATA_ROOT_ENV)
    if not chosen:
        raise ValueError(
            f"dataset {dataset!r} reads files you provide: pass --data-root PATH (or set {specific} or {DATA_ROOT_ENV})"
        )
    root = Path(chosen).expanduser()
    if not root.is_dir():
        raise ValueError(f"the {dataset} data root {root} is not a directory (from --data-root, {specific} or {DATA_ROOT_ENV})")
    return root


def resolve_inside(root: Path, relative: str) -> Path:
    """``root / relative``, resolved, refusing absolute paths, ``..`` components and
    symbolic links that lead out of ``root``."""
    text = str(relative)
    posix, windows = PurePosixPath(text.replace("\\", "/")), PureWindowsPath(text)
    if posix.is_absolute() or windows.is_absolute() or windows.drive:
        raise PathEscapeError(f"{text!r} is an absolute path; dataset paths must be relative to the root")
    if ".." in posix.parts:
        raise PathEscapeError(f"{text!r} contains '..'; dataset paths must stay inside the root")
    base = Path(root).resolve()
    resolved = (base / posix).resolve()
    if not resolved.is_relative_to(base):
        raise PathEscapeError(f"{text!r} resolves to {resolved}, outside the dataset root {base} (a symbolic link?)")
    return resolved


def list_images(directory: Path) -> dict[str, str]:
    """File names in ``directory`` with an image suffix, by stem (``.png`` preferred over
    ``.jpg`` over ``.jpeg`` when one stem has several); empty if the folder is missing."""
    found: dict[str, str] = {}
    if not directory.is_dir():
        return found
    rank = {suffix: i for i, suffix in enumerate(IMAGE_SUFFIXES)}
    with os.scandir(directory) as entries:
        for entry in entries:
            stem, suffix = os.path.splitext(entry.name)
            suffix = suffix.lower()
            if suffix in rank and (stem not in found or rank[suffix] < rank[os.path.splitext(found[stem])[1].lower()]):
                found[stem] = entry.name
    return found


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line} column {column}"


def read_json_entries(path: Path, container: type) -> list[tuple[str | None, object]]:
    """The top-level entries of a JSON list (``container`` list; keys None) or object
    (``container`` dict; duplicate keys kept, in order), parsed one entry at a time so that
    a syntax error is reported with the index of the entry it is in."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise JsonEntryError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    opener, closer = ("[", "]") if container is list else ("{", "}")
    kind = "list" if container is list else "object"
    decoder = json.JSONDecoder()
    pos = _skip_space(text, 0)
    if pos >= len(text):
        raise JsonEntryError("the file is empty")
    if text[pos] != opener:
        raise JsonEntryError(f"expected a JSON {kind} at the top level, found {text[pos]!r} at {_where(text, pos)}")
    entries: list[tuple[str | None, object]] = []
    pos = _skip_space(text, pos + 1)
    if pos < len(text) and text[pos] == closer:
        pos += 1
    else:
        while True:
            index = len(entries)
            try:
                key = None
                if container is dict:
                    key, pos = decoder.raw_decode(text, pos)
                    if not isinstance(key, str):
                        raise json.JSONDecodeError("expected a string key", text, pos)
                    pos = _skip_space(text, pos)
                    if text[pos : pos + 1] != ":":
                        raise json.JSONDecodeError("expected ':' after the key", text, pos)
                    pos = _skip_space(text, pos + 1)
                value, pos = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                raise JsonEntryError(f"malformed JSON in entry #{index}: {exc.msg} at {_where(text, exc.pos)}", index) from None
            entries.append((key, value))
            pos = _skip_space(text, pos)
            if text[pos : pos + 1] == ",":
                pos = _skip_space(text, pos + 1)
                continue
            if text[pos : pos + 1] == closer:
                pos += 1
                break
            found = repr(text[pos]) if pos < len(text) else "the end of the file"
            raise JsonEntryError(
                f"malformed JSON after entry #{index}: expected ',' or '{closer}', found {found} at {_where(text, pos)}",
                index,
            )
    pos = _skip_space(text, pos)
    if pos < len(text):
        raise JsonEntryError(f"unexpected content after the top-level {kind} at {_where(text, pos)}")
    return entries


def decode_image(path: Path, size: int = 0) -> np.ndarray:
    """Decode an image file fully to uint8 RGB (H, W, 3); ``size`` > 0 resizes it to
    ``size`` x ``size`` (bicubic, like the BLIP-2 image processor). Raises OSError with the
    file named for anything unreadable or truncated."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            image = image.convert("RGB")
            if size > 0:
                image = image.resize((size, size), Image.Resampling.BICUBIC)
            return np.asarray(image, dtype=np.uint8)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise OSError(f"cannot decode image {path}: {exc}") from exc


@dataclass
class FileImages:
    """An :class:`~cirbench.data.base.ImageSource` over image files, decoded on demand.

    ``size`` > 0 resizes every image to a square of that many pixels so that images of
    different sizes can be batched; 0 hands the backbone each file's native size.
    """

    paths: list[Path]
    size: int = 0

    def __len__(self) -> int:
        return len(self.paths)

    def load(self, index: int) -> np.ndarray:
        """The decoded image at ``index``."""
        return decode_image(self.paths[index], self.size)
