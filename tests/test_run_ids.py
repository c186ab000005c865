"""The run ids of one fixed setting, as literal strings: a refactoring of the grid or of a
cell's life must not move them (a moved id reruns every finished cell of every folder)."""

from __future__ import annotations

from pathlib import Path

from cirbench.engine.grid import Grid, GridSpec

CELL_IDS = [
    "sprc-shapes-mini-tiny-thirds-0-s0-feb0a63b", "sprc-shapes-mini-tiny-thirds-0-s1-efccc404",
    "sprc-shapes-mini-tiny-thirds-0.5-s0-569f7241", "sprc-shapes-mini-tiny-thirds-0.5-s1-fe3f1f2f",
    "tme-shapes-mini-tiny-thirds-0-s0-af3b5f52", "tme-shapes-mini-tiny-thirds-0-s1-1e3300a8",
    "tme-shapes-mini-tiny-thirds-0.5-s0-0185cbdf", "tme-shapes-mini-tiny-thirds-0.5-s1-3d200673",
    "conesep_no_rcl-shapes-mini-tiny-thirds-0-s0-b82494c1", "conesep_no_rcl-shapes-mini-tiny-thirds-0-s1-c109da49",
    "conesep_no_rcl-shapes-mini-tiny-thirds-0.5-s0-de827af1", "conesep_no_rcl-shapes-mini-tiny-thirds-0.5-s1-56c076d7",
]
REFERENCE_IDS = [
    "zero_shot-shapes-mini-tiny-thirds-s0-06f36240", "zero_shot-shapes-mini-tiny-thirds-s1-41d0ffa6",
    "text_blind-shapes-mini-tiny-thirds-s0-f25d2caa", "text_blind-shapes-mini-tiny-thirds-s1-99b885e1",
    "text_only-shapes-mini-tiny-thirds-s0-1864503e", "text_only-shapes-mini-tiny-thirds-s1-d8a5bd61",
]


def test_the_run_ids_of_a_fixed_setting_do_not_move(tmp_path: Path) -> None:
    spec = GridSpec(methods=["sprc", "tme", "conesep:no_rcl"], noise_rates=[0.0, 0.5], seeds=[0, 1], dataset="shapes-mini",
                    epochs=1, holdout=0.1, overrides={"conesep:no_rcl": {"rcl": "false"}}, output=tmp_path)
    grid = Grid(spec)
    assert [c.key.run_id for c in grid.cells] == CELL_IDS
    assert [c.key.run_id for c in grid.reference_cells()] == REFERENCE_IDS
