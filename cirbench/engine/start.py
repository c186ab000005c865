"""The start a cell fine-tunes from, recorded and never pooled with another.

Two caches of the same backbone can hold different pre-trained starts (the ``tiny``
start once came out differently on one thread and on two; it is now released as a file,
but ``stage1`` is still pre-trained on first use), and two cirbench releases may ship two
starts; a grid's numbers mean something only against cells from the same start. Every cell records its backbone's
:meth:`~cirbench.backbones.base.Backbone.start_key` in ``runs``; a grid refuses a results
folder whose completed runs of the same backbone record another one.
"""

from __future__ import annotations

from pathlib import Path

from cirbench.backbones.registry import BACKBONES
from cirbench.results.store import ResultsStore


class StartMismatchError(ValueError):
    """The results folder holds runs of the same backbone fine-tuned from another start:
    their numbers cannot be pooled with this grid's."""


def check_start(store: ResultsStore, label: str, backbone, cache_dir: Path, recorded: set[str] | None = None) -> str:
    """``backbone``'s start key, once ``store`` is known to hold no completed run of the
    backbone labelled ``label`` from another start (:class:`StartMismatchError` if it does);
    ``recorded``: the store's start keys of ``label`` when already read."""
    key = backbone.start_key()
    others = sorted((store.start_keys(label) if recorded is None else recorded) - {key})
    if others:
        origin = getattr(backbone, "start_origin", "") or f"from the caches in {cache_dir}"
        raise StartMismatchError(
            f"results folder {store.root} holds runs of {label} fine-tuned from another start "
            f"({', '.join(others)}; this grid's is {key}, {origin}): their numbers cannot be pooled. "
            "Run with the start those runs used (the --cache-dir of a start pre-trained on first use; the cirbench "
            "release of a shipped start), or write to another --output."
        )
    return key


def refuse_another_start(store: ResultsStore, label: str, backbone: str, seed: int, cache_dir: Path, weights: str | None) -> None:
    """:func:`check_start` before any cell runs, building the backbone (``backbone``,
    ``seed``, ``weights``) only when ``store`` already records a start for it."""
    recorded = store.start_keys(label)
    if recorded:
        check_start(store, label, BACKBONES.get(backbone)(seed, cache_dir, weights), cache_dir, recorded)
