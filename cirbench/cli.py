"""The ``cirbench`` command line (typer + rich)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cirbench import defaults
from cirbench.config import ConfigError, parse_overrides

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Benchmark composed image retrieval under noisy triplets.")
console = Console()
DEFAULT_METHODS = "sprc,oracle"
DEFAULT_NOISE = "0,0.5,0.8"


def _split(text: str, kind: type, option: str) -> list:
    items = [t.strip() for t in text.split(",") if t.strip()]
    try:
        return [kind(t) for t in items]
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a comma-separated list of {kind.__name__}s", param_hint=option) from None


def _fail(message: str) -> None:
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(2)


@app.command()
def run(
    methods: Optional[str] = typer.Option(
        None, "--methods", "-m", show_default=False,
        help="Comma-separated method names or name:label variants (default: sprc,oracle; with --ablate: none).",
    ),
    noise: Optional[str] = typer.Option(
        None, "--noise", "-n", show_default=False,
        help="Comma-separated noise rates in [0, 1) (default: 0,0.5,0.8; with --ablate: the ablated methods' "
        "ablation noise rates).",
    ),
    ablate: Optional[str] = typer.Option(
        None, "--ablate", show_default=False,
        help="Comma-separated methods whose standard ablation grid to run (Method.ablations), beside --methods. "
        "Each adds its full row and a row <method>:<variant> per variant, with the variant's overrides as "
        "--set <method>:<variant>.<key>=<value> (a --set of yours for that label wins). E.g. --ablate conesep is "
        "--methods conesep,conesep:no_gfq,conesep:no_nbl,conesep:no_btu,conesep:no_rcl "
        "--set conesep:no_gfq.partition=false --set conesep:no_nbl.negative_prompt=false "
        "--set conesep:no_nbl.query_loss=false --set conesep:no_nbl.target_loss=false "
        "--set conesep:no_btu.unlearning=false --set conesep:no_rcl.rcl=false --noise 0.2; "
        "--ablate hug runs HUG's Table 3 ladder (hug:point_matching ... hug:coordination, hug) at --noise 0.",
    ),
    seeds: str = typer.Option("0", "--seeds", help="Comma-separated seeds."),
    dataset: str = typer.Option("shapes", "--dataset", "-d", help="Dataset name (see `cirbench list datasets`)."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Root of a dataset's files (FashionIQ, CIRR)."),
    dataset_option: list[str] = typer.Option(
        [], "--dataset-option", help="Dataset option key=value, e.g. categories=dress or reference=keep; repeatable."
    ),
    allow_missing: bool = typer.Option(
        False, "--allow-missing", help="Accept a dataset with missing or broken samples: they are dropped, listed and recorded."
    ),
    save: bool = typer.Option(False, "--save", help="Save each cell's trained weights under <output>/checkpoints/."),
    backbone: str = typer.Option("tiny", "--backbone", "-b", help="Backbone name (see `cirbench list backbones`)."),
    weights: Optional[str] = typer.Option(None, "--weights", help="Backbone weights: a local directory or tag."),
    noise_protocol: str = typer.Option("thirds", "--noise-protocol", help="Noise protocol (see `cirbench list noise`)."),
    epochs: int = typer.Option(defaults.EPOCHS, "--epochs", help="Training epochs per cell."),
    batch_size: int = typer.Option(defaults.BATCH_SIZE, "--batch-size", help="Training batch size (the papers use 128 on BLIP-2)."),
    output: Path = typer.Option(Path("results"), "--output", "-o", help="Results directory (parquet tables)."),
    cache_dir: Path = typer.Option(Path("datasets"), "--cache-dir", help="Where generated data and feature caches live."),
    set_: list[str] = typer.Option([], "--set", help="Hyperparameter override <method>.<key>=<value>; repeatable."),
    plugin: list[Path] = typer.Option([], "--plugin", help="A Python file defining a method plugin; repeatable."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Redo cells that are already complete."),
    device: str = typer.Option("cpu", "--device", help="torch device, e.g. cpu or cuda (under torchrun: cuda:<LOCAL_RANK>)."),
    precision: str = typer.Option("fp32", "--precision", help="fp32, or bf16: the backbone's passes autocast to bfloat16 (losses stay float32)."),
    features: str = typer.Option(
        "cache", "--features", help="cache: frozen-tower tokens computed once and stored; online: recomputed every time."
    ),
    decode_workers: int = typer.Option(0, "--decode-workers", help="With --features online: DataLoader workers decoding images."),
    gradient_checkpointing: bool = typer.Option(
        False, "--gradient-checkpointing", help="Recompute the composer's activations during backward (less memory)."
    ),
    launcher: str = typer.Option(
        "none", "--launcher", help="none (run here; under torchrun all ranks train each cell), local or slurm (one job per cell)."
    ),
    gpus_per_cell: int = typer.Option(0, "--gpus-per-cell", help="With --launcher: GPUs per job; more than 1 trains the cell with DDP."),
    scheduler_option: list[str] = typer.Option(
        [], "--scheduler-option", help="With --launcher: a submitit parameter key=value, e.g. slurm_partition=gpu, timeout_min=600."
    ),
    jobs: int = typer.Option(
        0, "--jobs", "-j", envvar="CIRBENCH_JOBS", help="Cells at once, one process each (0: two on a CPU with two or "
        "more cores, else one). Not with --launcher or torchrun."),
    report_: bool = typer.Option(False, "--report", help="Build the report (see `cirbench report`) after the grid."),
    report_dir: Path = typer.Option(Path("reports"), "--report-dir", help="Where --report writes the report."),
) -> None:
    """Run a grid: every method x noise rate x seed, one cell each, results under --output."""
    from cirbench.engine.ablation import describe_ablation, expand_ablations, merge_rows
    from cirbench.engine.distributed import barrier, init_distributed, is_main_process
    from cirbench.engine.grid import Grid, GridError, GridSpec
    from cirbench.engine.precision import PRECISIONS
    from cirbench.plugins import discover_methods

    if precision not in PRECISIONS or launcher not in ("none", "local", "slurm") or features not in ("cache", "online"):
        _fail(f"--precision must be one of {', '.join(PRECISIONS)}, --features cache or online, --launcher none, local or slurm")
    if launcher == "none":
        dist_env, device = init_distributed(device)
        console.quiet = not dist_env.is_main  # under torchrun only rank 0 reports
    try:
        discovery = discover_methods(list(plugin))
        if discovery.errors:
            raise GridError("; ".join(discovery.errors))
        labels = _split(methods if methods is not None else ("" if ablate else DEFAULT_METHODS), str, "--methods")
        overrides = parse_overrides(list(set_))
        rates = _split(noise, float, "--noise") if noise is not None else None
        if ablate:
            ablation = expand_ablations(_split(ablate, str, "--ablate"), discovery.methods)
            labels, overrides = merge_rows(labels, overrides, ablation)
            rates = ablation.noise_rates if rates is None else rates
            console.print(f"[dim]--ablate: {escape(describe_ablation(ablation))}[/]")
        spec = GridSpec(
            methods=labels, noise_rates=rates if rates is not None else _split(DEFAULT_NOISE, float, "--noise"),
            seeds=_split(seeds, int, "--seeds"), dataset=dataset, backbone=backbone, weights=weights,
            noise_protocol=noise_protocol, epochs=epochs, batch_size=batch_size, output=output,
            cache_dir=cache_dir, data_root=data_root, overrides=overrides,
            plugin_files=list(plugin), overwrite=overwrite, device=device,
            dataset_options=_dataset_options(dataset_option), allow_missing=allow_missing, save=save,
            precision=precision, gradient_checkpointing=gradient_checkpointing, features=features,
            decode_workers=decode_workers,
        )
        grid = Grid(spec, discovery)
    except (GridError, ConfigError) as exc:
        _fail(str(exc))
        return
    for problem in grid.discovery.problems:
        console.print(f"[yellow]warning:[/] {problem}")
    _prepare_file_dataset(grid)
    if launcher != "none":
        from cirbench.launch import submit_from_cli

        _announce_damaged(grid, grid.cells)

        try:
            code = submit_from_cli(spec, launcher, gpus_per_cell, scheduler_option, console)
        except (ValueError, ImportError) as exc:
            _fail(str(exc))
        raise typer.Exit(code)

    outcomes = _run_grid(grid, grid.cells, _jobs(jobs, spec.device))
    _summary(grid, outcomes)
    if report_ and is_main_process():  # under torchrun, rank 0 alone writes the report
        _build_report(output, report_dir)
    barrier()  # under torchrun, a rank exiting 1 makes torchrun stop the others: wait for rank 0's report
    if any(o.status == "failed" for o in outcomes):
        raise typer.Exit(1)


def _jobs(jobs: int, device: str) -> int:
    """``--jobs``: 0 picks :func:`~cirbench.engine.parallel.default_jobs`; under torchrun one."""
    from cirbench.engine.distributed import world_size
    from cirbench.engine.parallel import default_jobs

    if jobs < 0:
        _fail("--jobs must be 0 (automatic) or more")
    return 1 if world_size() > 1 else (jobs or default_jobs(device))


def _headline(results: dict) -> float:
    return results.get("all", results.get("average", {})).get("recall@10", math.nan)


def _run_grid(grid, cells: list, jobs: int = 1) -> list:
    """The grid's reference rows, then ``cells`` (``jobs`` at a time in separate processes
    when more than one), with a progress line per cell."""
    outcomes = []
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"), console=console,
    ) as progress:
        announce = lambda m: progress.console.print(f"[dim]{escape(m)}[/]")  # noqa: E731
        references = grid.reference_cells()
        _announce_damaged(grid, [*references, *cells], progress.console)
        task = progress.add_task(f"{'reference rows':>8}", total=len(references), status="")
        for cell in references:
            outcome = grid.run_reference(cell, announce=announce)
            progress.advance(task)
            if outcome.status == "failed":
                progress.console.print(f"[red]reference row {cell.key.method} failed: {outcome.error}[/]")
            elif outcome.status == "locked":
                progress.console.print(f"[yellow]reference row {cell.key.method} skipped: {escape(outcome.error)}[/]")
            outcomes.append(outcome)
        progress.update(task, status=", ".join(sorted({c.key.method for c in references})))
        pending = {c.key.run_id for c in cells if grid.spec.overwrite or not grid.store.is_complete(c.key.run_id)}
        if min(jobs, len(pending)) > 1:
            outcomes += _run_in_processes(grid, cells, pending, jobs, progress)
            return outcomes
        for cell in cells:
            k = cell.key
            task = progress.add_task(f"{k.method:>8} noise={k.noise_rate:<4g} seed={k.seed}", total=None, status="")
            state = {"loss": math.nan, "r10": math.nan}

            def update(info: dict, task=task, state=state) -> None:
                if "loss" in info:
                    state["loss"] = info["loss"]
                if "recall" in info:
                    state["r10"] = _headline(info["recall"])
                progress.update(
                    task, total=info["total_steps"], completed=info["step"] + ("recall" not in info),
                    status=f"epoch {info['epoch'] + 1}  loss {state['loss']:.3f}  R@10 {state['r10']:.3f}",
                )

            outcome = grid.run_cell(cell, update, announce=announce)
            if outcome.status == "skipped":
                progress.update(task, total=1, completed=1, status="already complete (skipped)")
            elif outcome.status == "locked":
                progress.update(task, total=1, completed=1, status=f"[yellow]skipped: {escape(outcome.error)}[/]")
            elif outcome.status == "failed":
                progress.update(task, status=f"[red]failed: {outcome.error}[/]")
            outcomes.append(outcome)
    return outcomes


@app.command()
def calibrate(
    dataset: str = typer.Option("shapes", "--dataset", "-d", help="Dataset name (see `cirbench list datasets`)."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Root of a dataset's files (FashionIQ, CIRR)."),
    dataset_option: list[str] = typer.Option([], "--dataset-option", help="Dataset option key=value; repeatable."),
    backbone: str = typer.Option("tiny", "--backbone", "-b", help="Backbone name (see `cirbench list backbones`)."),
    weights: Optional[str] = typer.Option(None, "--weights", help="Backbone weights: a local directory or tag."),
    noise_protocol: str = typer.Option("thirds", "--noise-protocol", help="Noise protocol (see `cirbench list noise`)."),
    seeds: str = typer.Option("0,1,2", "--seeds", help="Comma-separated seeds (two or more to measure the spread)."),
    epochs: int = typer.Option(defaults.EPOCHS, "--epochs", help="Training epochs per cell."),
    batch_size: int = typer.Option(defaults.BATCH_SIZE, "--batch-size", help="Training batch size."),
    output: Path = typer.Option(Path("results/calibration"), "--output", "-o", help="Results directory (finished cells are reused)."),
    cache_dir: Path = typer.Option(Path("datasets"), "--cache-dir", help="Where generated data and feature caches live."),
    device: str = typer.Option("cpu", "--device", help="torch device, e.g. cpu or cuda."),
    precision: str = typer.Option("fp32", "--precision", help="fp32 or bf16."),
    jobs: int = typer.Option(0, "--jobs", "-j", envvar="CIRBENCH_JOBS",
                             help="Cells at once, one process each (0: two on a CPU with two or more cores, else one)."),
) -> None:
    """Check that a setting is in the papers' regime (docs/benchmark.md); exit 1 if a target is missed.

    Runs sprc at 0, 50 and 80% noise, the perfect filter at 50 and 80% and the reference rows
    (finished cells in --output are reused), then prints each calibration figure beside its target.
    """
    from cirbench.engine.calibrate import calibration_grid, checks_markdown, run_calibration_checks
    from cirbench.engine.grid import GridError, GridSpec, backbone_label, dataset_label

    try:
        spec = GridSpec(
            methods=["sprc"], noise_rates=[0.0], seeds=_split(seeds, int, "--seeds"), dataset=dataset, backbone=backbone,
            weights=weights, noise_protocol=noise_protocol, epochs=epochs, batch_size=batch_size, output=output,
            cache_dir=cache_dir, data_root=data_root, dataset_options=_dataset_options(dataset_option), device=device,
            precision=precision,
        )
        grid = calibration_grid(spec)
    except GridError as exc:
        _fail(str(exc))
        return
    _prepare_file_dataset(grid)
    outcomes = _run_grid(grid, grid.cells, _jobs(jobs, device))
    failed = [o for o in outcomes if o.status == "failed"]
    for o in failed:
        console.print(f"[red]{o.cell.key.method} at {o.cell.key.noise_rate:g}, seed {o.cell.key.seed} failed: {escape(o.error)}[/]")
    try:
        checks = run_calibration_checks(grid.spec)
    except ValueError as exc:
        _fail(str(exc))
        return
    table = Table(title=escape(f"calibration: {dataset_label(grid.spec)} / {backbone_label(grid.spec)} / "
                               f"{grid.spec.noise_protocol}, seeds {seeds}"))
    for column in ("check", "figure", "value", "target", "verdict", "detail"):
        table.add_column(column, justify="right" if column in ("value", "target") else "left", overflow="fold")
    for c in checks:
        colour = {"pass": "green", "FAIL": "red"}.get(c.verdict, "yellow")
        table.add_row(c.name, c.figure, f"{c.value:.3f}", c.target, f"[{colour}]{c.verdict}[/]", escape(c.detail))
    console.print(table)
    from cirbench.results.atomic import atomic_write_text

    path = output / "calibration.md"
    atomic_write_text(checks_markdown(checks) + "\n", path)
    console.print(f"written: {path}")
    if failed or any(c.passed is False for c in checks):
        raise typer.Exit(1)


def _run_in_processes(grid, cells: list, pending: set[str], jobs: int, progress: Progress) -> list:
    """The ``pending`` run ids among ``cells`` in ``jobs`` worker processes (the caches exist
    already: the reference rows built them); a progress line per cell, updated when it ends."""
    from cirbench.engine.grid import CellOutcome
    from cirbench.engine.parallel import run_in_processes

    outcomes, tasks, todo = [], {}, []
    for cell in cells:
        k = cell.key
        tasks[k.run_id] = (cell, progress.add_task(f"{k.method:>8} noise={k.noise_rate:<4g} seed={k.seed}", total=1, status=""))
        if k.run_id not in pending:
            progress.update(tasks[k.run_id][1], completed=1, status="already complete (skipped)")
            outcomes.append(CellOutcome(cell, "skipped"))
        else:
            todo.append(k.run_id)
            progress.update(tasks[k.run_id][1], status=f"queued ({jobs} at a time)")
    for result in run_in_processes(grid.spec, todo, jobs):
        cell, task = tasks[result["run_id"]]
        status = (f"completed  R@10 {_headline(result['final']):.3f}" if result["status"] == "completed"
                  else "already complete (skipped)" if result["status"] == "skipped"
                  else f"[yellow]skipped: {escape(result['error'])}[/]" if result["status"] == "locked"
                  else f"[red]{result['status']}: {escape(result['error'])}[/]")
        progress.update(task, completed=1, status=status)
        outcomes.append(CellOutcome(cell, result["status"], result["final"], result["error"]))
    return outcomes


def _announce_damaged(grid, cells: list, out: Console | None = None) -> None:
    """Say which finished cells are redone because their record is damaged: each problem's
    file and what is wrong (their files are moved aside when the cell is redone)."""
    from cirbench.results.locks import live_holder

    if grid.spec.overwrite:
        return
    for cell in cells:
        record = grid.store.check(cell.key.run_id)
        if record.problems and live_holder(grid.store.root, cell.key.run_id) is None:
            (out or console).print(
                f"[yellow]warning:[/] {escape(cell.key.run_id)} is redone, its files moved to "
                f"{escape(str(grid.store.root / 'quarantine'))}/: " + "; ".join(escape(str(p)) for p in record.problems),
                soft_wrap=True)


def _dataset_options(entries: list[str]) -> dict[str, str]:
    out = {}
    for entry in entries:
        key, eq, value = entry.partition("=")
        if not eq or not key.strip():
            raise typer.BadParameter(f"{entry!r}: expected key=value, e.g. categories=dress", param_hint="--dataset-option")
        out[key.strip()] = value.strip()
    return out


def _print_problems(problems: list, limit: int) -> None:
    table = Table(show_header=True)
    for column in ("file", "entry", "problem"):
        table.add_column(column, overflow="fold")
    shown = problems if limit <= 0 else problems[:limit]
    for p in shown:
        mark = "[red]fatal:[/] " if p.fatal else "[yellow]warning:[/] " if p.severity == "warning" else ""
        table.add_row(escape(p.file), escape(p.entry), mark + escape(p.problem))
    console.print(table)
    if len(shown) < len(problems):
        console.print(f"... and {len(problems) - len(shown)} more (use --limit 0 or --json FILE to see all)")


def _prepare_file_dataset(grid) -> None:
    """Load a file-backed dataset before any cell runs: one that fails its check stops the
    run here, and samples dropped under --allow-missing are listed."""
    from cirbench.data.check import DatasetProblemsError
    from cirbench.data.registry import DATASETS

    if not hasattr(DATASETS.get(grid.spec.dataset), "check"):
        return
    try:
        dataset = grid.dataset()
    except DatasetProblemsError as exc:
        _print_problems(exc.report.errors, 30)
        _fail(str(exc).split(":\n", 1)[0])
        return
    except (ValueError, OSError) as exc:
        _fail(str(exc))
        return
    if dataset.info.get("n_warnings"):
        console.print(f"[yellow]warning:[/] {dataset.info['n_warnings']} warning(s) in the dataset's files (e.g. exact "
                      f"repeats; kept, counted in the runs table; `cirbench data check` lists them)")
    dropped = dataset.info.get("dropped") or []
    if dropped:
        console.print(f"[yellow]warning:[/] --allow-missing: {len(dropped)} samples or gallery images dropped "
                      f"(full list in {grid.dropped_path}, recorded in the runs table):")
        for d in dropped[:20]:
            console.print(escape(f"  {d['split']} {d['sample']}: {d['reason']}"))
        if len(dropped) > 20:
            console.print(f"  ... and {len(dropped) - 20} more")


def _summary(grid, outcomes) -> None:
    from cirbench.engine.grid import backbone_label, dataset_label
    from cirbench.results.headline import headline_rows
    from cirbench.results.store import MAIN_SCORE

    from cirbench.results.store import ResultsFolderError

    ids = [o.cell.key.run_id for o in outcomes if o.status != "locked"]  # a locked cell's parts are someone else's
    try:
        metrics, purity, runs = (grid.store.read(table, ids) for table in ("metrics", "purity", "runs"))
    except ResultsFolderError as exc:
        console.print(f"[bold red]error:[/] no summary: {escape(str(exc))}")
        return
    reasons = runs.set_index("run_id").collapse_reason.fillna("")  # "" when healthy (cirbench.engine.collapse)
    purity = purity[purity.score_name == MAIN_SCORE]
    for row in runs[runs.n_nonfinite_queries > 0].itertuples(index=False):
        console.print(f"[yellow]warning:[/] {escape(row.run_id)}: {row.n_nonfinite_queries} validation queries had a NaN or "
                      "infinite score (counted as misses where the target's score is one)")

    table = Table(title=escape(f"cirbench run: {dataset_label(grid.spec)} / {backbone_label(grid.spec)} / "
                               f"{grid.spec.noise_protocol} -> {grid.spec.output}"))
    for column in ("method", "noise", "seed", "status", "R@1", "R@10", "R@50", "purity", "AUROC"):
        table.add_column(column, justify="right" if column not in ("method", "status") else "left",
                         min_width={"method": 10, "status": 9}.get(column), overflow="fold")
    order = {name: i for i, name in enumerate(grid.spec.methods)}
    flagged = []
    for o in sorted(outcomes, key=lambda o: (math.isnan(o.cell.key.noise_rate), order.get(o.cell.key.method, len(order)),
                                             o.cell.key.noise_rate, o.cell.key.seed)):  # grid order, reference rows last
        k = o.cell.key
        m = metrics[metrics.run_id == k.run_id]
        m = headline_rows(m)  # FashionIQ: category average
        last = m[m.epoch == m.epoch.max()] if len(m) else m
        value = dict(zip(last.metric, last.value))
        p = purity[(purity.run_id == k.run_id) & (purity.noise_type == "all")]
        p = p[p.epoch == p.epoch.max()] if len(p) else p
        fmt = lambda x: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"  # noqa: E731
        reason = str(reasons.get(k.run_id, ""))
        if reason:
            flagged.append(f"{k.method} noise={k.noise_rate:g} seed={k.seed}: {reason}")
        table.add_row(
            k.method, "ref" if math.isnan(k.noise_rate) else f"{k.noise_rate:g}", str(k.seed),
            f"{o.status} [red]collapsed[/]" if reason else o.status,
            fmt(value.get("recall@1")), fmt(value.get("recall@10")), fmt(value.get("recall@50")),
            fmt(float(p.purity.iloc[0]) if len(p) else None), fmt(float(p.auroc.iloc[0]) if len(p) else None),
        )
    console.print(table)
    for line in flagged:  # a flag, not a failure: the numbers above stay (docs/report.md)
        console.print(f"[red]collapsed[/] {escape(line)}")


def _build_report(results: Path, output: Path, published: list[Path] | None = None) -> bool:
    from cirbench.report import ReportError, build_report
    from cirbench.report.published import PublishedFileError
    from cirbench.results.store import ResultsFolderError

    try:
        page = build_report(results, output, published or [])
    except (ReportError, PublishedFileError, ResultsFolderError) as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return False
    console.print(f"report written: {page} and {output / 'report.md'}")
    return True


@app.command()
def report(
    results: Path = typer.Option(Path("results"), "--results", "-r", help="Results directory (parquet tables)."),
    output: Path = typer.Option(Path("reports"), "--output", "-o", help="Where the figures, report.md and index.html go."),
    published: list[Path] = typer.Option(
        [], "--published", help="A CSV of your own numbers to show beside the papers' (same layout as the shipped tables); repeatable."
    ),
) -> None:
    """Build the report of a results directory: PNG figures, report.md and a self-contained index.html.
    FashionIQ and CIRR settings show the papers' published numbers beside the measured ones."""
    if not _build_report(results, output, published):
        raise typer.Exit(2)


