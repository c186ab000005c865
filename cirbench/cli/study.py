"""``cirbench study FILE``: the grids of a study file (:mod:`cirbench.study`) built and
checked first, all of them, then run in order into one results folder (finished cells
skipped, so a rerun resumes), each followed by its summary, and the report built last."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from cirbench.cli.grid import (calibrate_grid, calibration_checks, kept_set_options, print_summary, run_here, sweep_grid,
                               validated_grid, write_report)
from cirbench.cli.options import Opt, Plugins, console, fail

SPEC_FIELDS = ("seeds", "dataset", "backbone", "weights", "noise_protocol", "epochs", "batch_size", "device", "precision",
               "holdout")


def _joined(values: list | None) -> str | None:
    """A list option as the command line writes it (``0,0.5``), None when not given."""
    return None if values is None else ",".join(str(v) for v in values)


def study_grid(entry, study, plugin: list[Path] | None = None):
    """The validated grid of one study entry (a :class:`~cirbench.study.StudyGrid`), as its
    command (``run``, ``sweep``, ``calibrate``) would build it from the same options, with
    the command line's ``plugin`` files after the entry's own."""
    from cirbench import defaults

    options = entry.options
    plugins = [Path(p) for p in options.get("plugins", [])] + list(plugin or [])
    fields = {key: options[key] for key in SPEC_FIELDS if key in options}
    fields.update(output=study.output, cache_dir=study.cache_dir, dataset_options=dict(options.get("dataset_options", {})),
                  data_root=Path(options["data_root"]) if "data_root" in options else None)
    if entry.kind == "calibrate":
        return calibrate_grid({**fields, "plugin_files": plugins})
    fields.setdefault("holdout", defaults.HOLDOUT if entry.kind == "sweep" else None)
    fields["plugin_files"] = plugins
    noise = _joined(options.get("noise"))
    if entry.kind == "sweep":
        return sweep_grid(options["methods"], noise, int(options.get("trials", 4)), plugins, fields)
    fields.update(kept_set_options(options.get("frontier", False), _joined(options.get("frontier_purity")),
                                   options.get("noise_types", False), _joined(options.get("replay"))))
    return validated_grid(_joined(options.get("methods")), noise, _joined(options.get("ablate")), options.get("set", []),
                          plugins, fields)


def run_study(path: Path, jobs: int | None = None, plugin: list[Path] | None = None) -> tuple[list, bool]:
    """Build every grid of the study ``path`` (any error stops it before work; ``plugin``:
    files every grid registers), run them in order and build the report: the outcomes of
    every grid, in order, and whether every calibration target was met and the report written."""
    from cirbench.study import StudyError, load_study

    try:
        study = load_study(path)
    except StudyError as exc:
        fail(str(exc))
    grids = []
    for entry in study.grids:
        console.print(f"[dim]{path}: {entry.where}[/]")
        grids.append((entry, study_grid(entry, study, plugin)))
    outcomes, met = [], True
    for entry, grid in grids:
        console.print(f"[bold]{path}: {entry.where}[/]: {len(grid.pending())} of {len(grid.cells)} cells to run")
        done = run_here(grid, study.jobs if jobs is None else jobs)
        print_summary(grid, done)
        if entry.kind == "calibrate":
            met &= calibration_checks(grid, _joined(grid.spec.seeds) or "")
        outcomes += done
    if study.report is not None:
        met &= write_report(study.output, study.report, readme=study.readme)
    return outcomes, met


def study(
    path: Annotated[Path, typer.Argument(help="A study file (TOML): its grids, their options, the results and report folders.")],
    jobs: Annotated[Optional[int], Opt("--jobs", "-j", envvar="CIRBENCH_JOBS", help="Cells at once (default: the study's jobs, else "
                             "two on a CPU with two or more cores).")] = None,
    plugin: Plugins = [],
) -> None:
    """Run a study file's grids (run, calibrate, sweep, ablations) into one results folder,
    resumably (finished cells are skipped), then build its report; exit 1 if a cell failed,
    a calibration target was missed or the report could not be built."""
    outcomes, met = run_study(path, jobs, list(plugin))
    if not met or any(o.status == "failed" for o in outcomes):
        raise typer.Exit(1)
