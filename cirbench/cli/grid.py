"""Building and running a grid from the command line, for ``run``, ``sweep`` and
``calibrate``: the validated grid (``--methods``, ``--noise``, ``--ablate``'s rows, ``--set``,
``--plugin``), the pre-flight of its dataset, the run here with a progress line per cell or
one scheduler job per cell, and the run summary read back from the store. The engine is
imported inside the functions, so that ``cirbench --help`` imports no torch.
"""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from cirbench.cli.options import console, fail, print_problems, split_list
from cirbench.config import ConfigError, parse_overrides

DEFAULT_METHODS = "sprc,oracle"
DEFAULT_NOISE = "0,0.5,0.8"


def resolved_holdout(holdout: float | None, dataset: str) -> float:
    """``--holdout`` as given, else the default of ``dataset``: :data:`cirbench.defaults.HOLDOUT`
    for a generated dataset, none for one read from the user's files (its training set stays
    the papers'). An unknown dataset resolves to 0; the grid then names it."""
    from cirbench import defaults
    from cirbench.data.registry import DATASETS

    if holdout is not None:
        return holdout
    loader = DATASETS.get(dataset) if dataset in DATASETS else None
    return defaults.HOLDOUT if loader is not None and not loader.files else 0.0


def kept_set_options(frontier: bool, purity: str | None, noise_types: bool, replay: str | None) -> dict:
    """The ``GridSpec`` fields of ``--frontier``, ``--frontier-purity`` (which implies it),
    ``--noise-types`` and ``--replay`` (:mod:`cirbench.engine.kept_plan`)."""
    from cirbench import defaults

    purities = split_list(purity, float, "--frontier-purity") if purity is not None else list(defaults.FRONTIER_PURITIES)
    return {"frontier": purities if frontier or purity is not None else [], "noise_types": noise_types,
            "replay": split_list(replay, str, "--replay") if replay else []}


def validated_grid(methods: str | None, noise: str | None, ablate: str | None, set_: list[str], plugin: list[Path], fields: dict,
                   absolute: bool = False, discovery=None):
    """The validated grid of ``cirbench run`` (--methods, --noise and --ablate's rows, --set,
    --plugin and the other ``fields`` of its spec), its plugin warnings printed, its dataset loaded.
    A ``holdout`` of None in ``fields`` is the dataset's default, resolved once the plugins
    (which may define the dataset) are registered. With ``absolute``, its paths are made
    absolute first, as a scheduler job elsewhere needs them (and so its run ids name them).
    ``discovery``: the plugins when already discovered (once per process)."""
    from cirbench.engine.grid import Grid
    from cirbench.engine.spec import GridError, GridSpec, absolute_spec
    from cirbench.plugins import discover

    try:
        discovery = discovery or discover(list(plugin))
        if discovery.errors:
            raise GridError("; ".join(discovery.errors))
        fields = {**fields, "holdout": resolved_holdout(fields.get("holdout"), fields.get("dataset", "shapes"))}
        labels = split_list(methods if methods is not None else ("" if ablate else DEFAULT_METHODS), str, "--methods")
        overrides = parse_overrides(list(set_))
        rates = split_list(noise, float, "--noise") if noise is not None else None
        if ablate:
            from cirbench.engine.ablation import describe_ablation, expand_ablations, merge_rows

            ablation = expand_ablations(split_list(ablate, str, "--ablate"), discovery.methods)
            labels, overrides = merge_rows(labels, overrides, ablation)
            rates = ablation.noise_rates if rates is None else rates
            console.print(f"[dim]--ablate: {escape(describe_ablation(ablation))}[/]")
        rates = rates if rates is not None else split_list(DEFAULT_NOISE, float, "--noise")
        spec = GridSpec(methods=labels, noise_rates=rates, overrides=overrides, **fields)
        grid = Grid(absolute_spec(spec) if absolute else spec, discovery)
    except (GridError, ConfigError) as exc:
        fail(str(exc))
    for problem in grid.discovery.problems:
        console.print(f"[yellow]warning:[/] {problem}")
    for line in grid.skipped:
        console.print(f"[dim]skipped: {escape(line)}[/]")
    preflight_grid(grid)
    return grid