results_app = typer.Typer(no_args_is_help=True, help="Check a results folder.")
app.add_typer(results_app, name="results")


@results_app.command("verify")
def results_verify(
    results: Path = typer.Option(Path("results"), "--results", "-r", help="Results directory (parquet tables)."),
    repair: bool = typer.Option(
        False, "--repair", help="Move each damaged cell's files under <results>/quarantine/<time>/ (never deleted), "
        "so that the next `cirbench run` of its grid redoes it."
    ),
) -> None:
    """Check every part of every cell against what its runs row recorded (rows, size, sha256):
    one line per problem (file, cell, what is wrong); exit 1 if there is any (also with --repair)."""
    from cirbench.results.locks import live_locks
    from cirbench.results.verify import check_folder, quarantine

    if not results.is_dir():
        _fail(f"results directory {results} does not exist")
    busy = {run_id: holder.describe() for run_id, holder in live_locks(results).items()}
    found = check_folder(results, skip=busy)
    for run_id, who in busy.items():
        console.print(f"{run_id}: being run by {who}: not checked", markup=False, highlight=False, soft_wrap=True)
    for problem in found.problems:
        console.print(str(problem), markup=False, highlight=False, soft_wrap=True)
    if not found.problems:
        console.print(f"[green]{escape(str(results))}: {len(found.run_ids)} cells, every part as recorded[/]")
        return
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


