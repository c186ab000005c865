"""The ``cirbench`` command line (typer + rich): it parses the arguments, hands the grid to
the runner (:mod:`cirbench.engine.running.runner`) and shows what comes back (:mod:`cirbench.cli.show`).
The options several commands share are in :mod:`cirbench.cli.options`; the commands around
a grid (``data check``, ``results verify``, ``predict``, ``list``, the released ``tiny``
start's ``start rebuild``) in :mod:`cirbench.cli.tools`.

The engine, report and results modules are imported inside the commands, so that
``cirbench --help`` imports no torch (and starts fast).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from cirbench.settings import defaults
from cirbench.cli.options import (
    ABLATE_HELP, Backbone, BatchSize, CacheDir, DataRoot, DatasetName, DatasetOptions, Device, Epochs, Frontier,
    FrontierPurity, Holdout, Jobs, NoiseFile, NoiseProtocol, NoiseTypes, Opt, Plugins, Precision, Replay, Results, Seeds, Weights,
    console, fail, parse_dataset_options, split_list,
)
from cirbench.cli.grid import (calibrate_grid, calibration_checks, kept_set_options, launch, print_summary,
                               register_plugins, run_here, sweep_grid, validated_grid, write_report)
from cirbench.cli.noise import noise_app
from cirbench.cli.study import study
from cirbench.cli.tools import check_plugin, data_app, list_, predict, reproduce, results_app, start_app


def _listed(values) -> str:
    """A default list as the command line writes it: ``0,0.5,0.8``."""
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


app = typer.Typer(add_completion=False, no_args_is_help=True, help="Benchmark composed image retrieval under noisy triplets.")


def _print_version(value: bool) -> None:
    """``--version``: the installed distribution's version (its metadata), then exit."""
    if value:
        from importlib.metadata import version

        console.print(f"cirbench {version('cirbench')}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, Opt("--version", callback=_print_version, is_eager=True,
                                 help="Print cirbench's version and exit.")] = False,
) -> None:
    """Benchmark composed image retrieval under noisy triplets."""


