"""Atomic file writes: a reader, or a run killed halfway, never sees a partial file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

import pandas as pd


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_parquet(frame: pd.DataFrame, path: Path) -> None:
    """Write ``frame`` to ``path`` as parquet, atomically."""
    atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))


def atomic_write_text(text: str, path: Path) -> None:
    """Write ``text`` to ``path``, atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(text))