def preflight_grid(grid) -> None:
    """Load and check the grid's dataset and plugins before any cell runs
    (:func:`cirbench.engine.runner.preflight`): a failure stops the run here, naming the
    plugin and the rule; samples dropped under --allow-missing are listed."""
    import cirbench.cli.show as show
    from cirbench.data.check import DatasetProblemsError
    from cirbench.engine.runner import preflight

    try:
        checked = preflight(grid, announce=lambda message: console.print(f"[dim]{escape(message)}[/]"))
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
    from cirbench.engine.runner import resolve_jobs, run_grid

    try:
        jobs = resolve_jobs(jobs, grid.spec.device)
    except ValueError as exc:
        fail(str(exc))
    with show.GridProgress(console) as progress:
        return run_grid(grid, jobs, progress)


def launch(grid, launcher: str, gpus_per_cell: int, scheduler_option: list[str]) -> int:
    """Submit one job per pending cell, list the jobs (waiting for them with ``local``); the exit code."""
    import cirbench.cli.show as show
    from cirbench.engine import launch as scheduler, runner

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
    from cirbench.engine.spec import backbone_label, dataset_label
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
    """The validated grid of ``cirbench sweep``: ``trials`` rows per method (trial 0 the
    defaults, :mod:`cirbench.engine.sweep`), the other ``fields`` as in :func:`validated_grid`."""
    from cirbench.engine.sweep import SweepError, sweep_rows
    from cirbench.plugins import discover

    holdout = fields["holdout"]
    if not 0.0 < holdout < 1.0:
        fail(f"--holdout {holdout:g}: a sweep selects on the held-out split, give a share in (0, 1), e.g. 0.1")
    discovery = discover(list(plugin))
    try:
        labels, overrides = sweep_rows(methods, trials, discovery, fields.get("backbone", "tiny"))
    except (SweepError, KeyError) as exc:
        fail(str(exc).strip("'\""))
    sets = [f"{label}.{key}={value}" for label, values in overrides.items() for key, value in values.items()]
    return validated_grid(",".join(labels), noise, None, sets, plugin, fields, discovery=discovery)


def calibrate_grid(fields: dict, hosted: bool = True):
    """The calibration grid of ``cirbench calibrate`` (:mod:`cirbench.engine.calibrate`) on the
    setting of ``fields`` (a ``holdout`` of None: the dataset's default), with the hosted
    methods' clean cells unless ``hosted`` is False, pre-flighted."""
    from cirbench.engine.calibrate import calibration_grid
    from cirbench.engine.spec import GridError, GridSpec
    from cirbench.plugins import discover

    discovery = discover(list(fields.get("plugin_files", [])))  # a plugin's dataset resolves its own held-out default
    fields = {**fields, "holdout": resolved_holdout(fields.get("holdout"), fields.get("dataset", "shapes"))}
    try:
        grid = calibration_grid(GridSpec(methods=["sprc"], noise_rates=[0.0], **fields), discovery, hosted)
    except GridError as exc:
        fail(str(exc))
    preflight_grid(grid)
    return grid


def calibration_checks(grid, seeds: str) -> bool:
    """Print the calibration checks of ``grid``'s setting and write them to calibration.md;
    whether none failed."""
    import cirbench.cli.show as show
    from cirbench.engine.spec import backbone_label, dataset_label
    from cirbench.report.calibration import checks_markdown, run_calibration_checks
    from cirbench.results.atomic import atomic_write_text

    spec = grid.spec
    try:
        checks = run_calibration_checks(spec.output, dataset_label(spec), backbone_label(spec), spec.noise_protocol)
    except ValueError as exc:
        fail(str(exc))
    show.calibration(console, checks, f"calibration: {dataset_label(spec)} / {backbone_label(spec)} / "
                                      f"{spec.noise_protocol}, seeds {seeds}")
    path = spec.output / "calibration.md"
    atomic_write_text(checks_markdown(checks) + "\n", path)
    console.print(f"written: {path}")
    return all(c.passed is not False for c in checks)


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
    from cirbench.report import ReportError, build_report
    from cirbench.report.published import PublishedFileError
    from cirbench.report.readme import ReadmeError, update_readme
    from cirbench.results.store import ResultsFolderError

    try:
        page = build_report(results, output, published or [])
        console.print(f"report written: {page} and {output / 'report.md'}")
        if readme is not None:
            changed = update_readme(readme, output)
            console.print(f"{readme}: results block {'rewritten' if changed else 'unchanged'} from {output}")
    except (ReportError, PublishedFileError, ResultsFolderError, ReadmeError, OSError) as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}")
        return False
    return True