@app.command()
def run(
    methods: Annotated[Optional[str], Opt("--methods", "-m", show_default=False, help="Comma-separated method names or "
                                          f"name:label variants (default: {_listed(defaults.METHODS)}; with --ablate: none).")] = None,
    noise: Annotated[Optional[str], Opt("--noise", "-n", show_default=False, help="Comma-separated noise rates in [0, 1) "
                                        f"(default: {_listed(defaults.NOISE_RATES)}; with --ablate: the ablated methods' ablation noise rates).")] = None,
    ablate: Annotated[Optional[str], Opt("--ablate", show_default=False, help=ABLATE_HELP)] = None,
    frontier: Frontier = False, frontier_purity: FrontierPurity = None, noise_types: NoiseTypes = False, replay: Replay = None,
    seeds: Annotated[str, Opt("--seeds", help="Comma-separated seeds.")] = "0",
    dataset: DatasetName = "shapes", data_root: DataRoot = None, dataset_option: DatasetOptions = [],
    allow_missing: Annotated[bool, Opt("--allow-missing", help="Accept a dataset with missing or broken samples: they "
                                       "are dropped, listed and recorded.")] = False,
    save: Annotated[bool, Opt("--save", help="Save each cell's trained weights under <output>/checkpoints/.")] = False,
    holdout: Holdout = None,
    backbone: Backbone = "tiny", weights: Weights = None, noise_protocol: NoiseProtocol = "thirds", noise_file: NoiseFile = None,
    epochs: Epochs = defaults.EPOCHS, batch_size: BatchSize = defaults.BATCH_SIZE,
    output: Annotated[Path, Opt("--output", "-o", help="Results directory (parquet tables).")] = Path("results"),
    cache_dir: CacheDir = Path("datasets"), plugin: Plugins = [],
    set_: Annotated[list[str], Opt("--set", help="Hyperparameter override <method>.<key>=<value>; repeatable.")] = [],
    overwrite: Annotated[bool, Opt("--overwrite", help="Redo cells that are already complete.")] = False,
    device: Device = "cpu", precision: Precision = "fp32", jobs: Jobs = 0,
    features: Annotated[str, Opt("--features", help="cache: frozen-tower tokens computed once and stored; online: "
                                 "recomputed every time.")] = "cache",
    decode_workers: Annotated[int, Opt("--decode-workers", help="With --features online: DataLoader workers decoding "
                                       "images.")] = 0,
    gradient_checkpointing: Annotated[bool, Opt("--gradient-checkpointing", help="Recompute the composer's activations "
                                                "during backward (less memory).")] = False,
    launcher: Annotated[str, Opt("--launcher", help="none (run here; under torchrun all ranks train each cell), local or "
                                 "slurm (one job per cell).")] = "none",
    gpus_per_cell: Annotated[int, Opt("--gpus-per-cell", help="With --launcher: GPUs per job; more than 1 trains the cell "
                                      "with DDP.")] = 0,
    scheduler_option: Annotated[list[str], Opt("--scheduler-option", help="With --launcher: a submitit parameter key=value, "
                                               "e.g. slurm_partition=gpu, timeout_min=600.")] = [],
    report_: Annotated[bool, Opt("--report", help="Build the report (see `cirbench report`) after the grid.")] = False,
    report_dir: Annotated[Path, Opt("--report-dir", help="Where --report writes the report.")] = Path("reports"),
) -> None:
    """Run a grid: every method x noise rate x seed and the kept-set cells asked for, one cell each, results under --output."""
    from cirbench.engine.cell.distributed import barrier, init_distributed, is_main_process
    from cirbench.engine.cell.precision import PRECISIONS

    if precision not in PRECISIONS or launcher not in ("none", "local", "slurm") or features not in ("cache", "online"):
        fail(f"--precision must be one of {', '.join(PRECISIONS)}, --features cache or online, --launcher none, local or slurm")
    if launcher == "none":
        dist_env, device = init_distributed(device)
        console.quiet = not dist_env.is_main  # under torchrun only rank 0 reports
    grid = validated_grid(methods, noise, ablate, set_, plugin, dict(
        seeds=split_list(seeds, int, "--seeds"), dataset=dataset, backbone=backbone, weights=weights,
        noise_protocol=noise_protocol, epochs=epochs, batch_size=batch_size, output=output, cache_dir=cache_dir,
        data_root=data_root, plugin_files=list(plugin), overwrite=overwrite, device=device,
        dataset_options=parse_dataset_options(dataset_option), allow_missing=allow_missing, save=save, holdout=holdout, precision=precision,
        gradient_checkpointing=gradient_checkpointing, features=features, decode_workers=decode_workers, noise_file=noise_file,
        **kept_set_options(frontier, frontier_purity, noise_types, replay)), absolute=launcher != "none")
    if launcher != "none":
        raise typer.Exit(launch(grid, launcher, gpus_per_cell, scheduler_option))
    outcomes = run_here(grid, jobs)
    print_summary(grid, outcomes)
    if report_ and is_main_process():  # under torchrun, rank 0 alone writes the report
        write_report(output, report_dir)
    barrier()  # under torchrun, a rank exiting 1 makes torchrun stop the others: wait for rank 0's report
    if any(o.status == "failed" for o in outcomes):
        raise typer.Exit(1)


@app.command()
def sweep(
    methods: Annotated[str, Opt("--methods", "-m", help="Comma-separated methods to tune, each with the same budget.")],
    noise: Annotated[str, Opt("--noise", "-n", help="Comma-separated noise rates in [0, 1).")] = _listed(defaults.NOISE_RATES),
    trials: Annotated[int, Opt("--trials", help="Trials per method; trial 0 is the defaults, the others draw from "
                               "the method's Config.search_space.")] = defaults.TRIALS,
    seeds: Seeds = "0",
    holdout: Annotated[float, Opt("--holdout", help="Share of the noisy training triplets held out, noise included, to "
                                  "select each trial's epoch and the best trial on (docs/selection.md).")] = defaults.HOLDOUT,
    dataset: DatasetName = "shapes", data_root: DataRoot = None, dataset_option: DatasetOptions = [],
    backbone: Backbone = "tiny", weights: Weights = None, noise_protocol: NoiseProtocol = "thirds",
    epochs: Epochs = defaults.EPOCHS, batch_size: BatchSize = defaults.BATCH_SIZE,
    output: Annotated[Path, Opt("--output", "-o", help="Results directory (finished cells are reused).")] = Path("results"),
    cache_dir: CacheDir = Path("datasets"), plugin: Plugins = [], device: Device = "cpu", precision: Precision = "fp32",
    jobs: Jobs = 0,
) -> None:
    """Tune every method with the same budget: --trials configurations each, run as ordinary
    cells <method>:trial<k> (resumable, parallel), selected on the held-out split by the report."""
    grid = sweep_grid(split_list(methods, str, "--methods"), noise, trials, plugin, dict(
        seeds=split_list(seeds, int, "--seeds"), dataset=dataset, backbone=backbone, weights=weights,
        noise_protocol=noise_protocol, epochs=epochs, batch_size=batch_size, output=output, cache_dir=cache_dir,
        data_root=data_root, plugin_files=list(plugin), device=device, dataset_options=parse_dataset_options(dataset_option),
        holdout=holdout, precision=precision))
    outcomes = run_here(grid, jobs)
    print_summary(grid, outcomes)
    if any(o.status == "failed" for o in outcomes):
        raise typer.Exit(1)


