"""``cirbench start rebuild [--write]``: re-run the ``tiny`` start's pre-training from code
and compare it with the released start (:mod:`cirbench.backbones.tiny_rebuild`), or
re-release it. Torch is imported inside the command, so that ``cirbench --help`` stays light."""

from __future__ import annotations

import math

import typer
from rich.markup import escape
from rich.table import Table

from cirbench.cli.options import console

start_app = typer.Typer(no_args_is_help=True, help="The tiny backbone's released start (--weights cir).")


@start_app.command("rebuild")
def start_rebuild(
    write: bool = typer.Option(False, "--write", help="Release the rebuilt start: replace the shipped file and its "
                               "recorded sha256 and key (when it differs from the shipped one)."),
) -> None:
    """Pre-train the tiny cir start from code in an empty cache (minutes on a CPU), print its
    start key and whether it equals the shipped start bit for bit here (the largest absolute
    difference of each tensor if not). Exit 1 when it differs and --write is not given."""
    from cirbench.backbones import tiny_release
    from cirbench.backbones.tiny_rebuild import compare, rebuild_start, release
    from cirbench.backbones.tiny_start import StartFileError, shipped_path, shipped_start

    console.print("pre-training the tiny cir start from code, from an empty cache ...")
    rebuilt = rebuild_start()
    key = rebuilt.key()
    console.print(f"rebuilt start key: {key}", markup=False, highlight=False)
    try:
        shipped, where = shipped_start(), shipped_path()
    except StartFileError as exc:
        console.print(f"[yellow]no usable shipped start:[/] {escape(str(exc))}")
        shipped, where = None, None
    identical = False
    if shipped is not None:
        differences = compare(rebuilt, shipped)
        identical = all(d.equal for d in differences)
        console.print(f"shipped start key: {tiny_release.START_KEY} ({where})", markup=False, highlight=False)
        if identical:
            console.print(f"[green]bit for bit equal to the shipped start on this machine[/] ({len(differences)} tensors)")
        else:
            _print_differences(differences)
    if write and not identical:
        done = release(rebuilt)
        console.print(f"released v{done.release}: {done.path} (sha256 {done.sha256}, start key {done.start_key}); "
                      "recorded in cirbench/backbones/tiny_release.py. Commit both: every tiny[cir] cell's run id changes "
                      "with the start (docs/benchmark.md#run-ids).", markup=False,
                      highlight=False, soft_wrap=True)
    elif write:
        console.print("nothing to release: the shipped start is already this one")
    elif not identical:
        raise typer.Exit(1)


def _print_differences(differences) -> None:
    """One row per tensor that differs, with its largest absolute difference."""
    differing = [d for d in differences if not d.equal]
    console.print(f"[red]differs from the shipped start:[/] {len(differing)} of {len(differences)} tensors")
    table = Table(show_header=True)
    table.add_column("tensor")
    table.add_column("max |difference|", justify="right")
    for d in differing:
        table.add_row(d.name, "shape, dtype or presence differs" if math.isinf(d.max_abs) else f"{d.max_abs:.3g}")
    console.print(table)
