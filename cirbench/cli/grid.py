"""A grid from the command line, for ``run``, ``sweep`` and ``calibrate``: their options
(``--methods``, ``--noise``, ``--ablate``, ``--set``, ``--plugin``) parsed into the calls of
:mod:`cirbench.api` (which holds the defaults, the held-out rule and the grids' rows), and
what comes back shown: the plugin warnings, the pre-flight, a progress line per cell or one
scheduler job per cell, the run summary, the calibration checks, the report written. The
API and the engine are imported inside the functions, so that ``cirbench --help`` imports no torch.
"""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from cirbench.cli.options import console, fail, print_problems, split_list
from cirbench.settings.config import ConfigError, parse_overrides

def kept_set_options(frontier: bool, purity: str | None, noise_types: bool, replay: str | None) -> dict:
    """The ``GridSpec`` fields of ``--frontier``, ``--frontier-purity`` (which implies it),
    ``--noise-types`` and ``--replay`` (:func:`cirbench.api.grids.kept_set_fields`)."""
    from cirbench.api.grids import kept_set_fields

    purities = split_list(purity, float, "--frontier-purity") if purity is not None else None
    return kept_set_fields(frontier, purities, noise_types, split_list(replay, str, "--replay") if replay else None)


def validated_grid(methods: str | None, noise: str | None, ablate: str | None, set_: list[str], plugin: list[Path], fields: dict,
                   absolute: bool = False):
    """The validated grid of ``cirbench run`` (:func:`cirbench.api.grids.grid` of --methods,
    --noise, --ablate, --set and the other ``fields`` of its spec, with ``plugin`` registered),
    its ablation's rows, plugin warnings and skipped cells printed, pre-flighted."""
    from cirbench.api.grids import grid
    from cirbench.engine.planning.spec import GridError

    def announce(message: str) -> None:
        console.print(f"[dim]{escape(message)}[/]")

    try:
        built = grid(split_list(methods, str, "--methods") if methods is not None else None,
                     split_list(noise, float, "--noise") if noise is not None else None,
                     ablate=split_list(ablate, str, "--ablate") if ablate else None, overrides=parse_overrides(list(set_)),
                     absolute=absolute, announce=announce, **{**fields, "plugin_files": list(plugin)})
    except (GridError, ConfigError) as exc:
        fail(str(exc))
    return shown_grid(built)


def shown_grid(grid):
    """``grid`` once its plugin warnings and skipped cells are printed and it is pre-flighted."""
    for problem in grid.discovery.problems:
        console.print(f"[yellow]warning:[/] {problem}")
    for line in grid.skipped:
        console.print(f"[dim]skipped: {escape(line)}[/]")
    preflight_grid(grid)
    return grid


def preflight_grid(grid) -> None:
    """Load and check the grid's dataset and plugins before any cell runs
    (:func:`cirbench.engine.running.runner.preflight`): a failure stops the run here, naming the
    plugin and the rule; samples dropped under --allow-missing are listed."""
    import cirbench.cli.show as show
    from cirbench.api.grids import check
    from cirbench.data.datasets.check import DatasetProblemsError

    try:
        checked = check(grid, announce=lambda message: console.print(f"[dim]{escape(message)}[/]"))
    except DatasetProblemsError as exc:
        print_problems(exc.report.errors, 30)
        fail(str(exc).split(":\n", 1)[0])
    except (ValueError, OSError) as exc:
        fail(str(exc))
    if checked is not None:
        show.preflight(console, checked)


def run_here(grid, jobs: int) -> list:
    """Run ``grid`` here (``jobs`` cells at a time), with a progress line per cell."""
    import cirbench.cli.show as show
    from cirbench.api.grids import run
    from cirbench.engine.running.runner import resolve_jobs

    try:
        resolve_jobs(jobs, grid.spec.device)
    except ValueError as exc:
        fail(str(exc))
    with show.GridProgress(console, len(grid.pending())) as progress:
        return run(grid, jobs, progress)


