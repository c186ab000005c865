"""The ``cirbench`` command line (typer + rich)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cirbench.config import ConfigError, parse_overrides

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Benchmark composed image retrieval under noisy triplets.")
console = Console()


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
    methods: str = typer.Option("sprc,oracle", "--methods", "-m", help="Comma-separated method names."),
    noise: str = typer.Option("0,0.5,0.8", "--noise", "-n", help="Comma-separated noise rates in [0, 1)."),
    seeds: str = typer.Option("0", "--seeds", help="Comma-separated seeds."),
    dataset: str = typer.Option("shapes", "--dataset", "-d", help="Dataset name (see `cirbench list datasets`)."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Root of a dataset's files (FashionIQ, CIRR)."),
    backbone: str = typer.Option("tiny", "--backbone", "-b", help="Backbone name (see `cirbench list backbones`)."),
    weights: Optional[str] = typer.Option(None, "--weights", help="Backbone weights: a local directory or tag."),
    noise_protocol: str = typer.Option("thirds", "--noise-protocol", help="Noise protocol (see `cirbench list noise`)."),
    epochs: int = typer.Option(6, "--epochs", help="Training epochs per cell."),
    batch_size: int = typer.Option(128, "--batch-size", help="Training batch size."),
    output: Path = typer.Option(Path("results"), "--output", "-o", help="Results directory (parquet tables)."),
    cache_dir: Path = typer.Option(Path("datasets"), "--cache-dir", help="Where generated data and feature caches live."),
    set_: list[str] = typer.Option([], "--set", help="Hyperparameter override <method>.<key>=<value>; repeatable."),
    plugin: list[Path] = typer.Option([], "--plugin", help="A Python file defining a method plugin; repeatable."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Redo cells that are already complete."),
    device: str = typer.Option("cpu", "--device", help="torch device, e.g. cpu or cuda."),
) -> None:
    """Run a grid: every method x noise rate x seed, one cell each, results under --output."""
    from cirbench.engine.grid import Grid, GridError, GridSpec

    try:
        spec = GridSpec(
            methods=_split(methods, str, "--methods"), noise_rates=_split(noise, float, "--noise"),
            seeds=_split(seeds, int, "--seeds"), dataset=dataset, backbone=backbone, weights=weights,
            noise_protocol=noise_protocol, epochs=epochs, batch_size=batch_size, output=output,
            cache_dir=cache_dir, data_root=data_root, overrides=parse_overrides(list(set_)),
            plugin_files=list(plugin), overwrite=overwrite, device=device,
        )
        grid = Grid(spec)
    except (GridError, ConfigError) as exc:
        _fail(str(exc))
        return
    for problem in grid.discovery.problems:
        console.print(f"[yellow]warning:[/] {problem}")

    outcomes = []
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"), console=console,
    ) as progress:
        for cell in grid.cells:
            k = cell.key
            task = progress.add_task(f"{k.method:>8} noise={k.noise_rate:<4g} seed={k.seed}", total=None, status="")
            state = {"loss": math.nan, "r10": math.nan}

            def update(info: dict, task=task, state=state) -> None:
                if "loss" in info:
                    state["loss"] = info["loss"]
                if "recall" in info:
                    state["r10"] = info["recall"].get("all", {}).get("recall@10", math.nan)
                progress.update(
                    task, total=info["total_steps"], completed=info["step"] + ("recall" not in info),
                    status=f"epoch {info['epoch'] + 1}  loss {state['loss']:.3f}  R@10 {state['r10']:.3f}",
                )

            outcome = grid.run_cell(cell, update, announce=lambda m: progress.console.print(f"[dim]{m}[/]"))
            if outcome.status == "skipped":
                progress.update(task, total=1, completed=1, status="already complete (skipped)")
            elif outcome.status == "failed":
                progress.update(task, status=f"[red]failed: {outcome.error}[/]")
            outcomes.append(outcome)

    _summary(grid, outcomes)
    if any(o.status == "failed" for o in outcomes):
        raise typer.Exit(1)


def _summary(grid, outcomes) -> None:
    metrics = grid.store.read("metrics")
    purity = grid.store.read("purity")
    table = Table(title=f"cirbench run: {grid.spec.dataset} / {grid.spec.backbone} / {grid.spec.noise_protocol} -> {grid.spec.output}")
    for column in ("method", "noise", "seed", "status", "R@1", "R@10", "R@50", "purity", "AUROC"):
        table.add_column(column, justify="right" if column not in ("method", "status") else "left")
    for o in outcomes:
        k = o.cell.key
        m = metrics[(metrics.run_id == k.run_id) & (metrics.group == "all")]
        last = m[m.epoch == m.epoch.max()] if len(m) else m
        value = dict(zip(last.metric, last.value))
        p = purity[(purity.run_id == k.run_id) & (purity.noise_type == "all")]
        p = p[p.epoch == p.epoch.max()] if len(p) else p
        fmt = lambda x: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"  # noqa: E731
        table.add_row(
            k.method, f"{k.noise_rate:g}", str(k.seed), o.status,
            fmt(value.get("recall@1")), fmt(value.get("recall@10")), fmt(value.get("recall@50")),
            fmt(float(p.purity.iloc[0]) if len(p) else None), fmt(float(p.auroc.iloc[0]) if len(p) else None),
        )
    console.print(table)


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
