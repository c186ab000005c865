"""What every ``cirbench`` command shares: the console, the options several commands take
(declared once, as ``Annotated`` aliases), list and ``key=value`` parsing, and the error exit.
Imports no torch, pandas or engine module: ``cirbench --help`` stays fast."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cirbench.settings.config import ConfigError, parse_key_values

console = Console()
ABLATE_HELP = (
    "Comma-separated methods whose standard ablation grid (Method.ablations) to run beside --methods: the full "
    "method and one row method:variant per variant, with the variant's overrides (a --set of yours for that label "
    "wins), at the paper's ablation noise rates. E.g. --ablate conesep adds conesep:no_gfq, conesep:no_nbl, "
    "conesep:no_btu and conesep:no_rcl at --noise 0.2; --ablate hug runs HUG's Table 3 ladder at --noise 0. The "
    "rows and their overrides are printed before the run."
)
JOBS_HELP = ("Cells at once, one process each (0: one per usable core on a CPU, each cell on one thread whatever "
             "the number, so the same numbers; one on a GPU; under torchrun one).")

# Options shared by several commands, declared once.
Opt = typer.Option
DatasetName = Annotated[str, Opt("--dataset", "-d", help="Dataset name (see `cirbench list datasets`).")]
DataRoot = Annotated[Optional[Path], Opt("--data-root", help="Root of a dataset's files (FashionIQ, CIRR).")]
DatasetOptions = Annotated[list[str], Opt("--dataset-option", help="Dataset option key=value, e.g. categories=dress or "
                                          "reference=keep; repeatable.")]
Backbone = Annotated[str, Opt("--backbone", "-b", help="Backbone name (see `cirbench list backbones`).")]
WEIGHTS_HELP = (
    "The backbone's start. tiny: cir (the default: pre-trained, shipped with the package), stage1, random or "
    "pretrained; blip2: a local checkpoint directory or a cached hub id (default: Salesforce/blip2-itm-vit-g); "
    "clip: ARCH:TAG (default: ViT-L-14:openai). docs/backbones.md"
)
Weights = Annotated[Optional[str], Opt("--weights", show_default=False, help=WEIGHTS_HELP)]
NoiseProtocol = Annotated[str, Opt("--noise-protocol", help="Noise protocol (see `cirbench list noise`).")]
NoiseFile = Annotated[Optional[Path], Opt("--noise-file", show_default=False, help="A noise instance written by `cirbench "
                                          "noise export` (parquet): every cell trains on it instead of injecting noise; "
                                          "the grid takes its dataset, protocol and one rate.")]
Seeds = Annotated[str, Opt("--seeds", help="Comma-separated seeds (two or more to measure the spread).")]
Epochs = Annotated[int, Opt("--epochs", help="Training epochs per cell.")]
BatchSize = Annotated[int, Opt("--batch-size", help="Training batch size (the papers use 128 on BLIP-2).")]
CacheDir = Annotated[Path, Opt("--cache-dir", help="Where generated data, feature caches and decode verdicts live.")]
Device = Annotated[str, Opt("--device", help="torch device, e.g. cpu or cuda (under torchrun: cuda:<LOCAL_RANK>).")]
Precision = Annotated[str, Opt("--precision", help="fp32, or bf16: the backbone's passes autocast to bfloat16 (losses stay float32).")]
Jobs = Annotated[int, Opt("--jobs", "-j", envvar="CIRBENCH_JOBS", help=JOBS_HELP)]
Plugins = Annotated[list[Path], Opt("--plugin", help="A Python file, or a folder of them, defining plugins: methods, "
                                   "datasets, noise protocols or backbones; repeatable.")]
Frontier = Annotated[bool, Opt("--frontier", help="Add the purity frontier's kept-set cells: the baseline trained as the "
                               "perfect filter trains, on every clean triplet plus a seeded share of the noisy ones, at each "
                               "purity of --frontier-purity above the rate's clean share (docs/kept-sets.md).")]
FrontierPurity = Annotated[Optional[str], Opt("--frontier-purity", show_default=False, help="Comma-separated purities of "
                                              "the frontier's kept sets, each in (0, 1) (default: 0.8,0.6,0.4; implies "
                                              "--frontier).")]
NoiseTypes = Annotated[bool, Opt("--noise-types", help="Add one kept-set cell per noise type of the protocol: every clean "
                                 "triplet plus that type's noisy ones only (docs/kept-sets.md).")]
Replay = Annotated[Optional[str], Opt("--replay", show_default=False, help="Comma-separated methods that partition whose "
                                      "runs' kept sets to replay, epoch by epoch, with the perfect filter's step; each run "
                                      "is a cell of the grid (run first) or complete in --output (docs/kept-sets.md).")]
Results = Annotated[Path, Opt("--results", "-r", help="Results directory (parquet tables).")]
Holdout = Annotated[Optional[float], Opt("--holdout", show_default=False, help="Share of the noisy training triplets "
                               "held out, noise included, and evaluated every epoch to select epochs and trials on "
                               "(docs/selection.md); 0: none (default: 0.1 on a generated dataset such as shapes, 0 on "
                               "one read from files).")]


def split_list(text: str, kind: type, option: str) -> list:
    """A comma-separated ``option`` value as a list of ``kind``; a bad item is a usage error."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    try:
        return [kind(t) for t in items]
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a comma-separated list of {kind.__name__}s", param_hint=option) from None


def parse_dataset_options(entries: list[str]) -> dict[str, str]:
    """``--dataset-option key=value`` entries as a dict; a malformed one is a usage error."""
    try:
        return parse_key_values(entries, "categories=dress")
    except ConfigError as exc:
        raise typer.BadParameter(str(exc), param_hint="--dataset-option") from None


def fail(message: str) -> NoReturn:
    """Print ``message`` as an error and exit with status 2."""
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(2)


def print_problems(found: list, limit: int) -> None:
    """A dataset's problems (file, entry, problem), the first ``limit`` of them (0: all)."""
    table = Table(show_header=True)
    for column in ("file", "entry", "problem"):
        table.add_column(column, overflow="fold")
    shown = found if limit <= 0 else found[:limit]
    for p in shown:
        mark = "[red]fatal:[/] " if p.fatal else "[yellow]warning:[/] " if p.severity == "warning" else ""
        table.add_row(escape(p.file), escape(p.entry), mark + escape(p.problem))
    console.print(table)
    if len(shown) < len(found):
        console.print(f"... and {len(found) - len(shown)} more (use --limit 0 or --json FILE to see all)")
