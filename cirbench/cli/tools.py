"""The commands around a grid: ``data check`` and ``results verify`` (a dataset's or a
results folder's files), ``predict`` (CIRR test1 submissions), ``reproduce`` (does this
machine reproduce a report's cells), ``list``, and ``start
rebuild [--write]``, which re-runs the ``tiny`` start's pre-training from code and compares
it with the released start (:mod:`cirbench.backbones.tiny_rebuild`), or re-releases it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from cirbench.settings import defaults
from cirbench.cli.options import Results, console, fail, parse_dataset_options, print_problems, split_list
from cirbench.results.metrics import REPRODUCED


results_app = typer.Typer(no_args_is_help=True, help="Check a results folder.")


@results_app.command("verify")
def results_verify(
    results: Results = Path("results"),
    repair: bool = typer.Option(
        False, "--repair", help="Move each damaged cell's files under <results>/quarantine/<time>/ (never deleted), "
        "so that the next `cirbench run` of its grid redoes it."
    ),
) -> None:
    """Check every part of every cell against what its runs row recorded (rows, size, sha256),
    and every replay against its source's kept/dropped decisions now: one line per problem
    (file, cell, what is wrong) and per stale replay (naming both runs); exit 1 if there is
    any (also with --repair, which moves damaged cells only: the next run redoes a stale replay)."""
    from cirbench.results.locks import live_locks
    from cirbench.results.replays import stale_replays
    from cirbench.results.verify import check_folder, quarantine

    if not results.is_dir():
        fail(f"results directory {results} does not exist")
    busy = {run_id: holder.describe() for run_id, holder in live_locks(results).items()}
    found = check_folder(results, skip=busy)
    for run_id, who in busy.items():
        console.print(f"{run_id}: being run by {who}: not checked", markup=False, highlight=False, soft_wrap=True)
    for problem in found.problems:
        console.print(str(problem), markup=False, highlight=False, soft_wrap=True)
    stale = stale_replays(results, [r for r in found.run_ids if r not in found.damaged()])
    for run_id, reason in stale.items():
        console.print(f"{results / 'runs' / run_id}.parquet: cell {run_id}: {reason}; the next `cirbench run` of its grid "
                      "(with --replay) redoes it", markup=False, highlight=False, soft_wrap=True)
    if not found.problems and not stale:
        console.print(f"[green]{escape(str(results))}: {len(found.run_ids)} cells, every part as recorded, every replay "
                      "true to its source[/]")
        return
    if stale:
        console.print(f"[red]{len(stale)} stale replay(s) in {escape(str(results))}[/]")
    if not found.problems:
        raise typer.Exit(1)
    damaged = sorted(found.damaged())
    console.print(f"[red]{len(found.problems)} problem(s) in {len(damaged)} cell(s) of {escape(str(results))}[/]")
    if repair:
        moved = quarantine(results, damaged)
        where = moved[0][1].relative_to(results).parts[:2] if moved else ()
        console.print(f"moved {len(moved)} files of {len(damaged)} cell(s) to {escape(str(results.joinpath(*where)))}/; "
                      "the next `cirbench run` of their grid redoes them")
    else:
        console.print("`cirbench results verify --repair` moves them aside (never deletes them) so that the next run redoes them")
    raise typer.Exit(1)


@results_app.command("errors")
def results_errors(
    results: Results = Path("results"),
    run_id: Optional[str] = typer.Argument(None, help="One cell's run id (default: every failed cell)."),
) -> None:
    """Print the whole error (its traceback, runs.error) of every failed cell of a results
    folder, or of one cell; the run's summary shows only each error's last line."""
    from cirbench.results.store import ResultsFolderError, ResultsStore

    try:
        runs = ResultsStore(results).read("runs", None if run_id is None else [run_id])
    except ResultsFolderError as exc:
        fail(str(exc))
    shown = runs[runs.error.fillna("").astype(str) != ""] if run_id else runs[runs.status == "failed"]
    if run_id and runs.empty:
        fail(f"{results}: no cell {run_id!r} (its runs part {results / 'runs' / (run_id + '.parquet')} does not exist)")
    for row in shown.sort_values("finished").itertuples(index=False):
        console.rule(f"{row.run_id} ({row.status}, {row.finished})", characters="-")
        console.print(str(row.error), markup=False, highlight=False, soft_wrap=True)
    if shown.empty:
        console.print(escape(f"{run_id}: no error recorded (status {runs.status.iloc[0]})" if run_id
                             else f"{results}: no failed cell"))


data_app = typer.Typer(no_args_is_help=True, help="Check dataset files.")


@data_app.command("check")
def data_check(
    dataset: str = typer.Argument(..., help="Dataset name: fashioniq or cirr."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Root of the dataset's files."),
    dataset_option: list[str] = typer.Option([], "--dataset-option", help="Dataset option key=value; repeatable."),
    cache_dir: Path = typer.Option(Path("datasets"), "--cache-dir", help="Where the per-image decode verdicts are cached."),
    limit: int = typer.Option(50, "--limit", help="Problems to print (0: all)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the full report as JSON to this file."),
    deep: bool = typer.Option(False, "--deep", help="Decode every image fully (slow); by default image headers are verified."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Threads checking images (default: a few per core)."),
) -> None:
    """Validate a dataset's files: JSON syntax, fields, split membership, image files, repeats, paths.
    Errors exit 1; warnings (entries the public loaders accept, e.g. exact repeats) are listed and exit 0."""
    from cirbench.data.datasets.check import check_dataset

    try:
        report = check_dataset(dataset, data_root, parse_dataset_options(dataset_option), cache_dir, deep=deep, workers=workers)
    except (KeyError, ValueError) as exc:
        fail(str(exc))
        return
    if json_out is not None:
        import json

        from cirbench.results.atomic import atomic_write_text

        atomic_write_text(json.dumps(report.as_dict(), indent=1), json_out)
    counts = ", ".join(f"{k} {v}" for k, v in report.counts.items())
    if not report.problems:
        console.print(f"[green]{dataset} at {report.root}: no problems[/] ({counts})")
        return
    print_problems(report.problems, limit)
    kinds = ", ".join(f"{k} {v}" for k, v in report.kinds().items())
    if report.ok:
        console.print(f"[yellow]{dataset} at {report.root}: no errors, {len(report.warnings)} warning(s)[/] ({kinds}; "
                      f"warnings never block `cirbench run`); read: {counts}")
        return
    console.print(f"[bold red]{dataset} at {report.root}: {len(report.errors)} error(s)[/] ({kinds}; "
                  f"{len(report.fatal)} fatal, {len(report.warnings)} warning(s)); read: {counts}")
    raise typer.Exit(1)


def predict(
    run_id: str = typer.Argument(..., help="A run saved with `run --save` (its run id, or a checkpoint file)."),
    results: Path = typer.Option(Path("results"), "--results", "-r", help="The run's results directory."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="CIRR root (default: the run's)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Default: <results>/predictions/<run_id>/."),
    cache_dir: Path = typer.Option(Path("datasets"), "--cache-dir", help="Where feature caches live."),
    device: str = typer.Option("cpu", "--device", help="torch device."),
    plugin: list[Path] = typer.Option([], "--plugin", help="A Python file defining the run's method; repeatable."),
    allow_missing: bool = typer.Option(False, "--allow-missing", help="Accept missing test1 images (incomplete submission)."),
) -> None:
    """Write the CIRR test1 submission files (recall and recall_subset) of a trained run."""
    from cirbench.method.checkpoint import CheckpointError
    from cirbench.data.datasets.check import DatasetProblemsError
    from cirbench.engine.tools.predict import predict_cirr

    checkpoint = Path(run_id) if Path(run_id).suffix == ".pt" else results / "checkpoints" / f"{run_id}.pt"
    name = checkpoint.stem
    try:
        paths = predict_cirr(
            checkpoint, data_root, cache_dir, output or results / "predictions" / name, device, list(plugin),
            allow_missing, announce=lambda m: console.print(f"[dim]{m}[/]"),
        )
    except DatasetProblemsError as exc:
        print_problems(exc.report.errors, 30)
        fail(str(exc).split(":\n", 1)[0])
        return
    except (CheckpointError, KeyError, ValueError, OSError) as exc:
        fail(str(exc))
        return
    for path in paths:
        console.print(f"wrote {path}")


def reproduce(
    reference: Path = typer.Option(..., "--reference", help="The report folder (or its final_metrics.csv) or results "
                                   "folder to reproduce."),
    methods: str = typer.Option(",".join(defaults.REPRODUCE_METHODS), "--methods", "-m", help="Comma-separated methods to re-run."),
    noise: str = typer.Option(",".join(f"{r:g}" for r in defaults.REPRODUCE_RATES), "--noise", "-n",
                              help="Comma-separated noise rates to re-run."),
    seeds: str = typer.Option("0", "--seeds", help="Comma-separated seeds to re-run."),
    dataset: str = typer.Option("shapes", "--dataset", "-d", help="The reference's dataset."),
    epochs: Optional[int] = typer.Option(None, "--epochs", show_default=False, help="Default: the reference runs'."),
    holdout: Optional[float] = typer.Option(None, "--holdout", show_default=False, help="Default: the reference runs'."),
    batch_size: int = typer.Option(defaults.BATCH_SIZE, "--batch-size", help="Training batch size."),
    metrics: str = typer.Option(",".join(REPRODUCED), "--metrics", help="Comma-separated metrics."),
    spread: float = typer.Option(defaults.REPRODUCE_SPREAD, "--spread", help="Allowed difference, in the reference seeds' std."),
    scratch: Optional[Path] = typer.Option(None, "--scratch", show_default=False,
                                           help="Where the cells run (default: a new temporary folder)."),
    cache_dir: Path = typer.Option(Path("datasets"), "--cache-dir", help="Where generated data and caches live."),
    jobs: int = typer.Option(0, "--jobs", "-j", help="Cells at once (0: automatic)."),
) -> None:
    """Re-run a few cells of a report's setting here and check that their final metrics fall
    within the report's spread over seeds: does this machine reproduce it? Exit 0 when every
    cell does, 1 when one does not, 2 when the reference cannot answer (no such cells, one seed)."""
    from cirbench.api.reproduce import reproduce as reproduced
    from cirbench.report.analysis.loading.reproduce_check import ReferenceFolderError, verdict_lines

    try:
        found = reproduced(reference, split_list(methods, str, "--methods"), split_list(noise, float, "--noise"),
                           split_list(seeds, int, "--seeds"), dataset, epochs, holdout, batch_size,
                           split_list(metrics, str, "--metrics"), spread, scratch, cache_dir, jobs,
                           announce=lambda message: console.print(message))
    except ReferenceFolderError as exc:
        fail(str(exc))
    if found.failed:
        console.print("\n".join(f"{o.cell.key.run_id} failed: {escape(o.error)}" for o in found.failed))
        raise typer.Exit(1)
    console.print(f"starts: reference {', '.join(found.reference_starts) or 'not recorded'}; here {', '.join(found.starts_here)}")
    for line in verdict_lines(found.verdicts):
        typer.echo(line)
    outside = [v for v in found.verdicts if not v.within]
    typer.echo(f"{len(found.verdicts) - len(outside)} of {len(found.verdicts)} within {spread:g} std of the reference's seeds")
    raise typer.Exit(1 if outside else 0)


def list_(
    what: str = typer.Argument(..., help="methods | datasets | backbones | noise"),
    plugin: list[Path] = typer.Option([], "--plugin", help="A plugin file or folder to list too; repeatable."),
) -> None:
    """List the registered methods, datasets, backbones or noise protocols, plugins included."""
    from cirbench.plugins import discover

    kinds = {"methods": "method", "datasets": "dataset", "backbones": "backbone", "noise": "noise protocol"}
    if what not in kinds:
        fail(f"cannot list {what!r}; choose methods, datasets, backbones or noise")
    discovery = discover(list(plugin))
    registry = discovery.registries[kinds[what]]
    table = Table(show_header=True)
    for column in ("name", "description", "source"):
        table.add_column(column)
    for name in registry:
        entry = registry.entry(name)
        if what == "methods":
            flags = [f for f, on in (("partitions", entry.obj.partitions), ("oracle", entry.obj.oracle),
                                     ("reads the noise rate", entry.obj.reads_noise_rate)) if on]
            description = f"{entry.obj.paper} (v{entry.obj.version}{', ' + ', '.join(flags) if flags else ''})"
        else:
            description = getattr(entry.obj, "description", "")
        table.add_row(name, description, entry.source)
    for problem in discovery.problems + discovery.errors:
        console.print(f"[yellow]warning:[/] {escape(problem)}")
    console.print(table)


def check_plugin(
    path: Path = typer.Argument(..., help="A plugin file (or folder of them) to check."),
    cache_dir: Path = typer.Option(Path("datasets"), "--cache-dir", help="Where the checks' small data and caches go."),
) -> None:
    """Check every plugin a file defines against what its kind must provide (a method, a
    dataset, a noise protocol, a backbone: cirbench/engine/tools/conformance.py); exit 1 on a problem."""
    from cirbench.engine.tools.conformance import check_plugin_file, checked_line

    results = check_plugin_file(path, cache_dir)
    for plugin, problems in results.items():
        if problems:
            console.print(f"[red]{escape(plugin)}[/]: " + "; ".join(escape(p) for p in problems))
        else:
            console.print(f"[green]{escape(plugin)}: conforms[/]")
        if plugin != "--plugin":
            console.print(f"  [dim]{escape(checked_line(plugin, cache_dir))}[/]")
    if any(results.values()):
        raise typer.Exit(1)


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
