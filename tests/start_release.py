"""Switch the released ``tiny`` start for a test (no conftest magic: tests call this)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cirbench.backbones import tiny_release, tiny_start
from cirbench.backbones.tiny_rebuild import Released, release
from cirbench.backbones.tiny_start import TinyStart, shipped_start


def use_release(monkeypatch: pytest.MonkeyPatch, start: TinyStart, folder: Path) -> Released:
    """Release ``start`` into ``folder`` (a start file and a release record there) and make
    it this process's released start until the test ends."""
    done = release(start, folder / "starts", folder / "tiny_release.py")
    monkeypatch.setattr(tiny_start, "STARTS_DIR", folder / "starts")
    for name, value in (("RELEASE", done.release), ("FILE", done.path.name), ("SHA256", done.sha256),
                        ("START_KEY", done.start_key)):
        monkeypatch.setattr(tiny_release, name, value)
    return done


def altered_start(delta: float = 1e-3) -> TinyStart:
    """The released start with its first composer tensor moved by ``delta``: another start."""
    start = shipped_start()
    name = sorted(start.composer)[0]
    return TinyStart(start.tower, {**start.composer, name: start.composer[name] + delta}, start.info)