@app.command()
def calibrate(
    dataset: DatasetName = "shapes", data_root: DataRoot = None, dataset_option: DatasetOptions = [],
    backbone: Backbone = "tiny", weights: Weights = None, noise_protocol: NoiseProtocol = "thirds",
    seeds: Seeds = "0,1,2", epochs: Epochs = defaults.EPOCHS, batch_size: BatchSize = defaults.BATCH_SIZE,
    holdout: Holdout = None,
    output: Annotated[Path, Opt("--output", "-o", help="Results directory (finished cells are reused).")] = Path("results/calibration"),
    cache_dir: CacheDir = Path("datasets"), plugin: Plugins = [], device: Device = "cpu", precision: Precision = "fp32",
    jobs: Jobs = 0,
    no_hosted: Annotated[bool, Opt("--no-hosted", help="Leave out the hosted methods' clean cells: the target "
                                   "'every hosted method learns' then reads n/a.")] = False,
) -> None:
    """Check that a setting is in the papers' regime (docs/benchmark.md); exit 1 if a target is missed.

    Runs sprc at 0, 50 and 80% noise, the perfect filter at 50 and 80%,
    every hosted method at 0% and the reference rows (finished cells in
    --output are reused), then prints each calibration figure beside its target.
    """
    grid = calibrate_grid(dict(
        seeds=split_list(seeds, int, "--seeds"), dataset=dataset, backbone=backbone, weights=weights,
        noise_protocol=noise_protocol, epochs=epochs, batch_size=batch_size, output=output, cache_dir=cache_dir,
        data_root=data_root, dataset_options=parse_dataset_options(dataset_option), device=device, precision=precision,
        holdout=holdout, plugin_files=list(plugin)), not no_hosted)
    failed = [o for o in run_here(grid, jobs) if o.status == "failed"]
    for o in failed:
        console.print(f"[red]{o.cell.key.method} at {o.cell.key.noise_rate:g}, seed {o.cell.key.seed} failed: {escape(o.error)}[/]")
    if not calibration_checks(grid, seeds) or failed:
        raise typer.Exit(1)


@app.command()
def report(
    results: Results = Path("results"),
    output: Path = typer.Option(Path("reports"), "--output", "-o", help="Where the figures, report.md and index.html go."),
    published: list[Path] = typer.Option(
        [], "--published", help="A CSV of your own numbers to show beside the papers' (same layout as the shipped tables); repeatable."
    ),
    readme: Optional[Path] = typer.Option(None, "--readme", help="A Markdown file whose generated results block to "
                                          "rewrite from this report, e.g. README.md."),
    plugin: Plugins = [],
) -> None:
    """Build the report of a results directory: PNG figures, report.md and a self-contained index.html.
    FashionIQ and CIRR settings show the papers' published numbers beside the measured ones; a
    --plugin noise protocol's description of its noise types words the detection figure."""
    register_plugins(plugin)
    if not write_report(results, output, published, readme):
        raise typer.Exit(2)


app.add_typer(results_app, name="results")
app.add_typer(data_app, name="data")
app.add_typer(start_app, name="start")
app.add_typer(noise_app, name="noise")
app.command()(predict)
app.command()(reproduce)
app.command("list")(list_)
app.command("check-plugin")(check_plugin)
app.command()(study)
