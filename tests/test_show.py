"""What a grid's progress prints where the console is a log file, not a terminal: one line per
cell that ran and ended (rich draws its bars there only once, at the end), none for a cell
already complete."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from cirbench.cli.show import GridProgress
from cirbench.engine.running.runner import Event
from cirbench.results.store import CellKey


def _event(kind: str, method: str, seed: int, status: str = "", error: str = "") -> Event:
    cell = SimpleNamespace(key=CellKey(f"{method}-{seed}", method, "shapes", "tiny", "thirds", 0.5, seed))
    outcome = SimpleNamespace(status=status, error=error, final={"all": {"recall@10": 0.7785}}) if status else None
    return Event(kind, cell, outcome, info={"jobs": 2} if kind == "queued" else {})


def _shown(terminal: bool) -> str:
    out = io.StringIO()
    with GridProgress(Console(file=out, force_terminal=terminal, width=200), pending=2) as progress:
        for event in (_event("done", "sprc", 0, "skipped"), _event("queued", "sprc", 1), _event("queued", "tme", 1),
                      _event("done", "sprc", 1, "completed"), _event("done", "tme", 1, "failed", "RuntimeError: boom")):
            progress(event)
    return out.getvalue()


def test_a_log_gets_a_line_per_cell_that_ends() -> None:
    lines = [line for line in _shown(terminal=False).splitlines() if line.startswith("[")]
    assert len(lines) == 2, lines  # the cell already complete prints none
    assert lines[0].startswith("[1/2] sprc noise=0.5 seed=1: completed, R@10 0.779 (0 h 00 min since the grid began)")
    assert lines[1].startswith("[2/2] tme noise=0.5 seed=1: failed: RuntimeError: boom")


def test_a_terminal_keeps_its_live_bars_alone() -> None:
    assert "[1/2]" not in _shown(terminal=True)