def launch(grid, launcher: str, gpus_per_cell: int, scheduler_option: list[str]) -> int:
    """Submit one job per pending cell, list the jobs (waiting for them with ``local``); the exit code."""
    import cirbench.cli.show as show
    from cirbench.engine.running import launch as scheduler
    from cirbench.engine.running import runner
    runner.report_damaged(grid, grid.cells, lambda event: show.damaged(console, event))
    try:
        submission = scheduler.submit(grid, launcher, gpus_per_cell, scheduler_option)
        if submission.waiting:
            first = submission.waiting[0].kept.source.run_id
            console.print(f"{len(submission.waiting)} replay(s) not submitted: their sources are not complete yet (e.g. "
                          f"{first}); run the same command again once those jobs end")
        if not submission.jobs and not submission.waiting:
            console.print(f"nothing to submit: all {len(submission.skipped)} cells are complete in {grid.spec.output} "
                          "(--overwrite redoes them)")
            return 0
        outcomes = []
        if launcher == "local":
            with console.status(f"waiting for {len(submission.jobs)} local jobs"):
                outcomes = scheduler.wait(submission)
    except (ValueError, ImportError) as exc:
        fail(str(exc))
    show.submission(console, launcher, submission, outcomes)
    if launcher == "slurm":
        console.print("Rerun the same command to resubmit only the cells that are not complete (after these jobs end).")
    return int(scheduler.launch_failed(outcomes))


def print_summary(grid, outcomes: list) -> None:
    """The run summary table of ``outcomes`` as the store holds them, then each failed cell's
    error whole and where its traceback is."""
    import cirbench.cli.show as show
    from cirbench.engine.planning.spec import backbone_label, dataset_label
    from cirbench.results.store import ResultsFolderError
    from cirbench.results.summary import run_summary

    try:
        summary = run_summary(grid.store, [(o.cell.key, o.status) for o in outcomes], grid.spec.methods)
    except ResultsFolderError as exc:
        console.print(f"[bold red]error:[/] no summary: {escape(str(exc))}")
        return
    spec = grid.spec
    show.summary(console, summary, f"cirbench run: {dataset_label(spec)} / {backbone_label(spec)} / "
                                   f"{spec.noise_protocol} -> {spec.output}")
    show.failures(console, [(o.cell.key, o.error) for o in outcomes if o.status == "failed"], str(spec.output))


def sweep_grid(methods: list[str], noise: str | None, trials: int, plugin: list[Path], fields: dict):
    """The validated grid of ``cirbench sweep`` (:func:`cirbench.api.grids.sweep`), shown and
    pre-flighted as in :func:`validated_grid`."""
    from cirbench.api.grids import sweep
    from cirbench.engine.planning.spec import GridError

    try:
        built = sweep(methods, split_list(noise, float, "--noise") if noise is not None else None, trials,
                      **{**fields, "plugin_files": list(plugin)})
    except (GridError, ConfigError) as exc:
        fail(str(exc))
    return shown_grid(built)


def calibrate_grid(fields: dict, hosted: bool = True):
    """The calibration grid of ``cirbench calibrate`` (:func:`cirbench.api.grids.calibration`)
    on the setting of ``fields``, with the hosted methods' clean cells unless ``hosted`` is
    False, pre-flighted."""
    from cirbench.api.grids import calibration
    from cirbench.engine.planning.spec import GridError

    try:
        grid = calibration(hosted, **fields)
    except GridError as exc:
        fail(str(exc))
    preflight_grid(grid)
    return grid


def calibration_checks(grid, seeds: str) -> bool:
    """Print the calibration checks of ``grid``'s setting and write them to calibration.md;
    whether none failed."""
    import cirbench.cli.show as show
    from cirbench.api.reports import check_calibration
    from cirbench.engine.planning.spec import backbone_label, dataset_label

    spec = grid.spec
    try:
        calibration = check_calibration(grid)
    except ValueError as exc:
        fail(str(exc))
    show.calibration(console, calibration.checks, f"calibration: {dataset_label(spec)} / {backbone_label(spec)} / "
                                                  f"{spec.noise_protocol}, seeds {seeds}")
    console.print(f"written: {calibration.path}")
    return calibration.passed


def register_plugins(plugin: list[Path]) -> None:
    """Register the plugins of ``--plugin`` (a command that builds no grid: ``report``); a
    file that is missing, does not import or defines none stops the command."""
    from cirbench.plugins import discover

    errors = discover(list(plugin)).errors if plugin else []
    if errors:
        fail("; ".join(errors))


def write_report(results: Path, output: Path, published: list[Path] | None = None, readme: Path | None = None) -> bool:
    """Build the report of ``results`` into ``output`` and, with ``readme``, rewrite that
    file's generated results block from it; whether both were written (else the error is printed)."""
    from cirbench.api.reports import REPORT_ERRORS, write_report as written

    try:
        done = written(results, output, published or [], readme)
    except REPORT_ERRORS as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}")
        return False
    console.print(f"report written: {done.page} and {output / 'report.md'}")
    if readme is not None:
        console.print(f"{readme}: results block {'rewritten' if done.readme_changed else 'unchanged'} from {output}")
    return True