data_app = typer.Typer(no_args_is_help=True, help="Check dataset files.")
app.add_typer(data_app, name="data")


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
    from cirbench.data.check import check_dataset

    try:
        report = check_dataset(dataset, data_root, _dataset_options(dataset_option), cache_dir, deep=deep, workers=workers)
    except (KeyError, ValueError) as exc:
        _fail(str(exc))
        return
    if json_out is not None:
        import json

        from cirbench.results.atomic import atomic_write_text

        atomic_write_text(json.dumps(report.as_dict(), indent=1), json_out)
    counts = ", ".join(f"{k} {v}" for k, v in report.counts.items())
    if not report.problems:
        console.print(f"[green]{dataset} at {report.root}: no problems[/] ({counts})")
        return
    _print_problems(report.problems, limit)
    kinds = ", ".join(f"{k} {v}" for k, v in report.kinds().items())
    if report.ok:
        console.print(f"[yellow]{dataset} at {report.root}: no errors, {len(report.warnings)} warning(s)[/] ({kinds}; "
                      f"warnings never block `cirbench run`); read: {counts}")
        return
    console.print(f"[bold red]{dataset} at {report.root}: {len(report.errors)} error(s)[/] ({kinds}; "
                  f"{len(report.fatal)} fatal, {len(report.warnings)} warning(s)); read: {counts}")
    raise typer.Exit(1)


@app.command()
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
    from cirbench.checkpoint import CheckpointError
    from cirbench.data.check import DatasetProblemsError
    from cirbench.predict import predict_cirr

    checkpoint = Path(run_id) if Path(run_id).suffix == ".pt" else results / "checkpoints" / f"{run_id}.pt"
    name = checkpoint.stem
    try:
        paths = predict_cirr(
            checkpoint, data_root, cache_dir, output or results / "predictions" / name, device, list(plugin),
            allow_missing, announce=lambda m: console.print(f"[dim]{m}[/]"),
        )
    except DatasetProblemsError as exc:
        _print_problems(exc.report.errors, 30)
        _fail(str(exc).split(":\n", 1)[0])
        return
    except (CheckpointError, KeyError, ValueError, OSError) as exc:
        _fail(str(exc))
        return
    for path in paths:
        console.print(f"wrote {path}")


@app.command("list")
def list_(what: str = typer.Argument(..., help="methods | datasets | backbones | noise")) -> None:
    """List the registered methods, datasets, backbones or noise protocols."""
    from cirbench.backbones.registry import BACKBONES
    from cirbench.data.noise import NOISE_PROTOCOLS
    from cirbench.data.registry import DATASETS
    from cirbench.plugins import discover_methods

    table = Table(show_header=True)
    table.add_column("name")
    table.add_column("description")
    if what == "methods":
        discovery = discover_methods()
        table.add_column("source")
        for name in discovery.methods:
            entry = discovery.methods.entry(name)
            flags = [f for f, on in (("partitions", entry.obj.partitions), ("oracle", entry.obj.oracle)) if on]
            table.add_row(name, f"{entry.obj.paper} (v{entry.obj.version}{', ' + ', '.join(flags) if flags else ''})", entry.source)
        for problem in discovery.problems:
            console.print(f"[yellow]warning:[/] {problem}")
    elif what in ("datasets", "backbones", "noise"):
        registry = {"datasets": DATASETS, "backbones": BACKBONES, "noise": NOISE_PROTOCOLS}[what]
        for name in registry:
            table.add_row(name, getattr(registry.get(name), "description", ""))
    else:
        _fail(f"cannot list {what!r}; choose methods, datasets, backbones or noise")
    console.print(table)


if __name__ == "__main__":
    app()
